"""A stored record's CRC-32 against the one its zip directory lists (``reader.py`` reads the record)."""

from __future__ import annotations

import zipfile

import numpy as np
from zlib_ng.zlib_ng import crc32

from tui_acc.dumps.torchfile.refusals import TorchFileError

_CRC_BLOCK = 1 << 24  # bytes per call: zlib-ng holds the GIL while it runs


def check_crc(info: zipfile.ZipInfo, data: np.ndarray, listed: int) -> None:
    """A stored record's bytes against the CRC-32 its directory lists, as zipfile checks them (torch.load
    does not: docs/formats.md §6.2): a flipped bit is named, not compared. A CRC of 0 is what torch
    writes when told not to compute them (``set_crc32_options(False)``): nothing to check. Mapped
    pages are read here, which the comparison of a whole tensor does next anyway; a small view of a
    large storage (``logits[:, -1]`` saved as it is) reads its whole record."""
    if listed != 0 and _crc32(data.data) != listed:
        raise TorchFileError(
            f"{info.filename}: its bytes do not match the CRC-32 the archive lists (damaged in copying?)"
        )


def _crc32(data: memoryview) -> int:
    """The CRC-32 of ``data`` by zlib-ng (some 20 GB/s here with the CPU's carry-less multiply, where
    the zlib 1.2 Python links runs at 4: its CRC was 37 % of a 7B-shaped report,
    docs/performance.md), 16 MiB at a time: zlib-ng holds the GIL while it runs, and the UI thread
    waits no longer than one block."""
    found = 0
    flat = data.cast("B")
    for start in range(0, len(flat), _CRC_BLOCK):
        found = crc32(flat[start : start + _CRC_BLOCK], found)
    return found
