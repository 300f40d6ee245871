"""The ATB / Mki ``.bin`` tensor file (docs/formats.md §2.3), read exactly or refused by name.

Layout: ``name=value`` text lines up to ``$End=1``, then the raw element bytes::

    $Version=1.0
    $Object.Count=1
    $Object.Length=768
    format=2
    dtype=27
    dims=1,6,64
    $Object.data=0,768
    $End=1
    <payload>

The payload is memory-mapped (copy-on-write), so a large tensor costs no read until used.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from stat import S_ISREG

import numpy as np

from tui_acc.dumps.atb import probe_alias, tiled
from tui_acc.dumps.dtypes import numpy_dtype
from tui_acc.dumps.fs import NotRegularFile, file_kind, open_regular, read_ahead, settled
from tui_acc.dumps.mapped import map_bytes
from tui_acc.dumps.policy import LoadPolicy, OutsideDump

END_LINE = b"$End=1\n"
_VERSION_LINE = b"$Version="  # how an ATB tensor file begins (a raw data= payload does not)
_MAX_DIMS = 64  # numpy's limit; no ATB tensor has more than 8
_MAX_ALIAS_HOPS = 4
_HEADER_LIMIT = 1 << 20

# aclDataType codes (docs/formats.md §2.3) -> (name, bytes per element or None when packed below a byte)
ACL_DTYPES: dict[int, tuple[str, float]] = {
    0: ("float32", 4),
    1: ("float16", 2),
    2: ("int8", 1),
    3: ("int32", 4),
    4: ("uint8", 1),
    6: ("int16", 2),
    7: ("uint16", 2),
    8: ("uint32", 4),
    9: ("int64", 8),
    10: ("uint64", 8),
    11: ("float64", 8),
    12: ("bool", 1),
    16: ("complex64", 8),
    17: ("complex128", 16),
    27: ("bfloat16", 2),
    29: ("int4", 0.5),
    33: ("complex32", 4),
    35: ("float8_e5m2", 1),
    36: ("float8_e4m3fn", 1),
    37: ("float8_e8m0fnu", 1),
    40: ("float4_e2m1", 0.5),
}

# Codes we know but will not guess at: their packing or encoding is Ascend-specific and could
# not be verified, and a wrong guess would produce plausible-looking wrong numbers.
REFUSED_DTYPES: dict[int, str] = {
    -1: "UNDEFINED",
    13: "STRING",
    30: "UINT1 (bit-packed; bit order unverified)",
    34: "HIFLOAT8 (Ascend tapered float)",
    38: "FLOAT6_E3M2 (6-bit packing unverified)",
    39: "FLOAT6_E2M3 (6-bit packing unverified)",
    41: "FLOAT4_E1M2 (encoding unverified)",
    42: "HIFLOAT4 (Ascend tapered float)",
}

# aclFormat codes whose dims describe memory order directly; tiled formats (FRACTAL_Z, NDC1HWC0, ...)
# would need un-tiling, and reading them as dims gives wrong values. FRACTAL_NZ and NC1HWC0 are
# un-tiled (tiled.py).
PLAIN_FORMATS = {
    -1: "UNDEFINED",
    0: "NCHW",
    1: "NHWC",
    2: "ND",
    16: "HWCN",
    27: "NDHWC",
    30: "NCDHW",
    35: "NC",
    47: "NCL",
}
TILED_FORMATS = {
    4: "FRACTAL_Z",
    32: "NDC1HWC0",
    33: "FRACTAL_Z_3D",
}

# OCP FP4 E2M1 magnitudes for codes 0..7 (bit 3 is the sign).
_FP4_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


class BinFileError(Exception):
    """A ``.bin`` that cannot be read exactly; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass
class BinHeader:
    """Everything the header says, without the payload."""

    path: Path
    header_bytes: int
    dtype_code: int
    format_code: int
    dims: list[int]
    object_length: int | None = None
    data_offset: int = 0
    data_length: int | None = None
    external: str | None = None
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        """The element count the dims give (1 for a scalar's empty dims)."""
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def dtype_name(self) -> str:
        """The dtype as torch names it; a refused code's name, or ``code N`` for one unknown."""
        known = ACL_DTYPES.get(self.dtype_code)
        return known[0] if known else REFUSED_DTYPES.get(self.dtype_code, f"code {self.dtype_code}")

    def payload_bytes(self) -> int:
        """The payload's size in bytes, 4-bit types packed two to a byte (rounded up).

        Raises:
            KeyError: the dtype is not one ``ACL_DTYPES`` decodes (``load_bin`` refuses those first).
        """
        size = ACL_DTYPES[self.dtype_code][1]
        if size >= 1:
            return self.numel * int(size)
        per_byte = round(1 / size)  # integers only: a forged dims of 10^400 overflows any float
        return -(-self.numel // per_byte)


def read_header(path: Path) -> BinHeader:
    """Parse the text header (the first few hundred bytes); no payload is read."""
    try:
        with open_regular(path) as handle:  # a FIFO named outtensor0.bin must not block the reader
            head = handle.read(4096)
            while END_LINE not in head and len(head) < _HEADER_LIMIT:
                more = handle.read(65536)
                if not more:
                    break
                head += more
    except NotRegularFile as exc:
        raise BinFileError(path, str(exc)) from exc
    except OSError as exc:
        raise BinFileError(path, f"cannot read ({exc.strerror or exc})") from exc
    end = head.find(END_LINE)
    if end < 0:
        raise BinFileError(path, "no '$End=1' line: not an ATB tensor file, or truncated")
    fields: dict[str, str] = {}
    for raw in head[:end].split(b"\n"):
        line = raw.decode("utf-8", errors="replace")
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or "=" in value:
            raise BinFileError(path, f"malformed header line {line[:80]!r} (expected name=value)")
        if key in fields:  # which one the writer meant is not known: a dtype given twice misreads bytes
            raise BinFileError(path, f"header gives {key[:40]} twice; refused rather than read by either")
        fields[key] = value
    header = BinHeader(
        path=path,
        header_bytes=end + len(END_LINE),
        dtype_code=_int(path, fields, "dtype"),
        format_code=_int(path, fields, "format", default=2),
        dims=_dims(path, fields.get("dims")),
    )
    if "$Object.Length" in fields:
        header.object_length = _int(path, fields, "$Object.Length")
    if "$Object.data" in fields:
        offset, _, length = fields["$Object.data"].partition(",")
        header.data_offset = _to_int(path, "$Object.data", offset)
        header.data_length = _to_int(path, "$Object.data", length) if length else None
        if header.data_offset < 0 or (header.data_length or 0) < 0:
            # an offset before the payload would decode the header's own text as values
            raise BinFileError(
                path, f"header $Object.data={fields['$Object.data']} has a negative offset or length"
            )
    header.external = fields.get("data")
    for stat in ("max", "min", "mean", "l2norm"):
        if stat in fields:
            header.stats[stat] = _to_float(path, stat, fields[stat])
    return header


def load_bin(path: Path, policy: LoadPolicy, _hops: int = 0) -> np.ndarray:
    """Read one ``.bin`` tensor exactly; refuse (BinFileError) what cannot be read exactly.

    A ``data=`` file is read where ``policy`` (the dump's) allows it.
    msprobe's probe aliases (``data={ids}_outtensor0.bin``) are followed to the ``.bin`` they name.
    """
    header = read_header(path)
    alias = _probe_alias(header, policy, _hops)
    if alias is not None:
        return load_bin(alias, policy, _hops + 1)
    if header.dtype_code not in ACL_DTYPES:
        raise BinFileError(
            path, f"dtype {header.dtype_name} cannot be decoded exactly; refused rather than misread"
        )
    logical: list[int] | None = None
    if header.format_code in tiled.UNTILED:
        try:
            storage, logical = tiled.storage_dims(
                header.dims, ACL_DTYPES[header.dtype_code][1], header.format_code
            )
        except tiled.TilingError as exc:
            raise BinFileError(path, str(exc)) from exc
        header = replace(header, dims=storage)
    elif header.format_code in TILED_FORMATS:
        raise BinFileError(
            path,
            f"format {TILED_FORMATS[header.format_code]} ({header.format_code}) is a tiled layout; "
            "convert it to ND before dumping (refused rather than misread)",
        )
    elif header.format_code not in PLAIN_FORMATS:
        raise BinFileError(path, f"unknown format code {header.format_code}; refused rather than misread")
    if header.stats and header.data_length is None and header.external is None:
        raise BinFileError(path, "a statistics-only tensor (max/min/mean/l2norm, no data)")
    source, start = _payload_source(header, policy)
    need = header.payload_bytes()
    try:
        status = source.stat()
    except OSError as exc:
        raise BinFileError(path, f"cannot read ({exc.strerror or exc})") from exc
    if not S_ISREG(status.st_mode):
        raise BinFileError(
            path, f"its data= file {source} is not a regular file ({file_kind(status.st_mode)})"
        )
    if start > status.st_size:
        raise BinFileError(
            path, f"its payload starts at byte {start}, past the end of {source} ({status.st_size} bytes)"
        )
    available = status.st_size - start
    if header.data_length is not None and header.data_length < need:
        raise BinFileError(
            path, f"$Object.data says {header.data_length} bytes; {_extent(header)} need {need}"
        )
    if available < need:
        raise BinFileError(
            path,
            f"truncated: {available} payload bytes, {_extent(header)} need {need}",
        )
    try:
        raw = _map(source, start, need)
    except (OSError, ValueError) as exc:  # unreadable, or shrunk since it was measured
        raise BinFileError(path, f"cannot read its payload ({exc})") from exc
    values = _decode(raw, header)
    if header.format_code in tiled.UNTILED:
        return tiled.to_nd(values, logical, header.format_code)
    return values


def _extent(header: BinHeader) -> str:
    """What the payload must hold, as an error says it: the dims, or a tiled layout's tiles."""
    if header.format_code in tiled.UNTILED:
        return f"its tiles {header.dims} x {header.dtype_name}"
    return f"dims {header.dims} x {header.dtype_name}"


def _probe_alias(header: BinHeader, policy: LoadPolicy, hops: int) -> Path | None:
    """The file a probe alias names (probe_alias.py), checked to lie inside the dump."""
    if header.external is None:
        return None
    if probe_alias.is_self_reference(header.path, header.external):
        raise BinFileError(
            header.path,
            "its data= names the file itself: a kernel tensor the probe did not save (filter_level 2)",
        )
    if policy.is_file(header.path.parent / header.external):
        return None  # a payload file beside it (msit's data=)
    target = probe_alias.resolve(header.path, header.external)
    if target is None:
        return None  # not a probe alias: read as a data= payload file (which says what is missing)
    if hops >= _MAX_ALIAS_HOPS:
        raise BinFileError(header.path, f"its data= aliases chain over {_MAX_ALIAS_HOPS} files; not followed")
    try:
        return policy.check(target, "its data= alias leads to")
    except OutsideDump as exc:
        raise BinFileError(header.path, str(exc)) from exc


def _payload_source(header: BinHeader, policy: LoadPolicy) -> tuple[Path, int]:
    if header.external is None:
        return header.path, header.header_bytes + header.data_offset
    external = Path(header.external)
    if not external.is_absolute():
        external = header.path.parent / external
    try:
        readable = policy.check(external, "its data= file leads to")  # a copy, under --ray
    except OutsideDump as exc:
        raise BinFileError(header.path, str(exc)) from exc
    except FileNotFoundError:
        readable = external  # on the node that holds the dump: said as here
    except OSError as exc:
        raise BinFileError(header.path, f"its data= file {external} cannot be read ({exc.strerror})") from exc
    if not readable.exists():
        raise BinFileError(header.path, f"its data= file {external} does not exist")
    try:
        with open_regular(readable) as handle:
            another = handle.read(len(_VERSION_LINE)) == _VERSION_LINE
    except OSError:
        another = False  # said where it is read
    if another:  # its header's own text would be read as values
        raise BinFileError(
            header.path, f"its data= file {external} is itself an ATB tensor file, not a payload"
        )
    return readable, header.data_offset


def _map(source: Path, start: int, length: int) -> np.ndarray:
    if length == 0:
        return np.zeros(0, dtype=np.uint8)
    with open_regular(source) as handle:
        if settled(source):  # else it may still be being written: read, not mapped
            read_ahead(handle.fileno(), start, length)
            # copy-on-write: pages are read only when touched, and the array is writable; guarded
            # against the file being cut short under it (None: no guard built, read instead)
            mapped = map_bytes(handle.fileno(), start, length)
            if mapped is not None:
                return mapped
        handle.seek(start)
        return np.frombuffer(bytearray(handle.read(length)), dtype=np.uint8)


def _decode(raw: np.ndarray, header: BinHeader) -> np.ndarray:
    name = ACL_DTYPES[header.dtype_code][0]
    if name == "int4":
        low = (raw & 0x0F).astype(np.int8)
        high = (raw >> 4).astype(np.int8)
        values = np.stack([low, high], axis=-1).reshape(-1)[: header.numel]
        values = np.where(values > 7, values - 16, values).astype(np.int8)
        return values.reshape(header.dims)
    if name == "complex32":
        # no numpy type holds half-precision complex numbers: widened exactly to complex64
        pairs = raw.view(np.float16).astype(np.float32)
        return pairs.view(np.complex64).reshape(header.dims)
    if name == "float4_e2m1":
        codes = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1)[: header.numel]
        values = _FP4_E2M1[codes & 0x07] * np.where(codes & 0x08, -1.0, 1.0).astype(np.float32)
        return values.astype(np.float32).reshape(header.dims)
    dtype = numpy_dtype(name)
    if dtype is None:  # pragma: no cover - every ACL_DTYPES name is one dtypes.py knows (a test checks)
        raise BinFileError(header.path, f"dtype {name} has no exact numpy type")
    if header.numel == 0:
        return np.zeros(header.dims, dtype=dtype)
    return raw.view(dtype).reshape(header.dims)


def _int(path: Path, fields: dict[str, str], key: str, default: int | None = None) -> int:
    if key not in fields:
        if default is not None:
            return default
        raise BinFileError(path, f"header has no {key}= line")
    return _to_int(path, key, fields[key])


def _to_int(path: Path, key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise BinFileError(path, f"header {key}={value!r} is not an integer") from exc


def _to_float(path: Path, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError as exc:
        raise BinFileError(path, f"header {key}={value!r} is not a number") from exc


def _dims(path: Path, value: str | None) -> list[int]:
    if value is None:
        raise BinFileError(path, "header has no dims= line")
    if value == "":
        return []
    dims = [_to_int(path, "dims", d) for d in value.split(",")]
    if len(dims) > _MAX_DIMS:
        raise BinFileError(path, f"dims has {len(dims)} entries; at most {_MAX_DIMS} (numpy's limit)")
    if any(d < 0 for d in dims):
        raise BinFileError(path, f"negative dimension in dims={value}")
    return dims
