"""Where a dump's files may lead: one policy for every file tui-acc reads from a dump.

A dump from another machine may hold symlinks (or ATB ``data=`` headers) naming files anywhere; by
default none of them may lead out of the dump's folder, so a dump cannot make tui-acc read whatever
its links name. ``--follow-links`` allows any place. The comparison owns one policy per side, and
every reader goes through it: tensor files, ATB payload and alias files, statistics CSVs,
``dump.json``/``construct.json``/``debug.json``, topology and parameter files. What it opens must be
a regular file (``fs.open_regular``).

A refusal is an ``OSError`` (``OutsideDump``): every reader already turns an unreadable file into a
named problem, so a link refused is reported exactly like a file that cannot be read.
"""

from __future__ import annotations

import errno
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tui_acc.dumps.fs import open_regular

FOLLOW_HINT = "not followed (--follow-links allows it)"


class OutsideDump(OSError):
    """A file that resolves outside the dump the policy confines reads to (the message says where
    it leads; the reader that caught it names the file)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(errno.EACCES, message)
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


@dataclass(frozen=True)
class LoadPolicy:
    """``root``: the folder every file must resolve inside; None: anywhere (``--follow-links``)."""

    root: Path | None

    @classmethod
    def inside(cls, dump: Path) -> LoadPolicy:
        """Confined to the dump: its folder, or a single file's folder."""
        return cls((dump if dump.is_dir() else dump.parent).resolve())

    @classmethod
    def anywhere(cls) -> LoadPolicy:
        """Not confined: any file a link or header names may be read (``--follow-links``)."""
        return cls(None)

    @classmethod
    def for_dump(cls, dump: Path, follow_links: bool) -> LoadPolicy:
        """The policy the command line asks for: ``anywhere`` with ``follow_links``, else ``inside``
        the dump."""
        return cls.anywhere() if follow_links else cls.inside(dump)

    def check(self, path: Path, what: str = "links to") -> Path:
        """Where to read ``path``: itself, if it may be read; else OutsideDump naming it and where it
        leads. (A policy that reads a dump's files elsewhere answers with the copy to read:
        cluster/node_files.py; every reader opens what this returns.)"""
        if self.root is None:
            return path
        try:
            target = _resolved(path)
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise OutsideDump(path, f"cannot resolve its path ({exc})") from exc
        if not target.is_relative_to(self.root):
            raise OutsideDump(path, f"{what} {target}, outside the dump {self.root}; {FOLLOW_HINT}")
        return path

    def is_file(self, path: Path) -> bool:
        """Whether ``path`` is a file where this policy reads it (here: ``Path.is_file``; on the node
        that holds it for cluster/node_files.py's)."""
        return path.is_file()

    def open(self, path: Path, mode: str = "rb", **kwargs: Any) -> IO[Any]:
        """``path`` opened for reading if the policy allows it and it is a regular file (a FIFO
        named like a dump file would block the reader: NotRegularFile, an OSError, instead)."""
        return open_regular(self.check(path), mode, **kwargs)

    def read_text(self, path: Path) -> str:
        """The file's text (UTF-8). Raises OSError as ``open`` does, UnicodeDecodeError (a
        ValueError) for bytes that are not UTF-8."""
        with self.open(path, "r", encoding="utf-8") as handle:
            return handle.read()

    def read_json(self, path: Path, **options: Any) -> Any:
        """``json.loads`` of the file (``options`` passed on). A document nested deeper than
        Python's parser goes (``[`` a hundred thousand times) is a ValueError, as malformed JSON
        is, not a RecursionError: every reader already names the file for a ValueError."""
        text = self.read_text(path)
        try:
            return json.loads(text, **options)
        except RecursionError:
            raise ValueError(f"nested over {sys.getrecursionlimit()} levels deep; not read") from None

    def read_json_doubled(self, path: Path) -> tuple[Any, list[tuple[dict[str, Any], list[str]]]]:
        """``read_json``, and each object that names a key more than once, with those keys. JSON
        keeps the last copy at the first one's place, silently: a record given twice (two dumps pasted
        together, a merge gone wrong) would be read as whichever came last. Telling costs a Python
        call per object (a 44 MB dump.json: 1.9 s -> 2.6 s)."""
        doubled: list[tuple[dict[str, Any], list[str]]] = []

        def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            built = dict(pairs)
            if len(built) != len(pairs):
                seen: set[str] = set()
                twice = []
                for key, _ in pairs:
                    if key in seen:
                        twice.append(key)
                    seen.add(key)
                doubled.append((built, twice))
            return built

        return self.read_json(path, object_pairs_hook=build), doubled


def _resolved(path: Path) -> Path:
    """``path.resolve()``, with its folder resolved once for all the files in it: a dump holds
    thousands of files per folder, and a full resolve costs a system call per path component."""
    if path.is_symlink() or path.name in ("", ".", ".."):
        return path.resolve()
    # keyed absolute: a relative folder means another folder once the working directory changes
    return _resolved_folder(path.parent.absolute()) / path.name


@functools.lru_cache(maxsize=4096)
def _resolved_folder(folder: Path) -> Path:
    return folder.resolve()


# For files tui-acc wrote itself or a script was given directly (the demo, benchmarks, tests).
ANYWHERE = LoadPolicy.anywhere()
