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
import os
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tui_acc.dumps.fs import regular_fd
from tui_acc.dumps.policy import LoadPolicy

_STORAGE_RECORD = re.compile(r"(?:^|/)data/(\d+)$")  # torch/serialization.py _save: f"data/{key}"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zipfile's structFileHeader: signature ... name, extra lengths
_END = struct.Struct("<4s4H2LH")  # zipfile's structEndArchive
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # zipfile's structCentralDir
_ZIP64_MARK = 0xFFFFFFFF  # the size or offset is in a zip64 extra field
_TAIL_BYTES = 4096
_NO_CRC = 0  # what the archive holds for every record when torch was told not to compute CRCs


@dataclass(frozen=True)
class StorageListing:
    """The storage records of one tensor file: (name, size, CRC-32) by storage key."""

    path: str
    records: tuple[tuple[str, int, int], ...]
    offsets: tuple[int, ...]  # each record's local header

    @property
    def sizes(self) -> tuple[int, ...]:
        """Each storage record's size in bytes, in key order (nothing is read)."""
        return tuple(size for _, size, _ in self.records)

    def identity(self, policy: LoadPolicy) -> tuple[tuple[int, int | str], ...] | None:
        """Equal for two files exactly when their storages are (up to a CRC-32 collision among
        records of the same size). A record saved without a CRC is hashed: the only case that
        reads tensor data, and the caller asks only for files whose sizes another file shares."""
        if all(crc != _NO_CRC or size == 0 for _, size, crc in self.records):
            return tuple((size, crc) for _, size, crc in self.records)
        try:
            fd, _ = _open_regular(self.path, policy)
        except OSError:
            return None
        try:
            return tuple(
                (size, crc if crc != _NO_CRC else _blake2b(fd, offset, size))
                for (_, size, crc), offset in zip(self.records, self.offsets, strict=True)
            )
        except (OSError, ValueError, struct.error):
            return None
        finally:
            os.close(fd)


def list_storage(path: str, policy: LoadPolicy) -> StorageListing | None:
    """The storage records of the torch zip archive at ``path``; None when it is not one (torch's
    legacy format, a damaged or growing file), is not a regular file, or cannot be read."""
    try:
        fd, size = _open_regular(path, policy)
    except OSError:
        return None
    try:
        found = _directory_at_the_end(fd, size)
        if found is None:  # anything unusual (zip64 sizes, a comment): the standard library's reader
            with os.fdopen(os.dup(fd), "rb") as handle, zipfile.ZipFile(handle) as archive:
                found = [
                    (info.filename, info.compress_type, info.file_size, info.CRC, info.header_offset)
                    for info in archive.infolist()
                ]
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, struct.error):
        return None
    finally:
        os.close(fd)
    storages = []
    for name, compression, size, crc, offset in found:
        match = _STORAGE_RECORD.search(name)
        if match is not None and compression == zipfile.ZIP_STORED:
            storages.append((int(match.group(1)), name, size, crc, offset))
    if not storages:
        return None
    storages.sort()
    records = tuple((name, size, crc) for _, name, size, crc, _ in storages)
    return StorageListing(path, records, tuple(offset for *_, offset in storages))


Entry = tuple[str, int, int, int, int]  # name, compression, size, CRC-32, local header's offset


def _directory_at_the_end(fd: int, size: int) -> list[Entry] | None:
    """The central directory from one read of the file's tail, where torch's writer puts it
    (about 100 bytes per record, 7 records); None when it is not that simple: ``zipfile`` then
    reads it (some 40 us more per file, which a token of thousands of files notices)."""
    tail_length = min(size, _TAIL_BYTES)
    tail = os.pread(fd, tail_length, size - tail_length)
    end = len(tail) - _END.size
    if end < 0 or tail[end : end + 4] != b"PK\x05\x06":
        return None
    *_, count, directory_size, directory_offset, comment = _END.unpack_from(tail, end)
    start = directory_offset - (size - tail_length)
    if comment or start < 0 or start + directory_size > end:
        return None
    entries: list[Entry] = []
    at = start
    for _ in range(count):
        fields = _CENTRAL.unpack_from(tail, at)
        if fields[0] != b"PK\x01\x02":
            return None
        compression, crc, stored_size, name_length, extra_length, comment_length = (
            fields[6],
            fields[9],
            fields[11],
            fields[12],
            fields[13],
            fields[14],
        )
        offset = fields[18]
        if _ZIP64_MARK in (stored_size, offset):
            return None
        name = tail[at + _CENTRAL.size : at + _CENTRAL.size + name_length]
        if b"data/" in name:  # storages only: the other records' names need no decoding
            entries.append((name.decode("utf-8", "replace"), compression, stored_size, crc, offset))
        at += _CENTRAL.size + name_length + extra_length + comment_length
    return entries


def _open_regular(path: str, policy: LoadPolicy) -> tuple[int, int]:
    """A descriptor of ``path``, and its size, if ``policy`` lets it be read (a link out of the
    dump is not followed unless ``--follow-links``) and it is a regular file (a FIFO named like a
    tensor cannot block the reader)."""
    fd, status = regular_fd(policy.check(Path(path)))
    return fd, status.st_size


def _blake2b(fd: int, offset: int, size: int) -> str:
    """The hash of a stored record's bytes, read past its local header (zipfile itself would check
    them against the CRC the archive lacks and refuse them)."""
    header = os.pread(fd, _LOCAL_HEADER.size, offset)
    if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ValueError("not a local file header")
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    position = offset + _LOCAL_HEADER.size + name_length + extra_length
    digest = hashlib.blake2b(digest_size=16)
    left = size
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 20), position)
        if not chunk:
            raise ValueError("record shorter than its directory entry")
        digest.update(chunk)
        position += len(chunk)
        left -= len(chunk)
    return digest.hexdigest()
