"""Computed rows on disk, so a second launch on the same dumps shows its results at once.

One SQLite database (``rows.sqlite3``) in the user's cache directory (``$TUI_ACC_CACHE_DIR``, else
``$XDG_CACHE_HOME/tui-acc``, else ``~/.cache/tui-acc``), never in the dump folders; none at all with
``--no-cache`` or where ``$TUI_ACC_NO_CACHE`` is set (``cache_enabled``: a shared host, once for all).
A row is keyed by the pair of dump folders and by the identity of the files it was computed from
(path, size, modification time), so a re-written file is recomputed. Verdicts are not stored: they
are derived again from the metrics with the thresholds of the session.

SQLite in WAL mode with upserts: two tui-acc processes on the same dumps each add their rows and
neither loses the other's; a flush writes only the new rows; rows of a pair not looked at for
``KEEP_DAYS`` are pruned. A damaged database is set aside, never trusted; a cache that cannot be
read or written says so (``problem``), and the comparison goes on without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tui_acc.dumps.fs import file_kind
from tui_acc.dumps.model import TensorRef
from tui_acc.errors import TuiAccError
from tui_acc.metrics.cache_seal import cache_secret, seal, unsealed
from tui_acc.metrics.schema import ANOMALY_COLUMNS, NOISE_COLUMNS, TENSOR_SCHEMA

# Bump when the kernels change what they compute: old rows are then simply not found.
VERSION = 7  # 7: rows sealed (cache_seal.py); 6: a gathered tensor rank by rank (by_rank)
# what a row is apart from its verdict and the baseline it was judged against (--baseline)
_STORED = [k for k in TENSOR_SCHEMA if k != "passed" and k not in NOISE_COLUMNS and k not in ANOMALY_COLUMNS]
FILE_NAME = "rows.sqlite3"
# a row is about 2 KB of JSON (one tensor's metrics, its by_rank ~80 characters a rank); a stored
# value past this (characters, as SQLite counts them) is not one, and is dropped unread
_MAX_ROW_CHARS = 1 << 20
KEEP_DAYS = 30
_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    pair TEXT NOT NULL,   -- the two dump folders (and the cache version)
    key TEXT NOT NULL,    -- the files the row was computed from
    data TEXT NOT NULL,   -- the row, as JSON
    PRIMARY KEY (pair, key)
);
CREATE TABLE IF NOT EXISTS pairs (pair TEXT PRIMARY KEY, used REAL NOT NULL);
"""


_BUSY_SECONDS = 10  # how long a process waits for another one's write before giving up on the cache


# what _SCHEMA makes, and nothing else: a view, a trigger or another table under these names (a
# planted "pairs" view that recurses for ever) would make each query do what it says, not ours
_OBJECTS = {
    ("table", "rows"),
    ("table", "pairs"),
    ("index", "sqlite_autoindex_rows_1"),
    ("index", "sqlite_autoindex_pairs_1"),
}
_COLUMNS = {"rows": ["pair", "key", "data"], "pairs": ["pair", "used"]}


def _prepare(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer, nor it them
    db.executescript(_SCHEMA)
    found = set(db.execute("SELECT type, name FROM sqlite_master"))
    columns = {table: [row[1] for row in db.execute(f"PRAGMA table_info({table})")] for table in _COLUMNS}
    if found != _OBJECTS or columns != _COLUMNS:  # set aside, as damage is (RowCache._load)
        odd = [f"{kind} {name}" for kind, name in sorted(found - _OBJECTS)]
        odd = odd or [f"no {kind} {name}" for kind, name in sorted(_OBJECTS - found)] or ["other columns"]
        raise sqlite3.DatabaseError(f"not tui-acc's row cache ({', '.join(odd[:3])})")


def _retry_while_busy(step: Callable[[], None], wait: float | None = None) -> None:
    """Run ``step``, again after a short pause while another process holds the database (for up to
    ``wait`` seconds; None: _BUSY_SECONDS, read when called)."""
    deadline = time.monotonic() + (_BUSY_SECONDS if wait is None else wait)
    pause = 0.005
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the database."""
    return "locked" in str(exc) or "busy" in str(exc)


def cache_dir() -> Path:
    """Where the row cache lives: ``$TUI_ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tui-acc``, else
    ``~/.cache/tui-acc``."""
    explicit = os.environ.get("TUI_ACC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "tui-acc"


def cache_enabled() -> bool:
    """False where ``$TUI_ACC_NO_CACHE`` is set (to anything but ``0``): no row is read from disk or
    written there, as with ``--no-cache`` on every command (a shared host, a home on a network disk)."""
    return os.environ.get("TUI_ACC_NO_CACHE", "0") in ("", "0")


def identity(ref: TensorRef) -> str:
    """What a row was computed from: every file's path, size, modification time, and its inode and
    status-change time. A file rewritten to the same size with its old modification time put back
    (``cp --preserve``, ``touch -r``, an unpacked archive) is a new inode or a new ctime: no tool
    can set the ctime, so a rewrite is always seen, and a chmod merely costs a recompute."""
    parts = []
    for path in ref.parts or (ref.path,):
        try:
            stat = path.stat()
            parts.append(
                f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
                f":{stat.st_dev}:{stat.st_ino}:{stat.st_ctime_ns}"
            )
        except OSError:
            parts.append(f"{path}:missing")
    member = f"~{ref.member}" if ref.member else ""  # one of a GE dump file's tensors
    return f"{ref.slot}{member}@" + "|".join(parts) + (f"#{ref.merge}" if ref.merge else "")


# what each stored column may hold besides None (JSON gives ints for whole floats; bool is an int)
_PYTHON_KINDS: dict[object, tuple[type, ...]] = {
    pl.Int64: (int,),
    pl.Float64: (int, float),
    pl.Boolean: (bool,),
}
_KINDS = {name: _PYTHON_KINDS.get(kind, (str,)) for name, kind in TENSOR_SCHEMA.items() if name in _STORED}


def _parsed(data: object) -> dict[str, Any] | None:
    """A stored row, if it parses into a row's shape: every stored column, each None or of its
    column's type. Anything else (a row edited, truncated or written by another version) is None:
    dropped, never used, as its verdict could be anything."""
    try:
        row = json.loads(data)  # type: ignore[arg-type]  # whatever the column holds: checked here
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(row, dict) or row.keys() != _KINDS.keys():
        return None
    for key, value in row.items():
        kinds = _KINDS[key]
        wrong = not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        if value is not None and wrong:
            return None
    return row


class UnsafeCache(TuiAccError, OSError):
    """A cache location SQLite must not open: the message says why (the cache is then not used)."""


# the database and the files SQLite keeps beside it
_DATABASE_FILES = ("", "-wal", "-shm", "-journal")


def _check_location(path: Path) -> None:
    """The database only in a folder of the user's own, made 0700, and only as regular files of the
    user's with one link each: SQLite follows a planted symlink, and writes through a planted hard
    link, to a file elsewhere (UnsafeCache otherwise)."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not hasattr(os, "getuid"):  # no owners to check (not POSIX)
        return
    found = folder.stat()
    if found.st_uid != os.getuid():
        raise UnsafeCache(f"{folder} is not yours (owner uid {found.st_uid}); the cache is not used there")
    if found.st_mode & 0o077:  # others could plant files in it: the folder becomes the user's alone
        folder.chmod(stat.S_IMODE(found.st_mode) & 0o700)
    for suffix in _DATABASE_FILES:
        file = folder / f"{path.name}{suffix}"
        try:
            entry = file.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(entry.st_mode):
            kind = file_kind(entry.st_mode)
            raise UnsafeCache(f"{file} is not a regular file ({kind}); the cache is not used")
        if entry.st_uid != os.getuid():
            raise UnsafeCache(f"{file} is not yours (owner uid {entry.st_uid}); the cache is not used")
        if entry.st_nlink > 1:  # a hard link: SQLite's writes would land in a file elsewhere too
            raise UnsafeCache(
                f"{file} has {entry.st_nlink} hard links (a file elsewhere); the cache is not used"
            )


class RowCache:
    """The cached rows of one golden/test pair of dumps."""

    def __init__(self, golden_dir: Path, test_dir: Path, directory: Path | None = None) -> None:
        self.pair = hashlib.sha1(
            f"v{VERSION}|{golden_dir.resolve()}|{test_dir.resolve()}".encode()
        ).hexdigest()
        self.path = (directory or cache_dir()) / FILE_NAME
        self._rows: dict[str, dict[str, Any]] | None = None
        self._unsaved: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.problem: str | None = None
        # another process held the database past the wait when it was read: it is not waited for
        # again to write (that would double the stall); a write is tried without waiting
        self._locked_out = False

    def get(self, key: str) -> dict[str, Any] | None:
        """A copy of the cached row of ``key``, or None; the first call reads this pair's rows from disk
        (any thread)."""
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            row = self._rows.get(key)
            return dict(row) if row is not None else None

    def put(self, key: str, row: Mapping[str, Any]) -> None:
        """Keep ``row``'s stored columns under ``key``, in memory until ``flush`` writes them (any thread)."""
        stored = {k: row.get(k) for k in _STORED}
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            self._rows[key] = stored
            self._unsaved[key] = stored

    def flush(self) -> None:
        """Add the new rows (an upsert each: what another process added stays); an error is kept in
        ``problem``, not raised."""
        with self._lock:
            if not self._unsaved:
                return
            rows = [(self.pair, key, json.dumps(row)) for key, row in self._unsaved.items()]
            self._unsaved.clear()
        try:
            with self._connect(wait=0 if self._locked_out else _BUSY_SECONDS) as db:
                secret = cache_secret(self.path.parent)
                rows = [(pair, key, seal(secret, pair, key, data)) for pair, key, data in rows]
                db.executemany(
                    "INSERT INTO rows (pair, key, data) VALUES (?, ?, ?) "
                    "ON CONFLICT (pair, key) DO UPDATE SET data = excluded.data",
                    rows,
                )
                db.execute(
                    "INSERT INTO pairs (pair, used) VALUES (?, ?) "
                    "ON CONFLICT (pair) DO UPDATE SET used = excluded.used",
                    (self.pair, time.time()),
                )
        except (OSError, sqlite3.Error) as exc:
            self.problem = f"{self.path}: cache not written ({exc}); rows are computed again next time"
        else:
            self._locked_out = False  # the other process let go

    def _load(self) -> dict[str, dict[str, Any]]:
        """This pair's rows; the pairs not used for KEEP_DAYS go."""
        if not self.path.is_file():
            return {}
        try:
            with self._connect() as db:
                stale = time.time() - KEEP_DAYS * 86400
                gone = [p for (p,) in db.execute("SELECT pair FROM pairs WHERE used < ?", (stale,))]
                db.executemany("DELETE FROM rows WHERE pair = ?", [(p,) for p in gone])
                db.executemany("DELETE FROM pairs WHERE pair = ?", [(p,) for p in gone])
                secret = cache_secret(self.path.parent)
                found = db.execute(
                    "SELECT key, CASE WHEN length(data) <= ? THEN data END FROM rows WHERE pair = ?",
                    (_MAX_ROW_CHARS, self.pair),
                ).fetchall()
                db.execute("UPDATE pairs SET used = ? WHERE pair = ?", (time.time(), self.pair))
        except sqlite3.OperationalError as exc:  # locked past the timeout, a full disk: not damage
            self._locked_out = _busy(exc)
            self.problem = f"{self.path}: cache not read ({exc}); rows are computed"
            return {}
        except sqlite3.DatabaseError as exc:  # damaged: set aside, recomputed, never trusted
            self._set_aside(exc)
            return {}
        except (OSError, sqlite3.Error) as exc:
            self.problem = f"{self.path}: cache not read ({exc}); rows are computed"
            return {}
        rows = {}
        for key, stored in found:
            row = _parsed(unsealed(secret, self.pair, key, stored))
            if row is not None:
                rows[key] = row
        if len(rows) < len(found):  # a damaged, edited or foreign row is dropped, recomputed, written over
            damaged = len(found) - len(rows)
            self.problem = (
                f"{self.path}: {damaged} cached rows ignored (damaged, edited, or not sealed by this "
                "cache's secret); they are computed again"
            )
        return rows

    @contextmanager
    def _connect(self, wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction on the database (committed on success), the connection closed after.

        Taken with ``BEGIN IMMEDIATE``: a transaction that starts as a reader and later writes can be
        refused at once, without waiting, when another process wrote in between (SQLite's deadlock
        avoidance, and WAL's stale snapshot), while an immediate one waits its turn through the busy
        timeout. Creating the database and switching it to WAL can still be refused at once when two
        processes do it together; that first step is retried until ``wait`` seconds have passed."""
        _check_location(self.path)
        wait = _BUSY_SECONDS if wait is None else wait  # read when called: a test shortens it
        db = sqlite3.connect(self.path, timeout=wait, isolation_level=None)
        try:
            _retry_while_busy(lambda: _prepare(db), wait)
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back already (an I/O error, a full disk)
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _set_aside(self, exc: Exception) -> None:
        damaged = self.path.with_name(f"{self.path.name}.damaged")
        try:
            self.path.replace(damaged)
            where = f"moved to {damaged}"
        except OSError:
            where = "left in place"
        self.problem = f"{self.path}: unreadable cache ignored ({type(exc).__name__}: {exc}; {where})"
