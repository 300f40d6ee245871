"""torch.save's zip files (``.pth``/``.pt``) read into numpy arrays, without importing torch.

The archive (torch/serialization.py ``_save``; caffe2/serialize/inline_container.cc writes it) is a
zip whose records sit in one folder (``archive/`` unless the file was renamed before saving):
``data.pkl``, the pickled object, whose tensors name their storage by a persistent id
``('storage', storage_type, key, location, numel)``; ``data/<key>``, each storage's bytes, stored
uncompressed and 64-byte aligned; ``byteorder`` (``little`` or ``big``; absent in old files: little).

A tensor is one of two calls in the pickle: ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, hooks[, metadata])`` with a typed storage (``torch.FloatStorage``...), or
``_rebuild_tensor_v3(..., dtype[, metadata])`` with an untyped one, for the dtypes added since
(float8, uint16-64, complex32; torch/_tensor.py ``_reduce_ex_internal``, torch/storage.py
``_new_dtypes``). Both are replaced by our functions, as are the other globals a tensor file holds;
see ``_Archive.find_class`` and pickle_globals.py for the whole list. Nothing in torch is imported or run.

What a file may make the reader do is bounded by what it honestly holds: the pickle's depth and work
(pickle_bounds.py), data.pkl's size (``MAX_PICKLE_BYTES``), a compressed storage decompressed only as far
as its views reach (never past the sizes the zip declares), a view's elements by its storage's
(views.py), and an archive naming a record twice is refused (torch.load reads the first copy,
zipfile the last), as is a directory entry pointing at another record's local header; a stored
record's bytes must match its CRC-32 (torch.load does not check it; zipfile does).

See docs/formats.md §6.2.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from tui_acc.dumps.fs import read_ahead
from tui_acc.dumps.mapped import map_bytes
from tui_acc.dumps.torchfile.crc import check_crc
from tui_acc.dumps.torchfile.pickle_bounds import MAX_PICKLE_BYTES
from tui_acc.dumps.torchfile.pickle_globals import StorageType, find_global
from tui_acc.dumps.torchfile.refusals import NeedsTorch, RefusedGlobal, TorchFileError, brief
from tui_acc.dumps.torchfile.unpickler import RestrictedUnpickler, SafeCall
from tui_acc.dumps.torchfile.views import checked_view, count, element_size, view_values, with_metadata

__all__ = ["NeedsTorch", "RefusedGlobal", "TorchFileError", "pickles_for_torch", "read_torch_file"]

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zipfile's structFileHeader: ... name and extra lengths last
# a smaller storage is read even when mapped is asked for: one read costs less than mapping it and
# faulting its pages in, and each mapping takes one of the guard's slots for as long as it lives
_MAPPED_FROM = 1 << 20
_DEFLATE_RATIO = 1100  # deflate expands at most ~1032x: a record claiming more is forged (a zip bomb)
_NO_BYTES = np.zeros(0, dtype=np.uint8)
_INFLATE_CHUNK = 1 << 20  # a compressed record is inflated into its array this much at a time


def read_torch_file(path: Path, *, mapped: bool) -> object:
    """The object torch.save wrote (tensor, dict, list, tuple, primitives), every tensor as a numpy
    array. mapped=True: storages are memory-mapped copy-on-write from the archive (mapped.map_bytes:
    guarded against the file being cut short), paged in rather than copied (storages under 1 MiB
    are read: cheaper; without the guard, all are); mapped=False: storages read into memory (the
    file may still be being written). Either way a stored record is checked against its CRC-32 when
    first reached (this pages a mapped one in once: +12% on reading a 64 MB tensor whole).

    Raises NeedsTorch (torch.load may read it: fall back), RefusedGlobal (code in the pickle, never
    run), TorchFileError (damaged or forged); OSError when the file cannot be opened or read."""
    if sys.byteorder != "little":  # numpy's dtypes here are the host's; torch's records are little-endian
        raise NeedsTorch("this machine is big-endian")
    with _open_regular(path) as handle:
        if handle.read(4) != b"PK\x03\x04":  # torch.load's _is_zipfile: the same test
            handle.seek(0)
            raise _not_a_zip(handle.read(512))
        archive = _open_archive(handle)
        with archive:
            reader = _Archive(archive, handle, mapped)
            reader.check_byte_order()
            return reader.load()


def pickles_for_torch(path: Path) -> tuple[bytes, int]:
    """What ``torch.load(weights_only=True)`` unpickles of a file this reader leaves to it, for a
    bounded interpreter to walk first: (the bytes, how many pickles they start with). A zip's
    data.pkl, the archive checked as for reading (none for a TorchScript archive: torch refuses it
    unread); the legacy format's head, where torch runs five pickles in a row (magic number,
    protocol, system, object, storage keys). The tar format mixes pickles and storages: refused."""
    with _open_regular(path) as handle:
        if handle.read(4) != b"PK\x03\x04":
            handle.seek(0)
            head = handle.read(MAX_PICKLE_BYTES)
            if _is_tar(head):
                raise TorchFileError("torch's oldest (tar) format: not read (load and save it again)")
            return head, 5
        archive = _open_archive(handle)
        with archive:
            try:
                return _Archive(archive, handle, mapped=False).pickled, 1
            except NeedsTorch:  # a TorchScript archive
                return b"", 0


def _open_regular(path: Path) -> IO[bytes]:
    """The file, if it is a regular one: a FIFO named like a tensor must not block the reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TorchFileError("not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _not_a_zip(head: bytes) -> Exception:
    if head.startswith(b"\x80"):  # a pickle's PROTO
        return NeedsTorch("torch's legacy (non-zip) format")
    if _is_tar(head):
        return NeedsTorch("torch's tar format")
    if not head:
        return TorchFileError("empty file")
    return TorchFileError("not a torch file (neither a zip archive nor torch's legacy format)")


def _is_tar(head: bytes) -> bool:
    return head[257:262] == b"ustar"


def _open_archive(handle: IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(handle)
    except Exception as exc:  # BadZipFile and whatever a forged directory makes zipfile trip on
        raise TorchFileError(f"damaged zip archive ({_reason(exc)})") from exc


def _reason(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


@dataclass(eq=False, slots=True)
class _Storage:
    """A storage as a tensor's rebuild receives it: its record, the dtype it was saved as and its
    size in bytes (checked against the record's); its bytes are read when a view says how many."""

    record: zipfile.ZipInfo
    dtype: str
    nbytes: int


class _Archive(RestrictedUnpickler):
    def __init__(self, archive: zipfile.ZipFile, handle: IO[bytes], mapped: bool) -> None:
        self._archive = archive
        self._handle = handle
        self._mapped = mapped
        self._file = os.fstat(handle.fileno())  # the file as opened: what a record's CRC was checked of
        self._file_size = self._file.st_size
        self._records: dict[str, np.ndarray] = {}  # by record name: the bytes read or mapped so far
        self._storages: dict[str, zipfile.ZipInfo] = {}  # by storage key
        entries = archive.infolist()
        if not entries:
            raise TorchFileError("empty zip archive")
        _no_duplicates(entries)
        # caffe2/serialize/inline_container.cc (PyTorchFileReader::init): the first record's folder
        folder, slash, _ = entries[0].filename.partition("/")
        if not slash:
            raise TorchFileError("not torch's archive: its first record is not in a folder")
        self._folder = folder
        super().__init__(self._pickle())

    def _pickle(self) -> bytes:
        info = self._info("data.pkl")
        if info is None:
            if self._info("constants.pkl") is not None:
                raise NeedsTorch("a TorchScript archive (torch.jit.save), not torch.save's")
            raise TorchFileError(f"no {self._folder}/data.pkl: not an archive torch.save wrote")
        if info.file_size > MAX_PICKLE_BYTES:
            raise TorchFileError(
                f"{info.filename} is {info.file_size:,} bytes: more than a tensor file's pickle "
                f"({MAX_PICKLE_BYTES >> 20} MiB at most), refused unread"
            )
        return bytes(self._record(info, mapped=False))

    def check_byte_order(self) -> None:
        order = self._info("byteorder")
        if order is None:
            return
        text = bytes(self._record(order, mapped=False, end=8))
        if text == b"big":
            raise NeedsTorch("saved on a big-endian machine")
        if text != b"little":
            raise TorchFileError(f"unknown byte order {text[:20]!r}")

    def _info(self, name: str) -> zipfile.ZipInfo | None:
        try:
            return self._archive.getinfo(f"{self._folder}/{name}")
        except KeyError:
            return None

    # --- records -------------------------------------------------------------------------------

    def _record(self, info: zipfile.ZipInfo, *, mapped: bool, end: int | None = None) -> np.ndarray:
        """A record's bytes (uint8): mapped or read in place when stored, through zipfile when
        compressed, then only its first ``end`` bytes (all when None) kept, inflated straight into the
        array. The rest of a deflated storage is inflated a chunk at a time and dropped, for zipfile to
        check the CRC-32 at its end: a flipped bit inside a view would be compared as the run's."""
        if info.flag_bits & 0x1:
            raise TorchFileError(f"{info.filename} is encrypted")
        if info.compress_type == zipfile.ZIP_STORED:
            return self._stored(info, mapped=mapped)
        limit = min(info.file_size, _DEFLATE_RATIO * max(info.compress_size, 1))
        if info.file_size > limit or info.compress_size > self._file_size:
            raise TorchFileError(f"{info.filename}: its sizes are forged ({info.compress_size} compressed)")
        size = info.file_size if end is None else min(end, info.file_size)
        data = np.empty(size, dtype=np.uint8)
        done = 0
        try:
            with self._archive.open(info) as stream:  # zipfile stops at the sizes the zip declares
                while done < size:
                    chunk = stream.read(min(_INFLATE_CHUNK, size - done))
                    if not chunk:
                        break
                    data[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
                    done += len(chunk)
                while stream.read(_INFLATE_CHUNK):  # to the end, where zipfile checks the CRC-32
                    pass
        except Exception as exc:  # BadZipFile (CRC), zlib.error, NotImplementedError (method) ...
            raise TorchFileError(f"{info.filename}: {_reason(exc)}") from exc
        if done != size:
            raise TorchFileError(f"{info.filename}: {done} bytes, {info.file_size} listed")
        return data

    def _stored(self, info: zipfile.ZipInfo, *, mapped: bool) -> np.ndarray:
        """Past the local header, whose own name and extra lengths say where the bytes start (torch pads
        the extra field to align storages, and the central directory's copy of it may differ)."""
        size = info.file_size
        header = _pread(self._handle, info.header_offset, _LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise TorchFileError(f"{info.filename}: no local header where the directory says")
        fields = _LOCAL_HEADER.unpack(header)
        name_length, extra_length = fields[-2:]
        name_at = info.header_offset + _LOCAL_HEADER.size
        if _pread(self._handle, name_at, name_length) != _name_bytes(info):
            # zipfile refuses the same (BadZipFile "File name in directory ... and header ... differ"):
            # a directory entry pointing at another record's header would read that record's bytes
            raise TorchFileError(f"{info.filename}: the directory points at another record's header")
        start = name_at + name_length + extra_length
        if info.compress_size != size or start + size > self._file_size:
            raise TorchFileError(f"{info.filename}: runs past the end of the file (truncated?)")
        if size == 0:
            return np.zeros(0, dtype=np.uint8)
        data: np.ndarray | None = None
        if mapped:
            read_ahead(self._handle.fileno(), start, size)
            data = map_bytes(self._handle.fileno(), start, size)
        if data is None:
            data = self._read_stored(info, start)
        check_crc(info, data, self._listed_crc(info, fields, start + size), self._file, start)
        return data

    def _listed_crc(self, info: zipfile.ZipInfo, local: tuple[int, ...], end: int) -> int:
        """The CRC-32 the archive lists for a record: the central directory's, else (0 there) the
        local header's, else (bit 3: sizes and CRC after the data) its data descriptor's. A copy
        zeroed in one place only still has the others (zipfile reads the directory's alone)."""
        if info.CRC:
            return info.CRC
        local_flags, local_crc = local[2], local[6]
        if local_crc or not local_flags & 0x8:
            return local_crc
        descriptor = _pread(self._handle, end, 8)  # optional signature PK\x07\x08, then the CRC
        offset = 4 if descriptor[:4] == b"PK\x07\x08" else 0
        found = descriptor[offset : offset + 4]
        return int.from_bytes(found, "little") if len(found) == 4 else 0

    def _read_stored(self, info: zipfile.ZipInfo, start: int) -> np.ndarray:
        data = np.empty(info.file_size, dtype=np.uint8)
        view = data.data  # a memoryview: read into the array in place
        done = 0
        while done < info.file_size:
            count = os.preadv(self._handle.fileno(), [view[done:]], start + done)
            if count <= 0:
                raise TorchFileError(f"{info.filename}: the file ends inside it (truncated?)")
            done += count
        return data

    # --- the pickle's globals and storages ---------------------------------------------------------

    def find_class(self, module: str, name: str) -> object:
        qualified = f"{module}.{name}"
        if qualified == "torch._utils._rebuild_tensor_v2":
            return SafeCall("_rebuild_tensor_v2", self._rebuild_v2)
        if qualified == "torch._utils._rebuild_tensor_v3":
            return SafeCall("_rebuild_tensor_v3", self._rebuild_v3)
        return find_global(module, name)

    def persistent_load(self, pid: object) -> object:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise TorchFileError(f"persistent id {brief(pid)} is not a storage")
        _, storage_type, key, _location, numel = pid  # the location (cuda:0, npu:0...) is not needed here
        if not isinstance(storage_type, StorageType) or not isinstance(key, str) or not count(numel):
            raise TorchFileError(f"storage id {brief(pid)} malformed")
        info = self._storages.get(key) or self._info(f"data/{key}")
        if info is None:
            raise TorchFileError(f"storage {key[:40]!r} has no record {self._folder}/data/{key[:40]}")
        self._storages[key] = info
        itemsize = element_size(storage_type.dtype)
        if numel * itemsize > info.file_size:
            raise TorchFileError(
                f"storage {key} holds {info.file_size} bytes, {numel} {storage_type.dtype} need "
                f"{numel * itemsize}"
            )
        return _Storage(info, storage_type.dtype, numel * itemsize)

    def _bytes(self, storage: _Storage, end: int) -> np.ndarray:
        """At least the first ``end`` bytes of a storage (all of it where the record is stored: a
        mapping costs nothing, and views of one storage then share its memory)."""
        info = storage.record
        data = self._records.get(info.filename)
        if data is None or len(data) < end:
            mapped = self._mapped and info.file_size >= _MAPPED_FROM
            data = self._records[info.filename] = self._record(info, mapped=mapped, end=end)
        return data[: min(storage.nbytes, len(data))]

    def _rebuild_v2(
        self,
        storage: object,
        offset: object,
        size: object,
        stride: object,
        _requires_grad: object = False,
        _hooks: object = None,
        metadata: object = None,
    ) -> np.ndarray:
        if not isinstance(storage, _Storage):
            raise TorchFileError("_rebuild_tensor_v2 without a storage")
        return self._tensor(storage, storage.dtype, offset, size, stride, metadata)

    def _rebuild_v3(
        self,
        storage: object,
        offset: object,
        size: object,
        stride: object,
        _requires_grad: object,
        _hooks: object,
        dtype: object,
        metadata: object = None,
    ) -> np.ndarray:
        if not isinstance(storage, _Storage) or not isinstance(dtype, str):
            raise TorchFileError("_rebuild_tensor_v3 without a storage or a dtype")
        return self._tensor(storage, dtype, offset, size, stride, metadata)

    def _tensor(
        self, storage: _Storage, dtype: str, offset: object, size: object, stride: object, metadata: object
    ) -> np.ndarray:
        """The view torch would build on the storage's bytes, checked to stay inside them first, and
        the bytes it reaches read (inflated) only then."""
        itemsize = element_size(dtype)
        available = storage.nbytes // itemsize
        start, shape, steps, end = checked_view(available, itemsize, dtype, offset, size, stride)
        data = self._bytes(storage, end * itemsize) if end else _NO_BYTES
        return with_metadata(view_values(data, itemsize, dtype, start, shape, steps), metadata)


def _no_duplicates(entries: list[zipfile.ZipInfo]) -> None:
    """torch.load reads the first record of a name and zipfile the last: an archive naming one twice
    reads differently in each, so neither is believed."""
    seen: set[str] = set()
    for entry in entries:
        if entry.filename in seen:
            raise TorchFileError(
                f"the archive holds {entry.filename[:80]} twice (torch.load would read the first copy): "
                "refused as forged"
            )
        seen.add(entry.filename)


def _name_bytes(info: zipfile.ZipInfo) -> bytes:
    """The record's name as its headers spell it (zipfile's rule: UTF-8 where flag bit 11 says so)."""
    encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
    try:
        return info.orig_filename.encode(encoding)
    except UnicodeEncodeError as exc:  # zipfile decoded it otherwise: no header can match it
        raise TorchFileError(f"{info.filename[:80]}: a name its headers cannot spell") from exc


def _pread(handle: IO[bytes], offset: int, count: int) -> bytes:
    if not 0 <= offset < 1 << 62:  # a forged zip64 offset would overflow os.pread's off_t
        return b""
    return os.pread(handle.fileno(), count, offset)
