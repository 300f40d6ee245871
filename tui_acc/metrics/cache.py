"""Computed rows on disk, so a second launch on the same dumps shows its results at once.

One parquet file per pair of dump folders, in the user's cache directory
(``$TUI_ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/tui-acc``, else ``~/.cache/tui-acc``), never in
the dump folders. A row is keyed by the identity of the files it was computed from (path, size,
modification time), so a re-written file is recomputed. Verdicts are not stored: they are
derived again from the metrics with the thresholds of the session. Files are replaced
atomically (a temporary file, then a rename), and a damaged cache file is ignored, not trusted.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import polars as pl

from tui_acc.atomic import temp_beside
from tui_acc.dumps.model import TensorRef
from tui_acc.metrics.schema import TENSOR_SCHEMA

# Bump when the kernels change what they compute: old caches are then simply not found.
VERSION = 4  # 4: checksums and NaN flags of statistics-only dumps
_STORED = {k: v for k, v in TENSOR_SCHEMA.items() if k != "passed"}


def cache_dir() -> Path:
    explicit = os.environ.get("TUI_ACC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "tui-acc"


def identity(ref: TensorRef) -> str:
    """What a row was computed from: every file's path, size and modification time."""
    parts = []
    for path in ref.parts or (ref.path,):
        try:
            stat = path.stat()
            parts.append(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:missing")
    return f"{ref.slot}@" + "|".join(parts) + (f"#{ref.merge}" if ref.merge else "")


class RowCache:
    """The cached rows of one golden/test pair of dumps."""

    def __init__(self, golden_dir: Path, test_dir: Path, directory: Path | None = None) -> None:
        digest = hashlib.sha1(f"v{VERSION}|{golden_dir.resolve()}|{test_dir.resolve()}".encode()).hexdigest()[
            :20
        ]
        self.path = (directory or cache_dir()) / f"{digest}.parquet"
        self._rows: dict[str, dict[str, Any]] | None = None
        self._unsaved: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.problem: str | None = None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            row = self._rows.get(key)
            return dict(row) if row is not None else None

    def put(self, key: str, row: dict[str, Any]) -> None:
        stored = {k: row.get(k) for k in _STORED}
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            self._rows[key] = stored
            self._unsaved[key] = stored

    def flush(self) -> None:
        """Write the new rows (merged with what is on disk) atomically; a write error is kept, not raised."""
        with self._lock:
            if not self._unsaved or self._rows is None:
                return
            rows = [{"key": key, **row} for key, row in self._rows.items()]
            self._unsaved.clear()
        frame = pl.DataFrame(rows, schema={"key": pl.String, **_STORED})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = temp_beside(self.path, ".parquet.tmp")
            os.close(fd)
            try:
                frame.write_parquet(tmp)
                tmp.replace(self.path)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            self.problem = f"{self.path}: cache not written ({exc.strerror or exc})"

    def _load(self) -> dict[str, dict[str, Any]]:
        if not self.path.is_file():
            return {}
        try:
            frame = pl.read_parquet(self.path)
            return {row.pop("key"): row for row in frame.iter_rows(named=True)}
        except Exception as exc:  # a damaged cache is recomputed, never trusted
            self.problem = f"{self.path}: unreadable cache ignored ({type(exc).__name__})"
            return {}
