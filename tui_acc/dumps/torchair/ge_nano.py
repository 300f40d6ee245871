"""The "nano" GE dump file: a TLV header in place of the protobuf one (docs/formats.md §7.1).

What msprobe reads (``msaccucmp/dump_parse/nano_dump_data.py``, its TLV tables; ``cmp_utils/tlv_parse.py``,
native little-endian ``struct`` formats): a uint64 header length, the header, then every input's
bytes and every output's, in order. The header: uint32 magic ``0x5A5A5A5A``, uint32 version, then
two TLVs, inputs (tag 4) and outputs (tag 5), each a uint32 tag, a uint32 length and a uint32
count of tensors. An input is int32 data_type, format, address_type, uint64 address, offset, size,
then a uint32 length of the TLNV list after it: shape (tag 0) and original shape (tag 1), each a
uint32 tag, a uint32 byte length and uint64 dims. An output has three int32s more after
address_type (original_index, original_data_type, original_format) and a third TLNV, its
original name (tag 2, characters). The data types are numbered their own way (``NanoDataType``:
DT_FLOAT 0, DT_FLOAT16 1, DT_INT32 3, DT_BF16 27, ...), mapped here to dump_data.proto's.
"""

from __future__ import annotations

import struct

from tui_acc.dumps.model import DumpError

MAGIC = 0x5A5A5A5A
_INPUTS, _OUTPUTS = 4, 5
_SHAPE, _ORIGINAL_SHAPE, _ORIGINAL_NAME = 0, 1, 2
# NanoDataType -> dump_data.proto's OutputDataType (NANO_DATA_TYPE_TO_PROTO_DATA_TYPE)
_PROTO_DTYPE = {
    0: 1,
    1: 2,
    11: 12,
    2: 3,
    6: 5,
    3: 7,
    9: 8,
    4: 4,
    7: 6,
    8: 9,
    10: 10,
    12: 11,
    16: 16,
    17: 17,
    27: 27,
    23: 8,
}
_UNKNOWN = 1000  # a nano data type with no proto equivalent: refused by name when loaded
_MAX_DIMS = 64
_MAX_TENSORS = 4096  # an op's inputs and outputs: a count past this is no header's
HEADER_LIMIT = 1 << 20  # a nano header is a few hundred bytes


class NanoError(DumpError):
    """A nano header that does not hold together (the message says where)."""


def is_nano(start: bytes) -> bool:
    """Whether a file's first twelve bytes begin a nano dump (the magic after the header length)."""
    return len(start) >= 12 and struct.unpack_from("<I", start, 8)[0] == MAGIC


def tensors(header: bytes) -> list[tuple[str, int, int, int, list[int], list[int], int]]:
    """Each tensor of a nano header (the bytes after the uint64 length): (role, index, proto data
    type, format, shape, original shape, size), inputs first. NanoError where it is cut short."""
    reader = _Reader(header)
    if reader.u32() != MAGIC:
        raise NanoError("no nano magic")
    reader.u32()  # version
    found = []
    for tag, role in ((_INPUTS, "input"), (_OUTPUTS, "output")):
        if reader.left() == 0:
            break
        if reader.u32() != tag:
            raise NanoError(f"the {role}s' TLV does not carry tag {tag}")
        reader.u32()  # its length: msprobe reads by the count, as here
        count = reader.u32()
        if count > _MAX_TENSORS:
            raise NanoError(f"{count} {role}s")
        for index in range(count):
            data_type, layout = reader.i32(), reader.i32()
            reader.i32()  # address type
            if role == "output":
                reader.i32(), reader.i32(), reader.i32()  # original index, data type, format
            reader.u64(), reader.u64()  # address, offset
            size = reader.u64()
            listed = reader.u32()
            shape: list[int] = []
            original: list[int] = []
            end = reader.position + listed
            while reader.position < end:
                kind, length = reader.u32(), reader.u32()
                if kind in (_SHAPE, _ORIGINAL_SHAPE):
                    if length // 8 > _MAX_DIMS:
                        raise NanoError(f"{role} {index} has a shape of {length // 8} dimensions")
                    dims = [reader.u64() for _ in range(length // 8)]
                    (shape if kind == _SHAPE else original).extend(dims)
                else:
                    reader.skip(length)  # the original name
            if reader.position != end:
                raise NanoError(f"{role} {index}'s shapes run past their length")
            found.append((role, index, _PROTO_DTYPE.get(data_type, _UNKNOWN), layout, shape, original, size))
    return found


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def left(self) -> int:
        return len(self.data) - self.position

    def _take(self, fmt: str, width: int) -> int:
        if self.position + width > len(self.data):
            raise NanoError(f"the header ends at byte {len(self.data)}, inside a field at {self.position}")
        (value,) = struct.unpack_from(fmt, self.data, self.position)
        self.position += width
        return int(value)

    def u32(self) -> int:
        return self._take("<I", 4)

    def i32(self) -> int:
        return self._take("<i", 4)

    def u64(self) -> int:
        return self._take("<Q", 8)

    def skip(self, width: int) -> None:
        if self.position + width > len(self.data):
            raise NanoError(f"a field of {width} bytes at {self.position} runs past the header")
        self.position += width
