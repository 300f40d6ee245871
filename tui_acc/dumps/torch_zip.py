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
see ``_Archive.find_class`` and ``_GLOBALS`` for the whole list. Nothing in torch is imported or run.
"""

from __future__ import annotations

import math
import os
import stat
import struct
import sys
import zipfile
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from tui_acc.dumps.dtypes import TENSOR_DTYPES, numpy_dtype
from tui_acc.dumps.fs import read_ahead
from tui_acc.dumps.torch_pickle import (
    NeedsTorch,
    RefusedGlobal,
    RestrictedUnpickler,
    SafeCall,
    TorchFileError,
)

__all__ = ["NeedsTorch", "RefusedGlobal", "TorchFileError", "read_torch_file"]

# torch/storage.py _dtype_to_storage_type_map: the legacy typed storages, by the dtype they hold
TYPED_STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
}
# a negative view (metadata "neg") is applied exactly, by its sign bit, to these
_SIGNED_FLOATS = frozenset(
    {"float64", "float32", "float16", "bfloat16", "complex64", "complex128"}
    | {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}
)
_COMPLEX32 = np.dtype([("real", "<f2"), ("imag", "<f2")])  # torch's complex32: two float16
# every dtype torch's weights_only loader lets a pickle name (torch/_weights_only_unpickler.py
# _get_allowed_globals): as a value (SGLang's meta holds dtypes) each is its name
_DTYPE_NAMES = (
    TENSOR_DTYPES
    | {"complex32", "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2"}
    | {"bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"}
    | {f"uint{bits}" for bits in range(1, 8)}
    | {f"int{bits}" for bits in range(1, 8)}
)
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zipfile's structFileHeader: ... name and extra lengths last
_MAX_ELEMENTS = 1 << 62  # numpy's index type is 64-bit: a view of more elements is refused, not attempted
_MAX_DIMS = 64  # numpy's limit (torch's is larger)
# a smaller storage is read even when mapped is asked for: one read costs less than mapping it and
# faulting its pages in, and a mapping holds a file descriptor (mmap keeps a dup) for as long as it lives
_MAPPED_FROM = 1 << 20
_DEFLATE_RATIO = 1100  # deflate expands at most ~1032x: a record claiming more is forged (a zip bomb)


def read_torch_file(path: Path, *, mapped: bool) -> object:
    """The object torch.save wrote (tensor, dict, list, tuple, primitives), every tensor as a numpy
    array. mapped=True: storages are memory-mapped copy-on-write from the archive (np.memmap mode "c"),
    so nothing is read until touched (storages under 1 MiB are read: cheaper); mapped=False: storages
    read into memory (the file may still be being written).

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
            return _Archive(archive, handle, mapped).load()


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
    if head.startswith(b"\x80") or head[257:262] == b"ustar":  # a pickle's PROTO; torch's tar format
        return NeedsTorch("torch's legacy (non-zip) format")
    if not head:
        return TorchFileError("empty file")
    return TorchFileError("not a torch file (neither a zip archive nor torch's legacy format)")


def _open_archive(handle: IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(handle)
    except Exception as exc:  # BadZipFile and whatever a forged directory makes zipfile trip on
        raise TorchFileError(f"damaged zip archive ({_reason(exc)})") from exc


def _reason(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]


@dataclass(frozen=True)
class _StorageType:
    """A storage class the pickle names: the dtype of its elements (untyped: bytes)."""

    dtype: str


@dataclass(frozen=True)
class _Storage:
    """A storage as a tensor's rebuild receives it: its bytes and the dtype they were saved as."""

    data: np.ndarray  # uint8, exactly the storage's bytes
    dtype: str


class _Archive(RestrictedUnpickler):
    def __init__(self, archive: zipfile.ZipFile, handle: IO[bytes], mapped: bool) -> None:
        self._archive = archive
        self._handle = handle
        self._mapped = mapped
        self._file_size = os.fstat(handle.fileno()).st_size
        self._records: dict[str, np.ndarray] = {}
        entries = archive.infolist()
        if not entries:
            raise TorchFileError("empty zip archive")
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
        order = self._info("byteorder")
        if order is not None:
            text = bytes(self._record(order, mapped=False))
            if text == b"big":
                raise NeedsTorch("saved on a big-endian machine")
            if text != b"little":
                raise TorchFileError(f"unknown byte order {text[:20]!r}")
        return bytes(self._record(info, mapped=False))

    def _info(self, name: str) -> zipfile.ZipInfo | None:
        try:
            return self._archive.getinfo(f"{self._folder}/{name}")
        except KeyError:
            return None

    # --- records -------------------------------------------------------------------------------

    def _record(self, info: zipfile.ZipInfo, *, mapped: bool) -> np.ndarray:
        """A record's bytes (uint8): mapped or read in place when stored, through zipfile when compressed."""
        if info.flag_bits & 0x1:
            raise TorchFileError(f"{info.filename} is encrypted")
        if info.compress_type == zipfile.ZIP_STORED:
            return self._stored(info, mapped=mapped)
        limit = min(info.file_size, _DEFLATE_RATIO * max(info.compress_size, 1))
        if info.file_size > limit or info.compress_size > self._file_size:
            raise TorchFileError(f"{info.filename}: its sizes are forged ({info.compress_size} compressed)")
        try:
            with self._archive.open(info) as stream:
                data = bytearray(stream.read(info.file_size))
        except Exception as exc:  # BadZipFile (CRC), zlib.error, NotImplementedError (method) ...
            raise TorchFileError(f"{info.filename}: {_reason(exc)}") from exc
        if len(data) != info.file_size:
            raise TorchFileError(f"{info.filename}: {len(data)} bytes, {info.file_size} listed")
        return np.frombuffer(data, dtype=np.uint8)

    def _stored(self, info: zipfile.ZipInfo, *, mapped: bool) -> np.ndarray:
        """Past the local header, whose own name and extra lengths say where the bytes start (torch pads
        the extra field to align storages, and the central directory's copy of it may differ)."""
        size = info.file_size
        header = _pread(self._handle, info.header_offset, _LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise TorchFileError(f"{info.filename}: no local header where the directory says")
        name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
        start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
        if info.compress_size != size or start + size > self._file_size:
            raise TorchFileError(f"{info.filename}: runs past the end of the file (truncated?)")
        if size == 0:
            return np.zeros(0, dtype=np.uint8)
        if mapped:
            read_ahead(self._handle.fileno(), start, size)
            return np.memmap(self._handle, dtype=np.uint8, mode="c", offset=start, shape=(size,))
        data = np.empty(size, dtype=np.uint8)
        view = data.data  # a memoryview: read into the array in place
        done = 0
        while done < size:
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
        found = _GLOBALS.get(qualified)
        if found is not None:
            return found
        if module == "torch" and name in _DTYPE_NAMES:
            return name  # a dtype as a value: its name
        if module == "torch" and name in TYPED_STORAGES:
            return _StorageType(TYPED_STORAGES[name])
        if module == "torch" or module.startswith("torch."):
            raise NeedsTorch(f"the pickle names {qualified}")  # torch's weights_only decides
        raise RefusedGlobal(qualified)

    def persistent_load(self, pid: object) -> object:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise TorchFileError(f"persistent id {str(pid)[:80]} is not a storage")
        _, storage_type, key, _location, numel = pid  # the location (cuda:0, npu:0...) is not needed here
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str) or not _count(numel):
            raise TorchFileError(f"storage id {str(pid)[:80]} malformed")
        data = self._records.get(key)
        if data is None:
            info = self._info(f"data/{key}")
            if info is None:
                raise TorchFileError(f"storage {key[:40]!r} has no record {self._folder}/data/{key[:40]}")
            mapped = self._mapped and info.file_size >= _MAPPED_FROM
            data = self._records[key] = self._record(info, mapped=mapped)
        itemsize = _element_size(storage_type.dtype)
        if numel * itemsize > len(data):
            raise TorchFileError(
                f"storage {key} holds {len(data)} bytes, {numel} {storage_type.dtype} need {numel * itemsize}"
            )
        return _Storage(data[: numel * itemsize], storage_type.dtype)

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
        return _tensor(storage.data, storage.dtype, offset, size, stride, metadata)

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
        return _tensor(storage.data, dtype, offset, size, stride, metadata)


def _pread(handle: IO[bytes], offset: int, count: int) -> bytes:
    if not 0 <= offset < 1 << 62:  # a forged zip64 offset would overflow os.pread's off_t
        return b""
    return os.pread(handle.fileno(), count, offset)


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _element_size(dtype: str) -> int:
    if dtype == "complex32":
        return _COMPLEX32.itemsize
    found = numpy_dtype(dtype) if dtype in TENSOR_DTYPES else None
    if found is None:
        raise NeedsTorch(f"tensors of {dtype}")
    return found.itemsize


def _tensor(
    data: np.ndarray, dtype: str, offset: object, size: object, stride: object, metadata: object
) -> np.ndarray:
    """The view torch would build on the storage's bytes, checked to stay inside them first."""
    itemsize = _element_size(dtype)
    element_type = _COMPLEX32 if dtype == "complex32" else numpy_dtype(dtype)
    assert element_type is not None
    shape = _dims(size, "size")
    steps = _dims(stride, "stride")
    if not _count(offset) or len(shape) != len(steps):
        raise TorchFileError(f"tensor view malformed (offset {offset!r}, size {shape}, stride {steps})")
    if len(shape) > _MAX_DIMS:
        raise NeedsTorch(f"a tensor of {len(shape)} dimensions (numpy holds {_MAX_DIMS})")
    assert isinstance(offset, int)
    elements = math.prod(shape)
    if elements * itemsize >= _MAX_ELEMENTS:
        raise TorchFileError(f"tensor of {elements} elements: more than numpy can index")
    if elements == 0:
        values = np.zeros(shape, dtype=element_type)
    else:
        available = len(data) // itemsize
        last = offset + sum((extent - 1) * step for extent, step in zip(shape, steps, strict=True))
        if last >= available:
            raise TorchFileError(
                f"tensor view (offset {offset}, size {shape}, stride {steps}) reaches element {last} "
                f"of a storage of {available} {dtype}"
            )
        # a dimension of one element never steps: its stride (any number in torch) is left out
        byte_steps = tuple(
            step * itemsize if extent > 1 else 0 for extent, step in zip(shape, steps, strict=True)
        )
        # strided as raw elements of the width: as_strided passes the dtype as an array-interface
        # string, which names ml_dtypes' float8 types ambiguously ("<f1")
        base = data[: available * itemsize].view(np.dtype(f"V{itemsize}"))[offset:]
        values = np.lib.stride_tricks.as_strided(base, shape=shape, strides=byte_steps).view(element_type)
    if dtype == "complex32":  # widened exactly: float16 -> float32 parts
        widened = np.empty(shape, dtype=np.complex64)
        widened.real = values["real"]
        widened.imag = values["imag"]
        values = widened
    return _with_metadata(values, metadata)


def _dims(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(_count(item) for item in value):
        raise TorchFileError(f"tensor {what} {str(value)[:80]} is not a tuple of non-negative integers")
    return value


def _with_metadata(values: np.ndarray, metadata: object) -> np.ndarray:
    """torch/_utils.py set_tensor_metadata: the conjugate and negative bits of a lazy view, applied."""
    if metadata is None or metadata == {}:
        return values
    if not isinstance(metadata, dict) or not set(metadata) <= {"conj", "neg"}:
        raise NeedsTorch(f"tensor metadata {str(metadata)[:80]}")
    if metadata.get("conj") and values.dtype.kind == "c":
        values = np.conjugate(values)
    if metadata.get("neg"):
        if str(values.dtype) not in _SIGNED_FLOATS:
            raise NeedsTorch(f"a negative view of {values.dtype}")
        values = np.negative(values)
    return values


def _parameter(data: object, _requires_grad: object = False, _hooks: object = None) -> object:
    if not isinstance(data, np.ndarray):
        raise TorchFileError("a parameter without a tensor")
    return data


def _parameter_with_state(data: object, requires_grad: object, hooks: object, _state: object) -> object:
    return _parameter(data, requires_grad, hooks)


def _size(dims: object = ()) -> tuple[int, ...]:
    items = tuple(dims) if isinstance(dims, (tuple, list)) else None
    if items is None or not all(type(item) is int for item in items):
        raise TorchFileError(f"torch.Size of {str(dims)[:80]}")
    return items


def _device(kind: object, index: object = None) -> str:
    if not isinstance(kind, str) or not (index is None or type(index) is int):
        raise TorchFileError(f"torch.device of {str(kind)[:40]}, {str(index)[:40]}")
    return kind if index is None else f"{kind}:{index}"


def _complex(real: object = 0, imag: object = 0) -> complex:
    if not all(type(part) in (int, float) for part in (real, imag)):
        raise TorchFileError("complex of something other than numbers")
    assert isinstance(real, (int, float)) and isinstance(imag, (int, float))
    return complex(real, imag)


def _encode(text: object, encoding: object = "utf-8") -> bytes:
    """How protocol 2 pickles bytes: ``_codecs.encode(text, "latin1")``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise TorchFileError("_codecs.encode other than bytes as latin-1")
    return text.encode("latin-1")


def _bytearray(*args: object) -> bytearray:
    """How protocol 2 pickles a bytearray: from latin-1 text (never from a count: no forged allocation)."""
    if not args:
        return bytearray()
    if isinstance(args[0], bytes) and len(args) == 1:
        return bytearray(args[0])
    if len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1"):
        return bytearray(args[0].encode("latin-1"))
    raise TorchFileError("bytearray other than from bytes")


# the other globals a tensor file's pickle may name, as torch's weights_only loader allows them
_GLOBALS: dict[str, object] = {
    "torch._utils._rebuild_parameter": SafeCall("_rebuild_parameter", _parameter),
    "torch._utils._rebuild_parameter_with_state": SafeCall(
        "_rebuild_parameter_with_state", _parameter_with_state
    ),
    "torch.storage.UntypedStorage": _StorageType("uint8"),
    "torch.UntypedStorage": _StorageType("uint8"),
    "torch.Size": SafeCall("Size", _size),
    "torch.device": SafeCall("device", _device),
    # what else torch's weights_only loader allows outside torch (a meta dict may hold them)
    "collections.OrderedDict": SafeCall("OrderedDict", OrderedDict),
    "collections.Counter": SafeCall("Counter", Counter),
    "builtins.set": SafeCall("set", set),
    "builtins.complex": SafeCall("complex", _complex),
    "builtins.bytearray": SafeCall("bytearray", _bytearray),
    "_codecs.encode": SafeCall("encode", _encode),
}
