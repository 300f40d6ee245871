"""A concatenated tensor's row from its parts' sums: each part compared, where it is, with its region of
the golden (``part_sums``), the row made from the parts' sums combined (``combined_row``), with no part
moved. The row is ``compare_tensors``' on the merged tensor but for the order of each float64 sum
(the parts' sums added part by part, not chunk by chunk over the whole): counts, extremes, the worst
element and the top-1 are exact; sums, and the metrics made of them, within a few float64 roundings.

What splits this way (``split_plan``): real floats, concatenated along a dimension (``gather.py``'s
``cat:D``, or ``auto`` where the parts' shapes make the golden's), of one dtype; with KL only where the
softmax rows are whole within a part (the concatenation is not along the last dimension).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tui_acc.dumps.dtypes import dtype_name, is_complex, is_float
from tui_acc.dumps.gather import part_regions
from tui_acc.metrics.kernel_sums import Sums, finish
from tui_acc.metrics.kernels import CHUNK_ELEMENTS, sweep
from tui_acc.metrics.top_k import top1

# sums of the parts added; the rest taken as the largest, the smallest or the first worst
_ADDED = (
    *("dot", "gg", "tt", "dd", "abs_sum", "rel_sum", "rel_count", "finite", "g_sum", "t_sum"),
    *("kl_sum", "kl_rows", "within_1e3", "within_5e3"),
)
_LARGEST = ("abs_max", "rel_max", "g_max", "t_max")
_SMALLEST = ("g_min", "t_min")


@dataclass(frozen=True)
class Split:
    """How a tensor's parts lie in the merged tensor: its shape, the concatenated dimension, and each
    part's region."""

    shape: list[int]
    dim: int
    regions: list[tuple[slice, ...]]


@dataclass
class PartSums:
    """One part's sums against its region of the golden, and what the row needs besides."""

    sums: Sums
    nan: dict[str, int]
    dtype: str
    last_row: np.ndarray  # the part's last row (its last dimension): the merged tensor's top-1
    said: dict[str, object] = field(default_factory=dict)  # the part's own row (cosine, max abs)


def split_plan(
    shapes: Sequence[Sequence[int]], dtypes: Sequence[str], how: str, golden: np.ndarray, kl: bool
) -> Split | None:
    """Where each part lies, where the row can be made from the parts' sums; else None (the parts are
    partial sums or copies of one tensor, of several dtypes, complex, or rows KL needs whole)."""
    if len(set(dtypes)) != 1 or not is_float(golden) or is_complex(golden):
        return None
    layout = part_regions(shapes, how, golden.shape)
    if layout is None or not all(layout[1]) or math.prod(layout[0]) != golden.size:
        return None
    merged, regions = layout
    dim = len(regions[0]) - 1
    same_rows = golden.ndim and len(merged) and golden.shape[-1] == merged[-1] and merged[-1] > 0
    if not same_rows or (kl and dim == len(merged) - 1):
        return None  # the softmax rows (and the top-1's last row) cross the parts
    return Split(list(merged), dim, list(regions))


def golden_regions(golden: np.ndarray, split: Split) -> list[np.ndarray]:
    """The golden's region of each part, each a contiguous copy (what is sent to the part's node)."""
    shaped = golden.reshape(split.shape)
    return [np.ascontiguousarray(shaped[region]) for region in split.regions]


def part_sums(golden_region: np.ndarray, part: np.ndarray, kl: bool) -> PartSums:
    """One part's sums against its region of the golden (``kernels.sweep``), on the node holding it."""
    if not (is_float(part) and not is_complex(part)):
        raise ValueError(f"a part of dtype {dtype_name(part)} does not split")
    sums, nan = sweep(golden_region, part, kl)
    own = finish(sums, kl)
    last = np.ascontiguousarray(part.reshape(-1, part.shape[-1])[-1]) if part.size else part.reshape(-1)
    return PartSums(sums, nan, dtype_name(part), last, {k: own[k] for k in ("cosine", "max_abs_err")})


def combined_row(golden: np.ndarray, split: Split, parts: Sequence[PartSums], kl: bool) -> dict[str, object]:
    """``compare_tensors(golden, merged, kl)``'s row from the parts' sums (``kl``: asked, and the pair
    is real floats: ``split_plan`` said it splits)."""
    total = Sums()
    for name in _ADDED:
        setattr(total, name, sum((getattr(p.sums, name) for p in parts), start=getattr(total, name)))
    for name in _LARGEST:
        setattr(total, name, max([getattr(total, name)] + [getattr(p.sums, name) for p in parts]))
    for name in _SMALLEST:
        setattr(total, name, min([getattr(total, name)] + [getattr(p.sums, name) for p in parts]))
    worst = [
        (p.sums.abs_max, -_merged_index(p.sums.worst_index, split, i), i)
        for i, p in enumerate(parts)
        if p.sums.worst_index is not None
    ]
    if worst:  # the largest error; of equal ones, the first in the merged tensor's order
        _, negative_index, i = max(worst)
        total.worst_index = -negative_index
        total.worst_golden, total.worst_test = parts[i].sums.worst_golden, parts[i].sums.worst_test
    row: dict[str, object] = {
        "numel": golden.size,
        "golden_dtype": dtype_name(golden),
        "test_dtype": parts[0].dtype,
        "golden_shape": list(golden.shape),
        "test_shape": list(split.shape),
    }
    for key in ("golden_nan", "golden_inf", "test_nan", "test_inf"):
        row[key] = sum(p.nan[key] for p in parts)
    row.update(finish(total, kl))
    along_rows = split.dim == len(split.shape) - 1
    # the merged tensor's last row: across the parts where they split it, else the last part's that
    # holds any (a rank with no rows, an expert given no token, holds none)
    held = [p.last_row for p in parts if p.last_row.size]
    last_row = (
        np.concatenate([p.last_row for p in parts]) if along_rows else (held or [parts[-1].last_row])[-1]
    )
    width = split.shape[-1]
    row.update(top1(golden.reshape(-1, width)[-1:], last_row, width, CHUNK_ELEMENTS))
    return row


def _merged_index(index: int | None, split: Split, part: int) -> int:
    """A part's flat index as the merged tensor's."""
    region = split.regions[part]
    shape = list(split.shape)
    shape[split.dim] = region[split.dim].stop - region[split.dim].start
    at = list(np.unravel_index(index or 0, shape))
    at[split.dim] += region[split.dim].start
    return int(np.ravel_multi_index(tuple(at), split.shape))
