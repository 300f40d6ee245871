"""GE statistics files: what a GE dump holds in place of an op's tensors with ``dump_data="stats"``.

The runtime writes, per op and run, ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.csv``: a
header row ``Input/Output,Index,Data Size,Data Type,Format,Shape`` and the statistics asked for,
each column named (``Max Value``, ``Min Value``, ``Avg Value``, ``l2norm``, ``Nan Count``,
``Negative Inf Count``, ``Positive Inf Count``, ``MD5 Value``), then a row per input and output
(docs/formats.md §7.2; the header names are the ones msprobe's own reader of these chunks matches,
ccsrc ``AclDumpDataProcessor.cpp`` ``ParseTensorSummary``). Columns are found by name, not place.

What no public source spells, the runtime's strings for a data type and a shape, is read where it
takes a form known elsewhere (GE's ``DT_BF16``, the dump proto's number, torch's ``bfloat16``; a shape
as its integers) and left unknown otherwise: the statistics are compared all the same. A tensor
stored in a padded device format (FRACTAL_NZ, NC1HWC0...) has statistics of its padding too: only
its NaN count is kept, and the file is named.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

from tui_acc.dumps.model import Problem, Stats, TensorRef
from tui_acc.dumps.policy import LoadPolicy

SUFFIX = ".csv"
_LIMIT = 1 << 20  # an op's statistics are a few hundred bytes: a file past this is not one
_MAX_INDEX = 9999  # an op's inputs or outputs: a row numbering one past this is not one

# dump_data.proto's OutputDataType numbers and GE's DT_ names -> torch's names
_CODES = {
    1: "float32", 2: "float16", 3: "int8", 4: "uint8", 5: "int16", 6: "uint16", 7: "int32",
    8: "int64", 9: "uint32", 10: "uint64", 11: "bool", 12: "float64", 16: "complex64",
    17: "complex128", 27: "bfloat16",
}  # fmt: skip
_GE_NAMES = {
    "FLOAT": "float32", "FLOAT16": "float16", "BF16": "bfloat16", "DOUBLE": "float64", "INT8": "int8",
    "UINT8": "uint8", "INT16": "int16", "UINT16": "uint16", "INT32": "int32", "INT64": "int64",
    "UINT32": "uint32", "UINT64": "uint64", "BOOL": "bool", "COMPLEX64": "complex64",
    "COMPLEX128": "complex128",
}  # fmt: skip
_TORCH_NAMES = frozenset(_CODES.values())
# formats that hold the logical elements and nothing else (a permutation at most: the statistics of
# a permutation are the same), by name or by ge::Format's number (hicann/ge
# ``inc/framework/executor_c/types.h``; ``format & 0xff``); every other format pads (FRACTAL_NZ 29,
# NC1HWC0 3, FRACTAL_Z 4...)
_UNPADDED = frozenset(
    {"NCHW", "NHWC", "ND", "CHWN", "HWCN", "NDHWC", "NCDHW", "DHWCN", "CN", "NC", "DHWNC"}
    | {"0", "1", "2", "14", "16", "27", "30", "31", "34", "35", "36"}
)
_FIELDS = {  # statistic -> the header names that hold it (the device's and msprobe's spellings)
    "max": ("max value",),
    "min": ("min value",),
    "mean": ("avg value",),
    "norm": ("l2norm", "l2norm value"),
    "nan": ("nan count",),
    "md5": ("md5 value",),
}
# columns read as the tensor's description, or written and not compared (the Inf counts: an overflow
# check's, AclDumpDataProcessor.cpp STATS_HEADER_*); any other beside a NaN count alone is named
_FIXED = (
    "input/output", "index", "data size", "data type", "format", "shape", "count",
    "negative inf count", "positive inf count",
)  # fmt: skip
_KNOWN = frozenset(_FIXED).union(*_FIELDS.values())  # every column a statistics file is read by
_ROLES = {"input": "input", "output": "output"}
_PADDED_NOTE = (
    "GE statistics of tensors in a padded device format count the padding: only their NaN counts are compared"
)


def is_stats_file(name: str) -> bool:
    """Whether a GE dump file's name is a statistics file's."""
    return name.endswith(SUFFIX)


def read_stats(path: str, policy: LoadPolicy, problems: list[Problem], notes: list[str]) -> list[TensorRef]:
    """The inputs and outputs of the op whose statistics file is ``path``; each problem named in
    ``problems`` (a file that cannot be read, a row that is not one), never raised; ``notes`` says
    once that tensors in a padded format are compared by their NaN counts alone."""
    try:
        with policy.open(Path(path), "r", encoding="utf-8") as handle:
            text = handle.read(_LIMIT + 1)
    except (OSError, ValueError) as exc:  # ValueError: bytes that are not UTF-8
        problems.append(Problem(path, f"cannot read this statistics file ({exc})"))
        return []
    if len(text) > _LIMIT:
        problems.append(Problem(path, f"a statistics file over {_LIMIT} characters is not one; skipped"))
        return []
    try:  # strict: a quote left open is an error, not a row that swallows the rest of the file
        rows = list(csv.reader(text.splitlines(), strict=True))
    except csv.Error as exc:  # a field over the csv module's limit too
        problems.append(Problem(path, f"not a CSV file ({exc}); skipped"))
        return []
    header = [cell.strip().lower() for cell in rows[0]] if rows else []
    why = _header_problem(header)
    if why:
        problems.append(Problem(path, f"{why}; skipped"))
        return []
    unknown = _unknown_columns(header)
    if unknown:
        problems.append(Problem(path, unknown))
    column = {name: at for at, name in enumerate(header)}
    refs: list[TensorRef] = []
    bad: list[str] = []
    padded: set[str] = set()
    for row in rows[1:]:
        if not any(cell.strip() for cell in row):
            continue
        cells = {name: row[at].strip() for name, at in column.items() if at < len(row)}
        role = _ROLES.get(cells.get("input/output", "").lower())
        index = cells.get("index", "")
        # the length first: int() of thousands of digits raises ValueError (Python's digit limit)
        if (
            role is None
            or not (index.isascii() and index.isdigit() and len(index) <= 9)
            or int(index) > _MAX_INDEX
        ):
            bad.append(f"a row naming no Input or Output and index up to {_MAX_INDEX}")
            continue
        slot = f"{role}.{int(index)}"
        nan_count = cells.get("nan count", "")
        if nan_count and _count(nan_count) is None:
            bad.append(f"{slot}'s NaN count {nan_count[:20]!r}, not a count")
            continue
        stats = _stats(cells)
        fmt = cells.get("format", "ND")
        if fmt.upper().removeprefix("FORMAT_") not in _UNPADDED:
            padded.add(fmt)
            counted = _count(nan_count)
            is_nan = None if counted is None else counted > 0
            stats = Stats(None, None, None, None, stats.dtype, stats.shape, is_nan=is_nan)
        refs.append(TensorRef(slot, role, path, stats=stats))  # type: ignore[arg-type]
    twice = sorted(slot for slot, rows_of in Counter(r.slot for r in refs).items() if rows_of > 1)
    if twice:  # which of two rows is the op's cannot be told: neither is
        said = f"{', '.join(twice[:3])} given in more than one row; the op is not compared"
        problems.append(Problem(path, said))
        return []
    if bad:
        more = " ..." if len(bad) > 1 else ""
        problems.append(Problem(path, f"{len(bad)} rows not read: {bad[0]}{more}"))
    if padded and not any(note.startswith(_PADDED_NOTE) for note in notes):  # once per dump
        notes.append(f"{_PADDED_NOTE} ({', '.join(sorted(padded))}, first in {path})")
    return refs


def _header_problem(header: list[str]) -> str | None:
    """Why a header row is not a statistics file's: its two fixed columns or every statistic missing,
    or a column named twice (which of the two holds the value cannot be told)."""
    if "input/output" not in header or "index" not in header:
        return "not a GE statistics file (no Input/Output,Index header)"
    twice = sorted(name for name, times in Counter(header).items() if name and times > 1)
    if twice:
        return f"column {twice[0]!r} named twice"
    if not any(name in header for names in _FIELDS.values() for name in names):
        known = ", ".join(names[0] for names in _FIELDS.values())
        return f"no statistic column tui-acc knows ({known}; any case)"
    return None


def _unknown_columns(header: list[str]) -> str | None:
    """Columns that are neither the fixed ones nor a statistic tui-acc knows, said where they leave
    the NaN count as the only statistic read: another spelling of Max/Min/Avg/L2 would else be
    compared by its NaN count alone, and a wrong value pass without a word."""
    unknown = [name for name in header if name and name not in _KNOWN]
    values = [name for field, names in _FIELDS.items() if field != "nan" for name in names if name in header]
    if not unknown or values:
        return None
    shown = ", ".join(repr(name) for name in unknown[:4]) + (" ..." if len(unknown) > 4 else "")
    return f"statistic columns tui-acc does not know ({shown}): only the NaN count is compared"


def _count(text: str) -> int | None:
    """A NaN count: a whole number, not negative; None for anything else."""
    value = _number(text)
    return int(value) if value is not None and value >= 0 and value.is_integer() else None


def _stats(cells: dict[str, str]) -> Stats:
    found: dict[str, str] = {}
    for field, names in _FIELDS.items():
        found[field] = next((cells[n] for n in names if cells.get(n)), "")
    nan = _count(found["nan"])
    high, low, mean, norm = numbers = [_number(found[field]) for field in ("max", "min", "mean", "norm")]
    # a NaN count decides alone where it is all there is, or where it is not 0 (a NaN only the test
    # produced fails); else the statistics do (metrics/stats.py: a NaN flag overrides them)
    is_nan = None if nan is None or (nan == 0 and any(v is not None for v in numbers)) else nan > 0
    return Stats(
        max=high,
        min=low,
        mean=mean,
        norm=norm,
        dtype=dtype_of(cells.get("data type", "")),
        shape=_shape(cells.get("shape", "")),
        checksum=found["md5"] or None,
        is_nan=is_nan,
    )


def dtype_of(text: str) -> str | None:
    """Torch's name for a data type as a statistics file may write it; None where it is none known."""
    word = text.strip()
    if word.isascii() and word.isdigit() and len(word) < 4:
        return _CODES.get(int(word))
    upper = word.upper().removeprefix("DT_")
    if upper in _GE_NAMES:
        return _GE_NAMES[upper]
    lower = word.lower().removeprefix("torch.")
    return lower if lower in _TORCH_NAMES else None


def _shape(text: str) -> tuple[int, ...] | None:
    """A shape's dims, whatever separates them (``[2, 3]``, ``2x3``, ``2;3``); None for text holding
    anything but dims and separators."""
    if re.fullmatch(r"[\s\[\]()x,;:0-9]*", text) is None:
        return None
    dims = re.findall(r"[0-9]{1,18}", text)
    return tuple(int(d) for d in dims)


def _number(text: str) -> float | None:
    """A statistic's value; None where it is blank or not a number (``N/A``)."""
    if not text or len(text) > 64:
        return None
    try:
        return float(text)
    except ValueError:
        return None
