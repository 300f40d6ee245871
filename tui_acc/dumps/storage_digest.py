"""What a torch tensor file holds, told from its zip archive's directory instead of its data.

``torch.save`` writes a zip archive (uncompressed records): ``{archive}/data.pkl`` (dtype, shape,
strides), one ``{archive}/data/{key}`` record per storage, and bookkeeping records, one of which
(``.data/serialization_id``) is new at every save (torch/serialization.py, ``_save``). Two files of
the same tensor therefore differ as files, but their storage records are the same bytes, and the
archive's central directory, at the end of the file, lists each record's size and CRC-32 (which
torch computes unless ``torch.serialization.set_crc32_options(False)``). Reading that directory
costs a few hundred bytes per file, whatever the tensor's size.

The storage alone is compared, not ``data.pkl``: msit saves a view with its whole storage, so a
view passed on to the next module (``hidden[:, -1:]`` into ``lm_head``) is the same storage as the
output it came from, with other strides.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import struct
import zipfile
from dataclasses import dataclass

_STORAGE_RECORD = re.compile(r"(?:^|/)data/(\d+)$")  # torch/serialization.py _save: f"data/{key}"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zipfile's structFileHeader: signature ... name, extra lengths
_NO_CRC = 0  # what the archive holds for every record when torch was told not to compute CRCs


@dataclass(frozen=True)
class StorageListing:
    """The storage records of one tensor file: (name, size, CRC-32) by storage key."""

    path: str
    records: tuple[tuple[str, int, int], ...]
    offsets: tuple[int, ...]  # each record's local header

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(size for _, size, _ in self.records)

    def identity(self) -> tuple[tuple[int, int | str], ...] | None:
        """Equal for two files exactly when their storages are (up to a CRC-32 collision among
        records of the same size). A record saved without a CRC is hashed: the only case that
        reads tensor data, and the caller asks only for files whose sizes another file shares."""
        if all(crc != _NO_CRC or size == 0 for _, size, crc in self.records):
            return tuple((size, crc) for _, size, crc in self.records)
        try:
            with _open_regular(self.path) as handle:
                return tuple(
                    (size, crc if crc != _NO_CRC else _blake2b(handle, offset, size))
                    for (_, size, crc), offset in zip(self.records, self.offsets, strict=True)
                )
        except (OSError, ValueError, struct.error):
            return None


def list_storage(path: str) -> StorageListing | None:
    """The storage records of the torch zip archive at ``path``; None when it is not one (torch's
    legacy format, a damaged or growing file), is not a regular file, or cannot be read."""
    try:
        with _open_regular(path) as handle, zipfile.ZipFile(handle) as archive:
            found = []
            for info in archive.infolist():
                match = _STORAGE_RECORD.search(info.filename)
                if match is not None and info.compress_type == zipfile.ZIP_STORED:
                    found.append(
                        (int(match.group(1)), info.filename, info.file_size, info.CRC, info.header_offset)
                    )
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None
    if not found:
        return None
    found.sort()
    records = tuple((name, size, crc) for _, name, size, crc, _ in found)
    return StorageListing(path, records, tuple(offset for *_, offset in found))


def _open_regular(path: str) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file itself: a link is not followed out of
    the dump and a FIFO named like a tensor cannot block the reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _blake2b(handle: io.BufferedReader, offset: int, size: int) -> str:
    """The hash of a stored record's bytes, read past its local header (zipfile itself would check
    them against the CRC the archive lacks and refuse them)."""
    handle.seek(offset)
    header = handle.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ValueError("not a local file header")
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    handle.seek(offset + _LOCAL_HEADER.size + name_length + extra_length)
    digest = hashlib.blake2b(digest_size=16)
    left = size
    while left > 0:
        chunk = handle.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError("record shorter than its directory entry")
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()
