"""Byte ranges of tensor files memory-mapped where that cannot kill the process.

A mapped tensor is paged in when the comparison reaches it, never copied, but a file truncated in
place while mapped (torch.save rewriting it, a dumper run again into the same folder) raises SIGBUS
on the next access past its new end, which no Python code can catch. The C extension ``_mapguard``
(built at install, optional, POSIX) maps ranges itself and turns such a fault into zeros; the
file's changed size and time then make its row an error (loading.changed_since): "changed while
being read". Where the extension is not built, nothing is mapped: ranges are read.
"""

from __future__ import annotations

import functools
from types import ModuleType

import numpy as np


def map_bytes(fd: int, offset: int, length: int) -> np.ndarray | None:
    """``length`` bytes of the open file ``fd`` from ``offset`` as a uint8 array, mapped copy-on-write
    (writable; a page is read when first touched) and guarded against the file shrinking. None where
    no guard is built or all its slots are taken: the caller reads the range instead."""
    guard = _guard()
    if guard is None or length <= 0:
        return None
    try:
        mapping = guard.Mapping(fd, offset, length)
    except MemoryError:  # every slot taken: thousands of mapped storages alive at once
        return None
    return np.frombuffer(mapping, dtype=np.uint8)


@functools.cache
def _guard() -> ModuleType | None:
    try:
        from tui_acc.dumps.mapped import _mapguard
    except ImportError:  # not built: no C compiler at install, or not POSIX
        return None
    return _mapguard
