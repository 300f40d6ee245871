"""File-system facts for the readers: folder listings (cheap: one scandir; an unreadable folder lists
as empty, and ``unreadable`` says why where a reader must name it), files opened only when they are
regular files, and whether a file has settled (may be memory-mapped)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any


def subdirs(path: Path, skipped: list[str] | None = None) -> list[Path]:
    """The folders directly in ``path`` (following symlinks, as dumps made with -symlink need); those
    whose names are not UTF-8 left out (``subdir_names``)."""
    return [Path(p) for _, p in subdir_names(str(path), skipped)]


def subdir_names(path: str, skipped: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, path) of the folders in ``path``, as strings: cheap at 100,000 folders. A folder whose
    name is not UTF-8 is left out, its path (as ``shown``) added to ``skipped`` where the caller
    names it: nothing of a dump reaches a frame, a JSON reader or a terminal with such a name."""
    try:
        with os.scandir(path) as entries:
            found = [(e.name, e.path) for e in entries if e.is_dir()]
    except OSError:
        return []
    if all(name.isascii() for name, _ in found):
        return found
    kept = [(name, folder) for name, folder in found if not not_utf8(name)]
    if skipped is not None:
        skipped += [shown(folder) for name, folder in found if not_utf8(name)]
    return kept


def unnamed_subdirs(path: Path) -> list[Path]:
    """The folders in ``path`` whose names are not UTF-8, as they are on disk: for a reader to tell
    whether one would have been what it looks for, and name it (``shown``)."""
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if not_utf8(e.name) and e.is_dir()]
    except OSError:
        return []


def text_names(names: Iterable[str], folder: str, skipped: list[str]) -> list[str]:
    """``names`` of entries in ``folder`` less those that are not UTF-8, whose paths (as ``shown``)
    are added to ``skipped``: the reader names them (``NOT_UTF8``)."""
    kept = []
    for name in names:
        if not not_utf8(name):
            kept.append(name)
        else:
            skipped.append(shown(str(Path(folder, name))))
    return kept


def unreadable(folder: Path | str) -> str | None:
    """Why ``folder`` cannot be listed and entered (``Permission denied``), or None when it can. An
    access() check, one system call; the folder is opened only when that says no, for the reason
    in the system's words. A reader names such a folder instead of taking it for an empty one."""
    if os.access(folder, os.R_OK | os.X_OK):
        return None
    try:
        with os.scandir(folder):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return "Permission denied" if not os.access(folder, os.X_OK) else None


def folder_problem(folder: Path | str, what: str) -> str | None:
    """The problem to report for ``folder`` if it cannot be read, ``what`` saying what is therefore
    not compared; None when it can be read."""
    why = unreadable(folder)
    return None if why is None else f"cannot list the folder ({why}); {what}"


class NotRegularFile(OSError):
    """A dump file that is a FIFO, a device, a socket or a folder: reading one would block (a FIFO
    waits for a writer forever) or read something that is not the dump. Readers report it as they
    report any unreadable file."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))

    def __str__(self) -> str:
        return str(self.strerror)


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),  # from lstat: what a check that follows no link meets
)


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words."""
    return next((kind for test, kind in _KINDS if test(mode)), "not a file")


def regular_fd(path: Path | str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its status, refused (NotRegularFile) unless it is a
    regular file. The check is made on the open descriptor, not on a name looked up before: opened
    non-blocking, a FIFO neither blocks the open nor can be swapped in between the check and the
    read. The descriptor is left blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotRegularFile(path, file_kind(status.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def open_regular(path: Path | str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, refused (NotRegularFile) unless ``path`` is a regular file."""
    fd, _ = regular_fd(path)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def names_a_file(path: Path) -> bool:
    """Whether ``path`` exists and is not a folder: a reader's marker file (``model_tree.json``,
    ``dump.json``) that turns out to be a FIFO is then read, and refused by name, rather than not
    seen at all."""
    try:
        return not stat.S_ISDIR(path.stat().st_mode)
    except OSError:
        return False


# A file changed this recently may still be being written: torch.save truncates in place, and a
# mapped page that the writer cuts off kills the process with SIGBUS. Such a file is read instead.
SETTLED_SECONDS = 10.0


def settled(path: Path) -> bool:
    """Whether ``path`` has not changed for ``SETTLED_SECONDS`` (safe to memory-map)."""
    try:
        return time.time() - path.stat().st_mtime >= SETTLED_SECONDS
    except OSError:
        return False


def read_ahead(file: Path | int, offset: int, length: int) -> None:
    """Ask the kernel to start reading a byte range of a file (a path, or an open descriptor) now, in
    the background, so that a mapped tensor is mostly in memory by the time the comparison reaches it:
    reading overlaps computing. Only advice: where it cannot be given (not Linux, an unreadable
    file) nothing happens."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or length <= 0:
        return
    if isinstance(file, int):
        with contextlib.suppress(OSError):
            advise(file, offset, length, os.POSIX_FADV_WILLNEED)
        return
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block mere advice
    except OSError:
        return
    try:
        read_ahead(fd, offset, length)
    finally:
        os.close(fd)


# a folder numbered as dumpers number tokens and executions: ASCII digits (``²`` is a digit to
# str.isdigit and not to int), at most 18 of them (a 250-digit "token" fits no 64-bit column)
_NUMBER_NAME = 18


def numbered(name: str) -> int | None:
    """The number a token or execution folder's name is, or None where it is none."""
    if name.isascii() and name.isdigit() and len(name) <= _NUMBER_NAME:
        return int(name)
    return None


def numbered_subdirs(path: str) -> tuple[list[tuple[int, str, str]], list[tuple[str, str]]]:
    """The folders in ``path`` named by a number, as (number, name, path); and those named with
    more digits than a number may have, as (path, why), for the reader to name (others, not
    numbered at all, are no token folders and said nothing of)."""
    by_number: dict[int, list[tuple[str, str]]] = {}
    skipped: list[tuple[str, str]] = []
    for name, folder in subdir_names(path):
        number = numbered(name)
        if number is not None:
            by_number.setdefault(number, []).append((name, folder))
        elif name.isascii() and name.isdigit():
            skipped.append((folder, f"a folder named with {len(name)} digits is no token folder; skipped"))
    found: list[tuple[int, str, str]] = []
    for number, named in by_number.items():
        # "2" and "02" are one token: the dumper's spelling is read (a copy beside it would else
        # replace it without a word), and where neither is its spelling, neither is believed
        kept = [(name, folder) for name, folder in named if name == str(number)] if len(named) > 1 else named
        found += [(number, name, folder) for name, folder in kept]
        for name, folder in named:
            if (name, folder) not in kept:
                said = ", ".join(sorted(n for n, _ in named if n != name))
                skipped.append((folder, f"names token {number}, as {said} beside it does; not compared"))
    return found, skipped


def not_utf8(name: str) -> bool:
    """Whether a file or folder name is not UTF-8 (Python keeps its bytes as surrogates, which no
    frame, JSON reader or terminal takes): such an entry is named and skipped."""
    if name.isascii():
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown(path: str) -> str:
    """``path`` as it can be printed: bytes that are not UTF-8 as U+FFFD."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


NOT_UTF8 = "its name is not UTF-8 (another encoding's bytes); not compared"
NOT_UTF8_PATH = (
    "the path is not UTF-8 (another encoding's bytes, shown as U+FFFD), which no frame, JSON reader or "
    "terminal takes: rename the folders so named (or copy the dump to a folder named in UTF-8)"
)
