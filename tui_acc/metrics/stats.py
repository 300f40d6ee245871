"""Comparing statistics (max, min, mean, L2 norm) when a dump holds no tensor data.

This is what msprobe's statistics task compares: ``diff = test - golden`` and
``relative error = |diff / golden|`` (0 when equal, inf when the golden is 0). A verdict from
statistics is weaker than one from the tensors; every row made here says ``stats_only``.
"""

from __future__ import annotations

import math

import numpy as np

from tui_acc.dumps.dtypes import dtype_name, is_complex, widened
from tui_acc.dumps.model import Stats

FIELDS = ("max", "min", "mean", "norm")


def stats_of(tensor: np.ndarray) -> Stats:
    """Statistics of a loaded tensor, in float64, for comparing it with a statistics-only side."""
    values = tensor
    if is_complex(values):
        values = np.ascontiguousarray(values, dtype=np.complex128).view(np.float64)
    values = widened(values).astype(np.float64)
    shape = tuple(tensor.shape)
    if values.size == 0:
        return Stats(None, None, None, None, dtype_name(tensor), shape)
    norm = float(np.linalg.norm(values.reshape(-1)))
    return Stats(
        float(values.max()), float(values.min()), float(values.mean()), norm, dtype_name(tensor), shape
    )


def compare_stats(golden: Stats, test: Stats) -> dict[str, object]:
    """The row of a statistics-only pair: each side's max, min, mean and norm, their differences (test -
    golden) and relative differences, checksums and NaN flags where recorded; ``error`` says so when the
    two sides recorded nothing in common."""
    row: dict[str, object] = {
        "stats_only": True,
        "golden_dtype": golden.dtype,
        "test_dtype": test.dtype,
        "golden_shape": _shape(golden.shape),
        "test_shape": _shape(test.shape),
        "numel": math.prod(golden.shape) if golden.shape is not None else None,
    }
    for name in FIELDS:
        g, t = getattr(golden, name), getattr(test, name)
        row[f"golden_{name}"] = g
        row[f"test_{name}"] = t
        # equal values differ by 0, infinities included (-inf - -inf would be NaN)
        row[f"{name}_diff"] = None if g is None or t is None else 0.0 if t == g else t - g
        row[f"{name}_rel_diff"] = relative_error(g, t)
    if golden.checksum is not None or test.checksum is not None:
        row["golden_checksum"], row["test_checksum"] = golden.checksum, test.checksum
    if golden.is_nan is not None or test.is_nan is not None:
        row["golden_is_nan"], row["test_is_nan"] = golden.is_nan, test.is_nan
    shared = [name for name in FIELDS if row[f"{name}_diff"] is not None]
    if not shared and (golden.checksum is None or test.checksum is None) and test.is_nan is None:
        sides = f"golden: {_recorded(golden)}; test: {_recorded(test)}"
        row["error"] = f"nothing recorded on both sides to compare ({sides})"
    return row


def _recorded(stats: Stats) -> str:
    kinds = [name for name in FIELDS if getattr(stats, name) is not None]
    kinds += ["checksum"] if stats.checksum is not None else []
    kinds += ["NaN flag"] if stats.is_nan is not None else []
    return ", ".join(kinds) or "nothing"


def relative_error(golden: float | None, test: float | None) -> float | None:
    """|test - golden| / |golden|; 0 when equal, inf when only the golden is 0 (msprobe's rule)."""
    if golden is None or test is None:
        return None
    if test == golden:
        return 0.0
    if math.isnan(golden) or math.isnan(test):
        return math.nan
    if golden == 0:
        return math.inf
    return abs((test - golden) / golden)


def _shape(shape: tuple[int, ...] | None) -> str | None:
    return None if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"
