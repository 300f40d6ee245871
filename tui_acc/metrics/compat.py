"""Columns named and computed exactly as msit's and msprobe's compare tools do (docs/formats.md §4.3-§4.5).

For users who diff our output against those tools' spreadsheets. Our own metrics (float64,
per-row KL, ...) are better defined; these reproduce the tools' arithmetic, quirks included:

Both are computed chunk by chunk (``CHUNK``), never on a whole tensor's float64 copy.

* msit: both sides flattened to fp32; absolute errors ignore elements where |golden| <= fp32 eps;
  mean relative error divides by all N; KL over one softmax of the whole tensor, in fp32;
  cosine in float64 rounded to 10 decimals; rows with NaN/Inf keep no metrics.
* msprobe: bf16 widened to fp32, size-1 dimensions squeezed; cosine, euclidean distance and max
  absolute error in float64; relative error in fp32 with eps standing in for a zero bench value.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import dtype_name

MSIT_COLUMNS = [
    "token_id",
    "data_id",
    "golden_data_path",
    "golden_op_type",
    "golden_dtype",
    "golden_shape",
    "golden_max_value",
    "golden_min_value",
    "golden_mean_value",
    "my_data_path",
    "my_op_type",
    "my_dtype",
    "my_shape",
    "my_max_value",
    "my_min_value",
    "my_mean_value",
    "cosine_similarity",
    "max_relative_error",
    "mean_relative_error",
    "max_absolute_error",
    "mean_absolute_error",
    "kl_divergence",
    "relative_euclidean_distance",
    "cmp_fail_reason",
]

MSPROBE_COLUMNS = [
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
    "Result",
    "Err_message",
]

_EPS32 = 1.1920928955078125e-07
# Elements per chunk: the views are computed chunk by chunk, so a pair of 1 GiB tensors costs the
# chunks' temporaries (some 60 bytes an element: float64 copies, masks), not 12 GB at once. Each
# chunk's reductions are the tools' own (fp32 sums in torch for msit, float64 in numpy for msprobe);
# the chunks' results are added in float64. A tensor of one chunk is computed exactly as before.
CHUNK = 1 << 22


def _chunks(*flat: np.ndarray, size: int) -> Iterator[tuple[np.ndarray, ...]]:
    """The same ``size``-element slices of each flat array (views: nothing is copied here)."""
    for start in range(0, flat[0].size, size):
        yield tuple(array[start : start + size] for array in flat)


def msit_metrics(golden: np.ndarray, test: np.ndarray, chunk: int = CHUNK) -> dict[str, Any]:
    """One msit CSV row's metric columns (and the golden/my statistics), msit's way: in torch, as
    msit computes them (its fp32 reductions and softmax decide the digits), chunk by chunk."""
    from tui_acc.dumps.torchfile.arrays import require_torch, to_torch

    torch = require_torch("report --compat msit")  # deferred: only this export reproduces torch's arithmetic

    g_flat, m_flat = golden.reshape(-1), test.reshape(-1)
    n = int(g_flat.size)
    stats = ("golden_max_value", "golden_min_value", "golden_mean_value")
    mine = ("my_max_value", "my_min_value", "my_mean_value")
    if n == 0:
        return {**dict.fromkeys((*stats, *mine, *MSIT_COLUMNS[16:23]), ""), "cmp_fail_reason": ""}
    g_side, m_side = _Fp32Side(), _Fp32Side()
    errors = dict.fromkeys(("rel_max", "rel_sum", "abs_max", "abs_sum", "dot", "gg", "mm", "dd"), 0.0)
    nonzero = False
    for g_part, m_part in _chunks(g_flat, m_flat, size=chunk):
        g, m = to_torch(g_part).float(), to_torch(m_part).float()
        g_side.add(g)
        m_side.add(m)
        if not (g_side.finite and m_side.finite):
            continue  # no metric is kept; the statistics still cover every element
        nonzero = nonzero or bool(g.any()) or bool(m.any())
        mask = g.abs() > _EPS32
        rel = torch.where(mask, (m / g - 1).abs(), torch.zeros_like(g))
        abs_err = torch.where(mask, (m - g).abs(), torch.zeros_like(g))
        errors["rel_max"] = max(errors["rel_max"], float(rel.max()))
        errors["abs_max"] = max(errors["abs_max"], float(abs_err.max()))
        errors["rel_sum"] += float(rel.sum())
        errors["abs_sum"] += float(abs_err.sum())
        g64, m64 = g.double(), m.double()
        errors["dot"] += float(g64 @ m64)
        errors["gg"] += float(g64 @ g64)
        errors["mm"] += float(m64 @ m64)
        errors["dd"] += float(((m64 - g64) ** 2).sum())
    row: dict[str, Any] = {
        **dict(zip(stats, g_side.stats(n), strict=True)),
        **dict(zip(mine, m_side.stats(n), strict=True)),
    }
    reasons = []
    if not g_side.finite:
        reasons.append("golden_data includes NAN or inf.")
    if not m_side.finite:
        reasons.append("my_data includes NAN or inf.")
    if reasons:
        return {**row, **dict.fromkeys(MSIT_COLUMNS[16:23], ""), "cmp_fail_reason": " ".join(reasons)}
    norm_g, norm_m = math.sqrt(errors["gg"]), math.sqrt(errors["mm"])
    # torch.cosine_similarity: each norm clamped to eps=1e-8
    cosine = errors["dot"] / (max(norm_g, 1e-8) * max(norm_m, 1e-8)) if nonzero else 1.0
    row.update(
        cosine_similarity=round(cosine, 10),
        max_relative_error=errors["rel_max"],
        mean_relative_error=errors["rel_sum"] / n,
        max_absolute_error=errors["abs_max"],
        mean_absolute_error=errors["abs_sum"] / n,
        kl_divergence=max(0.0, _whole_tensor_kl(g_flat, m_flat, g_side, m_side, chunk)),
        relative_euclidean_distance=0.0 if norm_g <= _EPS32 else math.sqrt(errors["dd"] / norm_g**2),
        cmp_fail_reason="",
    )
    return row


class _Fp32Side:
    """One side's running statistics in torch fp32: extremes (NaN kept, as torch's max keeps it),
    the sum for the mean, whether all is finite, and the log of the sum of exp for one softmax over
    the whole tensor (rescaled as the running maximum grows)."""

    def __init__(self) -> None:
        self.max: Any = None
        self.min: Any = None
        self.sum = 0.0
        self.finite = True
        self.peak = -math.inf
        self.exp_sum = 0.0

    def add(self, part: Any) -> None:
        from tui_acc.dumps.torchfile.arrays import require_torch

        torch = require_torch("report --compat msit")
        high, low = part.max(), part.min()
        self.max = high if self.max is None else torch.maximum(self.max, high)
        self.min = low if self.min is None else torch.minimum(self.min, low)
        self.sum += float(part.sum())
        self.finite = self.finite and bool(torch.isfinite(part).all())
        if self.finite:
            peak = max(self.peak, float(high))
            self.exp_sum = self.exp_sum * math.exp(self.peak - peak) + float(torch.exp(part - peak).sum())
            self.peak = peak

    def stats(self, n: int) -> tuple[float, float, float]:
        """max, min, mean as torch's fp32 reductions give them (the mean rounded to fp32)."""
        return float(self.max), float(self.min), float(np.float32(self.sum / n))

    def log_sum_exp(self) -> float:
        return self.peak + math.log(self.exp_sum)


def _whole_tensor_kl(
    g_flat: np.ndarray, m_flat: np.ndarray, g_side: _Fp32Side, m_side: _Fp32Side, chunk: int
) -> float:
    """msit's KL: ``kl_div(log_softmax(m), softmax(g), reduction="sum")`` over the whole flattened
    tensor in fp32, each softmax's normaliser from the first pass; a second pass sums the terms."""
    from tui_acc.dumps.torchfile.arrays import require_torch, to_torch

    torch = require_torch("report --compat msit")

    if len(g_flat) <= chunk:  # one chunk: torch's own softmax and log_softmax, exactly
        g, m = to_torch(g_flat).float(), to_torch(m_flat).float()
        return float(
            torch.nn.functional.kl_div(torch.log_softmax(m, dim=0), torch.softmax(g, dim=0), reduction="sum")
        )
    g_norm = torch.tensor(g_side.log_sum_exp(), dtype=torch.float32)
    m_norm = torch.tensor(m_side.log_sum_exp(), dtype=torch.float32)
    total = 0.0
    for g_part, m_part in _chunks(g_flat, m_flat, size=chunk):
        g, m = to_torch(g_part).float(), to_torch(m_part).float()
        total += float(torch.nn.functional.kl_div(m - m_norm, torch.exp(g - g_norm), reduction="sum"))
    return total


def msprobe_metrics(bench: np.ndarray, npu: np.ndarray, chunk: int = CHUNK) -> dict[str, Any]:
    """One msprobe compare row's metric columns, msprobe's way (npu is the tensor under test),
    chunk by chunk."""

    def prepared(t: np.ndarray) -> np.ndarray:
        # msprobe hands numpy bf16 and the 8-bit floats as fp32 (numpy has no such types)
        if dtype_name(t) == "bfloat16" or dtype_name(t).startswith("float8"):
            t = t.astype(np.float32)
        return t

    b, n = np.squeeze(bench), np.squeeze(npu)
    single = b.ndim == 0 or b.size <= 1  # msprobe keeps only the max errors of a single element
    dtype = np.result_type(prepared(n.reshape(-1)[:0]), prepared(b.reshape(-1)[:0]), np.float32)
    sums = dict.fromkeys(("bb", "nn", "bn", "dd"), 0.0)
    max_abs: Any = 0.0 if b.size == 0 else None
    max_rel: Any = 0.0 if b.size == 0 else None
    within_1e3 = within_5e3 = 0
    for b_part, n_part in _chunks(b.reshape(-1), n.reshape(-1), size=chunk):
        b_part, n_part = prepared(b_part), prepared(n_part)
        b64, n64 = b_part.astype(np.float64), n_part.astype(np.float64)
        diff64 = n64 - b64
        sums["bb"] += float(b64.dot(b64))
        sums["nn"] += float(n64.dot(n64))
        sums["bn"] += float(b64 @ n64)
        sums["dd"] += float(diff64.dot(diff64))
        part_max = np.max(np.abs(diff64))
        max_abs = part_max if max_abs is None else np.maximum(max_abs, part_max)  # NaN kept, as np.max
        n32, b32 = n_part.astype(dtype), b_part.astype(dtype)
        zero = b32 == 0
        rel = np.abs(
            (np.where(zero, n32 + _EPS32, n32) - np.where(zero, b32 + _EPS32, b32))
            / np.where(zero, b32 + _EPS32, b32)
        )
        max_rel = np.max(rel) if max_rel is None else np.maximum(max_rel, np.max(rel))
        within_1e3 += int(np.sum(rel < 0.001))
        within_5e3 += int(np.sum(rel < 0.005))
    row: dict[str, Any] = {}
    if single:
        row["Cosine"] = "unsupported"
    else:
        nb, nn = math.sqrt(sums["bb"]), math.sqrt(sums["nn"])
        if nb <= np.finfo(float).eps and nn <= np.finfo(float).eps:
            row["Cosine"] = 1.0
        elif nb <= np.finfo(float).eps or nn <= np.finfo(float).eps:
            row["Cosine"] = "Nan"
        else:
            value = float(f"{sums['bn'] / (nb * nn):.12f}")
            row["Cosine"] = round(value, 6) if value > 0.9999 else value
    row["EucDist"] = float(f"{math.sqrt(sums['dd']):.12f}")
    row["MaxAbsErr"] = float(f"{float(max_abs):.12f}")
    row["MaxRelativeErr"] = float(f"{float(max_rel):.12f}")
    row["One Thousandth Err Ratio"] = float(f"{within_1e3 / max(b.size, 1):.12f}")
    row["Five Thousandths Err Ratio"] = float(f"{within_5e3 / max(b.size, 1):.12f}")
    if single:
        row.update(
            dict.fromkeys(
                ("EucDist", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"), "unsupported"
            )
        )
    return row
