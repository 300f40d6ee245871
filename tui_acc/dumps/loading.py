"""A side's tensor as the comparison compares it: one file, or merged from its ranks (a gathered test),
read under the dump's ``LoadPolicy``; and the files' states, to tell a file changed while it was read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import dtype_name, is_float
from tui_acc.dumps.model import TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.numbers import number

FileState = tuple[int, int] | None  # size and modification time; None: not there
# the dtypes a record's declaration is checked for (a name outside them is not second-guessed)
_CHECKED = frozenset(
    {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}
)


def load_side(ref: TensorRef, like: Any, policy: LoadPolicy) -> np.ndarray:
    """A tensor, merged from its ranks when it was gathered, like the golden (``like``: its values,
    or its shape) where that decides (``gather.merge_parts``)."""
    if not ref.parts:
        values = load_tensor(ref.path, policy, ref.member)
        # 50,000 files of our real msprobe dumps: each holds what its record says
        if ref.declared in _CHECKED and (held := dtype_name(values)) != ref.declared:
            said = f"holds {held}, but the dump's own record says {ref.declared}; not compared"
            raise TensorLoadError(ref.path, said)
        return values
    return merged(ref, [load_tensor(p, policy) for p in ref.parts], like)


def merged(ref: TensorRef, parts: list[np.ndarray], like: Any) -> np.ndarray:
    """A gathered ``ref``'s parts, as read (here, or on the Ray nodes that hold them), each checked
    against its rank's record, then merged like the golden (``gather.merge_parts``)."""
    from tui_acc.dumps.gather import merge_parts

    for path, values in zip(ref.parts, parts, strict=False):
        check_part(ref, path, values)
    return merge_parts(parts, ref.merge, like, ref.path)


def check_part(ref: TensorRef, path: Path, values: np.ndarray) -> None:
    """A gathered ``ref``'s part at ``path``, as read, against its own rank's record (``check_recorded``)."""
    record = dict(zip(ref.parts, ref.part_records, strict=False)).get(path)
    if record is not None:
        extremes = _finite_extremes(values)
        part = replace(ref, location=str(path), parts=(), part_records=(), recorded=record)
        check_recorded(part, *(extremes or (None, None)))


def _finite_extremes(values: np.ndarray) -> tuple[float, float] | None:
    """The largest and smallest finite values (as the metrics pass gives a whole tensor's); None for
    a tensor of none, or of no real floats or integers."""
    floats = is_float(values)
    if not floats and values.dtype.kind not in "biu":
        return None
    if floats and not (finite := np.isfinite(values)).all():
        values = values[finite]
    if values.size == 0:
        return None
    return float(values.max()), float(values.min())


def check_recorded(ref: TensorRef, high: float | None, low: float | None) -> None:
    """TensorLoadError where the values read for ``ref`` (``high`` and ``low``: their largest and
    smallest finite values) are not those its record gives: another tensor's file, or bytes of another
    dtype or byte order. Every tensor of our real msprobe dumps (26.2.0; 171,594 files, CPU and GPU
    runs) holds its record's Max and Min exactly: a maximum is the same in any order. Other msprobe
    releases take them after ``.float()`` (an int64 or float64 tensor's extremes rounded to float32):
    equal at float32 is accepted too."""
    if ref.recorded is None or ref.parts or high is None or low is None or "complex" in ref.declared:
        return
    held = (float(high), float(low))
    if held == ref.recorded or _at_float32(held) == _at_float32(ref.recorded):
        return
    shown = [number(v) for v in (held[1], held[0], ref.recorded[1], ref.recorded[0])]
    if shown[:2] == shown[2:]:  # equal to four digits: the digits that differ
        shown = [repr(v) for v in (held[1], held[0], ref.recorded[1], ref.recorded[0])]
    said = (
        f"holds values from {shown[0]} to {shown[1]}, but the dump's own record says {shown[2]} to {shown[3]}"
    )
    raise TensorLoadError(ref.path, f"{said}; not compared")


def _at_float32(pair: tuple[float, float]) -> tuple[float, float]:
    with np.errstate(over="ignore"):
        return float(np.float32(pair[0])), float(np.float32(pair[1]))


def file_state(path: Path) -> FileState:
    """The file's size and modification time (ns), from one ``stat``; None where it cannot be
    stat'ed (gone, or unreadable)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def file_states(*refs: TensorRef) -> dict[Path, FileState]:
    """The state of every file the refs are read from."""
    paths = [p for ref in refs for p in (ref.parts or (ref.path,))]
    return {path: file_state(path) for path in paths}


def changed_since(states: dict[Path, FileState]) -> list[Path]:
    """The files whose state is no longer the one recorded."""
    return [path for path, state in states.items() if file_state(path) != state]
