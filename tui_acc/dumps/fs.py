"""File-system facts for the readers: folder listings (cheap: one scandir; an unreadable folder is
just empty), and whether a file has settled (may be memory-mapped)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


def subdirs(path: Path) -> list[Path]:
    """The folders directly in ``path`` (following symlinks, as dumps made with -symlink need)."""
    return [Path(p) for _, p in subdir_names(str(path))]


def subdir_names(path: str) -> list[tuple[str, str]]:
    """(name, path) of the folders in ``path``, as strings: cheap at 100,000 folders."""
    try:
        with os.scandir(path) as entries:
            return [(e.name, e.path) for e in entries if e.is_dir()]
    except OSError:
        return []


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
        fd = os.open(file, os.O_RDONLY)
    except OSError:
        return
    try:
        read_ahead(fd, offset, length)
    finally:
        os.close(fd)
