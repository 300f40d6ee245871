"""A stored record's CRC-32 against the one its zip directory lists (``reader.py`` reads the record).

A record found whole once is not checked again while its file stays as it was: a replay reads again
the weights the comparison has just read (a 7B-shaped report read 207 tensors a second time), and
each check reads every byte. "As it was": the same file (device, inode), size, modification and
status-change times, record place and listed CRC, and only for a file that had settled when it was
checked: neither modified nor changed for ``SETTLED_SECONDS``. A rewrite stamps the status-change
time of its writing, which nothing sets back (the modification time ``cp -p`` or ``touch`` do), so it
cannot carry the old times (the clock that stamps them ticks every few milliseconds: a rewrite within
one tick of the check is what settling rules out).
"""

from __future__ import annotations

import os
import threading
import time
import zipfile
from collections import OrderedDict

import numpy as np
from zlib_ng.zlib_ng import crc32

from tui_acc.dumps.fs import SETTLED_SECONDS
from tui_acc.dumps.torchfile.refusals import TorchFileError

_CRC_BLOCK = 1 << 24  # bytes per call
_KEPT = 16_384  # records remembered as checked (some 200 bytes each), the least recently read dropped
_Checked = tuple[int, ...]
_checked: OrderedDict[_Checked, None] = OrderedDict()
_lock = threading.Lock()


def check_crc(info: zipfile.ZipInfo, data: np.ndarray, listed: int, file: os.stat_result, start: int) -> None:
    """A stored record's bytes against the CRC-32 its directory lists, as zipfile checks them (torch.load
    does not: docs/formats.md §6.2): a flipped bit is named, not compared. A CRC of 0 is what torch
    writes when told not to compute them (``set_crc32_options(False)``): nothing to check. Mapped
    pages are read here the first time, which the comparison of a whole tensor does next anyway; a
    small view of a large storage (``logits[:, -1]`` saved as it is) reads its whole record.
    ``file``: the file's state when it was opened; ``start``: where the record's bytes begin."""
    if listed == 0:
        return
    key = (
        file.st_dev,
        file.st_ino,
        file.st_size,
        file.st_mtime_ns,
        file.st_ctime_ns,
        start,
        data.size,
        listed,
    )
    with _lock:
        if key in _checked:
            _checked.move_to_end(key)
            return
    if _crc32(data.data) != listed:
        raise TorchFileError(
            f"{info.filename}: its bytes do not match the CRC-32 the archive lists (damaged in copying?)"
        )
    if time.time() - max(file.st_mtime, file.st_ctime) >= SETTLED_SECONDS:
        with _lock:
            _checked[key] = None
            while len(_checked) > _KEPT:
                _checked.popitem(last=False)


def _crc32(data: memoryview) -> int:
    """The CRC-32 of ``data`` by zlib-ng (some 20 GB/s here with the CPU's carry-less multiply, where
    the zlib 1.2 Python links runs at 4: its CRC was 37 % of a 7B-shaped report,
    docs/performance.md), 16 MiB a call: no one call's length near 32 bits. zlib-ng lets go of the
    GIL while it runs (another thread ran throughout a 1 GiB CRC), so the metrics' two threads check
    their files side by side and the UI thread never waits on one."""
    found = 0
    flat = data.cast("B")
    for start in range(0, len(flat), _CRC_BLOCK):
        found = crc32(flat[start : start + _CRC_BLOCK], found)
    return found
