"""Hostile torch files, built byte by byte at test time (a few KB to a few MB each): the pickles,
views and zip records a hostile file may hold, for the attack suite (test_attacks.py) and unit tests.

Pickles use the opcodes torch.save writes (protocol 2), so each reaches the part of the reader it
attacks instead of stopping at an unknown opcode. Archives are written here too, record by record:
zipfile can neither write a record deflated elsewhere nor two records of one name.
"""

from __future__ import annotations

import functools
import pickle
import struct
import zlib
from dataclasses import dataclass

PROTO = b"\x80\x02"
STOP = b"."
MARK, TUPLE, TUPLE1, TUPLE2 = b"(", b"t", b"\x85", b"\x86"
EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE = b"}", b"]", b")"
SETITEM, APPEND, APPENDS, REDUCE, BINPERSID, NEWFALSE = b"s", b"a", b"e", b"R", b"Q", b"\x89"


def integer(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])  # BININT1
    if -(1 << 31) <= value < 1 << 31:
        return b"J" + struct.pack("<i", value)  # BININT
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def put(index: int) -> bytes:
    return b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)  # BINPUT


def get(index: int) -> bytes:
    return b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)  # BINGET


def named(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL


def integers(values: tuple[int, ...]) -> bytes:
    return MARK + b"".join(integer(v) for v in values) + TUPLE


# --- objects: one pushes its value on the stack ----------------------------------------------------


def deep_tuple(depth: int) -> bytes:
    """``((((),),),)``: ``depth`` tuples inside each other, one byte a level."""
    return EMPTY_TUPLE + TUPLE1 * depth


def deep_list(depth: int) -> bytes:
    """``[[[...]]]``: ``depth`` lists pushed, then each appended to the one below."""
    return EMPTY_LIST * (depth + 1) + APPEND * depth


def tuple_dag(levels: int) -> bytes:
    """t0 = (), t(k+1) = (tk, tk), each level one memo reference to the last (5 bytes a level);
    written out (as hashing or comparing it walks it) it is 2^levels tuples."""
    out = EMPTY_TUPLE
    for level in range(levels):
        out += put(level) + get(level) + TUPLE2
    return out


def list_dag(levels: int) -> bytes:
    """The same with lists, each level's list holding the one before twice, and all of them in one
    tuple (the pickle has no POP to drop them): unhashable, but whatever writes the tuple out
    (repr, a recursive walk) visits 2^levels lists."""
    out = MARK + EMPTY_LIST + put(0)
    for level in range(levels):
        out += EMPTY_LIST + put(level + 1) + MARK + get(level) + get(level) + APPENDS
    return out + TUPLE


def float_tensor(numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> bytes:
    """``torch._utils._rebuild_tensor_v2`` of a view over float32 storage "0" of ``numel`` elements,
    as torch.save writes it (the persistent id names the storage; the hooks are an OrderedDict)."""
    storage = MARK + text("storage") + named("torch", "FloatStorage") + text("0") + text("cpu")
    storage += integer(numel) + TUPLE + BINPERSID
    hooks = named("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE
    view = integer(offset) + integers(size) + integers(stride)
    arguments = MARK + storage + view + NEWFALSE + hooks + TUPLE
    return named("torch._utils", "_rebuild_tensor_v2") + arguments + REDUCE


# --- whole pickles -------------------------------------------------------------------------------


def pickle_of(value: bytes) -> bytes:
    return PROTO + value + STOP


def colliding_keys(count: int) -> bytes:
    """``{k: 1 for k in keys}``, ``count`` int keys that share one hash (1 + n * (2^61 - 1): Python
    hashes an int modulo 2^61 - 1), in one SETITEMS: each insert probes every key before it."""
    pairs = b"".join(integer(1 + n * ((1 << 61) - 1)) + integer(1) for n in range(count))
    return PROTO + EMPTY_DICT + MARK + pairs + b"u" + STOP


def as_dict_key(key: bytes) -> bytes:
    """``{key: 1}``: SETITEM hashes the key."""
    return PROTO + EMPTY_DICT + key + integer(1) + SETITEM + STOP


def as_set_member(member: bytes) -> bytes:
    """``set([member])``, as protocol 2 pickles a set: the call hashes its member."""
    return PROTO + named("__builtin__", "set") + EMPTY_LIST + member + APPEND + TUPLE1 + REDUCE + STOP


def beside_a_tensor(extra: bytes, size: tuple[int, ...]) -> bytes:
    """``{"value": tensor, "meta": extra}`` (SGLang's layout: the reader hands the value on), the
    tensor a contiguous float32 view of ``size``."""
    numel = 1
    for extent in size:
        numel *= extent
    stride = tuple(_contiguous(size))
    tensor = float_tensor(numel, 0, size, stride)
    return PROTO + EMPTY_DICT + MARK + text("value") + tensor + text("meta") + extra + b"u" + STOP


def _contiguous(size: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(size):
        strides.append(step)
        step *= extent
    return strides[::-1]


def legacy(obj_pickle: bytes) -> bytes:
    """torch's legacy (non-zip) format around a pickled object: the magic number, the protocol, the
    system's description, the object, then its storage keys (none)."""
    head = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
    sizes = {"short": 2, "int": 4, "long": 4}
    sys_info = {"protocol_version": 1001, "little_endian": True, "type_sizes": sizes}
    return head + pickle.dumps(sys_info, protocol=2) + obj_pickle + pickle.dumps([], protocol=2)


# --- zip archives --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """A zip record as written: its bytes (deflated where ``method`` is 8), size and CRC-32 of the
    content they stand for."""

    name: str
    data: bytes
    size: int
    crc: int
    method: int = 0


def stored(name: str, data: bytes) -> Record:
    return Record(name, data, len(data), zlib.crc32(data))


def deflated(name: str, data: bytes) -> Record:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return Record(name, packer.compress(data) + packer.flush(), len(data), zlib.crc32(data), 8)


def deflated_zeros(name: str, size: int) -> Record:
    """``size`` zero bytes deflated (about 1 KB a MiB, 1032:1), without compressing them all."""
    data, crc = _deflated_zeros(size)
    return Record(name, data, size, crc, 8)


@functools.cache
def _deflated_zeros(size: int, chunk: int = 1 << 20) -> tuple[bytes, int]:
    """A chunk deflated with a full flush (byte-aligned, dictionary reset) repeats as it is."""
    assert size % chunk == 0
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = packer.compress(bytes(chunk)) + packer.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty last block
    crc = 0
    zeros = bytes(chunk)
    for _ in range(size // chunk):
        crc = zlib.crc32(zeros, crc)
    return block * (size // chunk) + final, crc


def torch_records(pickled: bytes, storages: dict[str, bytes]) -> list[Record]:
    """The records torch.save writes, stored: data.pkl, byteorder, version, data/<key>."""
    records = [stored("archive/data.pkl", pickled), stored("archive/byteorder", b"little")]
    records.append(stored("archive/version", b"3\n"))
    return records + [stored(f"archive/data/{key}", data) for key, data in storages.items()]


def zip_of(records: list[Record], *, pointed: dict[str, str] | None = None) -> bytes:
    """The archive, record after record, then its central directory (no zip64: all small here).
    ``pointed`` forges the directory: entry name -> the record whose local header its offset names."""
    body, directory = b"", b""
    offsets: dict[str, int] = {}  # by name: a record's first local header
    entries: list[tuple[bytes, bytes, int]] = []
    for record in records:
        name = record.name.encode()
        # version needed, flags, method, time, date, CRC-32, compressed and uncompressed sizes
        sizes = (record.crc, len(record.data), record.size)
        common = struct.pack("<5H3L", 20, 0, record.method, 0, 0x21, *sizes)
        offsets.setdefault(record.name, len(body))
        entries.append((name, common, len(body)))
        body += b"PK\x03\x04" + common + struct.pack("<2H", len(name), 0) + name + record.data
    for record, (name, common, own) in zip(records, entries, strict=True):
        target = (pointed or {}).get(record.name)
        offset = own if target is None else offsets[target]
        # name and extra field lengths; the directory adds comment length, disk, attributes, offset
        directory += b"PK\x01\x02" + struct.pack("<H", 20) + common
        directory += struct.pack("<5H2L", len(name), 0, 0, 0, 0, 0, offset) + name
    count = len(records)
    end = b"PK\x05\x06" + struct.pack("<4H2LH", 0, 0, count, count, len(directory), len(body), 0)
    return body + directory + end
