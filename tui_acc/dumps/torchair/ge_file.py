"""One GE dump file (TorchAir's graph mode, ``ge.exec.enableDump``): its tensors' descriptions and data.

A file ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` holds (docs/formats.md §7.1; msprobe's
``msaccucmp/dump_parse/big_dump_data.py``): a little-endian uint64 header length, then that many bytes
of a protobuf ``toolkit.dumpdata.DumpData`` whose tensors carry their sizes but no data, then the raw
bytes of every input, output, buffer and workspace, in that order. The old layout is one
``DumpData`` with the bytes inside each tensor's ``data`` field; the "nano" layout a TLV header in the
protobuf's place (``ge_nano.py``). The protobuf is read here by its wire format (no generated code):
the few fields tui-acc needs, every length checked against the file.

Field numbers and the dtype codes are the .proto's (``dump_data.proto``, kept at msprobe 313fa13
``resource/dump_data.proto``): ``DumpData`` version 1, dump_time 2, output 3, input 4, buffer 5,
op_name 6, space 8; ``OpInput`` / ``OpOutput`` data_type 1, format 2, shape 3, data 4 / 5, size 5 / 6,
original_shape 6 / 7.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import ml_dtypes
import numpy as np

from tui_acc.dumps.atb.tiled import FIVE_HD, FRACTAL_NZ, to_nd
from tui_acc.dumps.fs import settled
from tui_acc.dumps.mapped import map_bytes
from tui_acc.dumps.model import DumpError
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchair.ge_nano import HEADER_LIMIT as NANO_HEADER_LIMIT
from tui_acc.dumps.torchair.ge_nano import NanoError, is_nano, tensors

# dump_data.proto's OutputDataType (not ge::DataType's numbering) -> numpy; the rest are refused by name
DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.float16),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint8),
    5: np.dtype(np.int16),
    6: np.dtype(np.uint16),
    7: np.dtype(np.int32),
    8: np.dtype(np.int64),
    9: np.dtype(np.uint32),
    10: np.dtype(np.uint64),
    11: np.dtype(np.bool_),
    12: np.dtype(np.float64),
    16: np.dtype(np.complex64),
    17: np.dtype(np.complex128),
    23: np.dtype(np.int64),  # DT_RESOURCE
    27: np.dtype(ml_dtypes.bfloat16),
    34: np.dtype(ml_dtypes.float8_e5m2),
    35: np.dtype(ml_dtypes.float8_e4m3fn),
}
_ROLES = {4: "input", 3: "output", 5: "buffer", 8: "space"}
# the order the raw bytes follow the header in
_DATA_ORDER = ("input", "output", "buffer", "space")
_HEADER_LIMIT = 1 << 30  # a header is a few hundred bytes: a length past this is not one
_MAX_DEPTH = 4  # DumpData > OpOutput > Shape / OriginalOp: nothing deeper is read


class GeDumpError(DumpError):
    """A file that is not a GE dump as its format says, or one tui-acc cannot read; the message says which."""


@dataclass
class GeTensor:
    """One tensor of a GE dump file: where its bytes lie and how to read them."""

    role: str  # input, output, buffer, space
    index: int
    data_type: int
    format: int
    shape: list[int]
    original_shape: list[int]
    size: int
    offset: int = 0  # of its bytes in the file
    inline: bytes | None = field(default=None, repr=False)  # the old layout's bytes

    @property
    def logical_shape(self) -> tuple[int, ...]:
        """The shape its values have once read (``original_shape`` where GE recorded one: a tiled
        format's padding cut), as its header says it."""
        return tuple(self.original_shape or self.shape)

    @property
    def primary_format(self) -> int:
        """The format without the sub-format bits C++ packs above it (``format & 0xff``)."""
        return self.format & 0xFF


@dataclass
class GeDump:
    """A GE dump file's header: the op's name and every tensor."""

    path: Path
    op_name: str
    tensors: list[GeTensor]

    def of(self, role: str) -> list[GeTensor]:
        return [t for t in self.tensors if t.role == role]


def read_header(path: Path, content: bytes) -> GeDump:
    """The header of the GE dump file ``path`` (its bytes ``content``); GeDumpError where it is none."""
    if is_nano(content[:12]):
        (length,) = struct.unpack_from("<Q", content, 0)
        if length >= NANO_HEADER_LIMIT:
            raise GeDumpError(f"{path}: a nano GE dump whose header length {length} is no header's")
        return _nano(path, content[8 : 8 + length], len(content))
    mismatch = ""
    if len(content) >= 8:
        (length,) = struct.unpack_from("<Q", content, 0)
        if 8 + length <= len(content):
            try:
                dump = _dump_data(path, content[8 : 8 + length], inline=False)
            except GeDumpError:
                dump = None
            if dump is not None and dump.tensors:
                end = _placed(dump, 8 + length)
                if end == len(content):
                    return dump
                mismatch = f"its header's tensors take {end} bytes, the file holds {len(content)}"
    try:  # the old layout: one DumpData, the bytes inside it
        dump = _dump_data(path, content, inline=True)
    except GeDumpError as exc:
        raise GeDumpError(f"{path}: not a GE dump file ({mismatch or exc})") from None
    if not dump.tensors:
        raise GeDumpError(f"{path}: not a GE dump file (no tensor in it)")
    return dump


def load(dump: GeDump, tensor: GeTensor, content: bytes) -> np.ndarray:
    """``tensor``'s values from the whole file's bytes ``content`` (``decode``)."""
    raw = tensor.inline if tensor.inline is not None else content[tensor.offset : tensor.offset + tensor.size]
    return decode(dump, tensor, raw)


def read_file_header(path: Path, policy: LoadPolicy) -> GeDump:
    """The header of the GE dump file at ``path``, reading only the header (the old layout, whose
    bytes sit inside it, is read whole). GeDumpError where it is no GE dump; OSError where it cannot
    be read."""
    with policy.open(path) as handle:
        return _header_of(handle, path)


def load_member(path: Path, member: str, policy: LoadPolicy) -> np.ndarray:
    """The tensor ``member`` (``input.0``, ``output.1``) of the GE dump file at ``path``: its bytes
    mapped where the file has settled (read where it may still be being written)."""
    role, _, number = member.partition(".")
    with policy.open(path) as handle:
        dump = _header_of(handle, path)
        tensor = next((t for t in dump.of(role) if str(t.index) == number), None)
        if tensor is None:
            raise GeDumpError(f"{path}: holds no {member} (it holds {len(dump.of(role))} {role}s)")
        if tensor.inline is not None:
            return decode(dump, tensor, tensor.inline)
        raw = map_bytes(handle.fileno(), tensor.offset, tensor.size) if settled(path) else None
        if raw is None:
            handle.seek(tensor.offset)
            raw = handle.read(tensor.size)
        return decode(dump, tensor, raw)


def _header_of(handle: IO[Any], path: Path) -> GeDump:
    """The big layout's header, read alone; the old layout (its bytes inside one message) read whole,
    only where the first bytes are no big-layout header at all: a big-layout file cut short or
    padded is named, not read whole."""
    size = os.fstat(handle.fileno()).st_size
    start = handle.read(12)
    if is_nano(start):
        (length,) = struct.unpack_from("<Q", start, 0)
        if length >= NANO_HEADER_LIMIT:
            raise GeDumpError(f"{path}: a nano GE dump whose header length {length} is no header's")
        handle.seek(8)
        return _nano(path, handle.read(length), size)
    if len(start) >= 8:
        (length,) = struct.unpack_from("<Q", start, 0)
        if 8 + length <= size and length < _HEADER_LIMIT:
            handle.seek(8)
            try:
                dump = _dump_data(path, handle.read(length), inline=False)
            except GeDumpError:
                dump = None
            if dump is not None and dump.tensors and not any(t.inline for t in dump.tensors):
                end = _placed(dump, 8 + length)
                if end != size:
                    raise GeDumpError(f"{path}: its header's tensors take {end} bytes, the file holds {size}")
                return dump
    handle.seek(0)
    return read_header(path, handle.read())


def decode(dump: GeDump, tensor: GeTensor, raw: bytes | np.ndarray) -> np.ndarray:
    """``tensor``'s values from its bytes ``raw``, in its logical shape: FRACTAL_NZ and NC1HWC0 tiles
    back to ND / NCHW, cut to ``original_shape`` (their padding dropped)."""
    dtype = DTYPES.get(tensor.data_type)
    if dtype is None:
        raise GeDumpError(
            f"{dump.path}: {tensor.role} {tensor.index} has data type {tensor.data_type}, not read"
        )
    shape = tensor.shape or ([tensor.size // dtype.itemsize] if tensor.size else [0])
    count = math.prod(shape)
    if count * dtype.itemsize > len(raw):
        raise GeDumpError(
            f"{dump.path}: {tensor.role} {tensor.index} {shape} needs {count * dtype.itemsize} bytes, "
            f"the file holds {len(raw)}"
        )
    values = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
    logical = tensor.original_shape or shape
    try:
        return _logical(tensor, values, shape, logical, count)
    except ValueError as exc:  # an original_shape its tiles cannot hold
        raise GeDumpError(
            f"{dump.path}: {tensor.role} {tensor.index} {shape} cannot be read as {logical} ({exc})"
        ) from None


def _logical(
    tensor: GeTensor, values: np.ndarray, shape: list[int], logical: list[int], count: int
) -> np.ndarray:
    if tensor.primary_format == FRACTAL_NZ and len(shape) >= 4:
        # [..., C1, No, Ni, C0]: the rows' blocks merged, then the ATB reader's [..., W1, H', W0]
        *batch, c1, blocks, rows, c0 = shape
        tiles = values.reshape(*batch, c1, blocks * rows, c0)
        matrix = to_nd(tiles, [*logical[:-2], *logical[-2:]] if len(logical) >= 2 else None)
        return matrix.reshape(logical)
    if tensor.primary_format in FIVE_HD and len(shape) == 5:
        whole = to_nd(values, None, tensor.primary_format)
        return np.ascontiguousarray(whole[:, : logical[1]] if len(logical) == 4 else whole)
    return values.reshape(logical) if math.prod(logical) == count else values


def _nano(path: Path, header: bytes, size: int) -> GeDump:
    """A nano file's header (``ge_nano.py``), its tensors placed after it and checked against the
    file's size."""
    try:
        found = tensors(header)
    except NanoError as exc:
        raise GeDumpError(f"{path}: a nano GE dump whose header cannot be read ({exc})") from None
    parts = path.name.split(".")
    dump = GeDump(path, parts[1] if len(parts) > 1 else path.name, [GeTensor(*t) for t in found])
    end = _placed(dump, 8 + len(header))
    if end != size:
        raise GeDumpError(f"{path}: its nano header's tensors take {end} bytes, the file holds {size}")
    return dump


def _placed(dump: GeDump, start: int) -> int:
    """Give each tensor its offset after the header; where the last one ends."""
    offset = start
    for role in _DATA_ORDER:
        for tensor in dump.of(role):
            tensor.offset = offset
            offset += tensor.size
    return offset


# --- the protobuf wire format ---------------------------------------------------------------------


def _dump_data(path: Path, message: bytes, inline: bool) -> GeDump:
    op_name = ""
    tensors: list[GeTensor] = []
    counts = dict.fromkeys(_ROLES.values(), 0)
    for number, value in _fields(message, 0):
        if number == 6 and isinstance(value, bytes):
            op_name = value.decode("utf-8", "replace")
        elif number in _ROLES and isinstance(value, bytes):
            role = _ROLES[number]
            tensors.append(_tensor(role, counts[role], value, inline))
            counts[role] += 1
    return GeDump(path, op_name, tensors)


def _tensor(role: str, index: int, message: bytes, inline: bool) -> GeTensor:
    # OpOutput: data 5, size 6, original_shape 7; OpInput: data 4, size 5, original_shape 6;
    # buffers and workspaces: data 2, size 3
    fields = {"output": (5, 6, 7), "input": (4, 5, 6)}.get(role, (2, 3, None))
    data_field, size_field, original_field = fields
    found = GeTensor(role, index, 0, 2, [], [], 0)
    for number, value in _fields(message, 1):
        if role in ("input", "output") and number == 1 and isinstance(value, int):
            found.data_type = value
        elif role in ("input", "output") and number == 2 and isinstance(value, int):
            found.format = value
        elif role in ("input", "output") and number == 3 and isinstance(value, bytes):
            found.shape = _dims(value)
        elif number == original_field and isinstance(value, bytes):
            found.original_shape = _dims(value)
        elif number == size_field and isinstance(value, int):
            found.size = value
        elif number == data_field and isinstance(value, bytes) and inline:
            found.inline = value
    if found.inline is not None and not found.size:
        found.size = len(found.inline)
    return found


def _dims(message: bytes) -> list[int]:
    """``Shape.dim``: repeated uint64, packed (proto3's default) or one varint per field."""
    dims: list[int] = []
    for number, value in _fields(message, 2):
        if number != 1:
            continue
        if isinstance(value, int):
            dims.append(value)
        else:
            position = 0
            while position < len(value):
                dim, position = _varint(value, position)
                dims.append(dim)
    return dims


def _fields(message: bytes, depth: int) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of every field: varints as ints, length-delimited as bytes; fixed-width
    fields skipped. GeDumpError where a length runs past the message."""
    if depth > _MAX_DEPTH:
        raise GeDumpError("nested too deep")
    position = 0
    while position < len(message):
        key, position = _varint(message, position)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise GeDumpError("field number 0")
        if wire == 0:
            value, position = _varint(message, position)
            yield number, value
        elif wire == 2:
            length, position = _varint(message, position)
            if position + length > len(message):
                raise GeDumpError(
                    f"field {number} runs {position + length - len(message)} bytes past its message"
                )
            yield number, message[position : position + length]
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
            if position > len(message):
                raise GeDumpError(f"field {number} runs past its message")
        else:
            raise GeDumpError(f"wire type {wire} of field {number}")


def _varint(message: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(message) or shift > 63:
            raise GeDumpError("a varint runs past its message")
        byte = message[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
