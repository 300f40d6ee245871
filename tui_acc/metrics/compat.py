"""Columns named and computed exactly as msit's and msprobe's compare tools do (formats.md §4.3-4.5).

For users who diff our output against those tools' spreadsheets. Our own metrics (float64,
per-row KL, ...) are better defined; these reproduce the tools' arithmetic, quirks included:

* msit: both sides flattened to fp32; absolute errors ignore elements where |golden| <= fp32 eps;
  mean relative error divides by all N; KL over one softmax of the whole tensor, in fp32;
  cosine in float64 rounded to 10 decimals; rows with NaN/Inf keep no metrics.
* msprobe: bf16 widened to fp32, size-1 dimensions squeezed; cosine, euclidean distance and max
  absolute error in float64; relative error in fp32 with eps standing in for a zero bench value.
"""

from __future__ import annotations

import math
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


def msit_metrics(golden: np.ndarray, test: np.ndarray) -> dict[str, Any]:
    """One msit CSV row's metric columns (and the golden/my statistics), msit's way: in torch, as
    msit computes them (its fp32 reductions and softmax decide the digits)."""
    from tui_acc.dumps.torch_arrays import require_torch, to_torch

    torch = require_torch("report --compat msit")  # deferred: only this export reproduces torch's arithmetic

    g = to_torch(golden).reshape(-1).float()
    m = to_torch(test).reshape(-1).float()
    row: dict[str, Any] = {
        "golden_max_value": float(g.max()) if g.numel() else "",
        "golden_min_value": float(g.min()) if g.numel() else "",
        "golden_mean_value": float(g.mean()) if g.numel() else "",
        "my_max_value": float(m.max()) if m.numel() else "",
        "my_min_value": float(m.min()) if m.numel() else "",
        "my_mean_value": float(m.mean()) if m.numel() else "",
    }
    reasons = []
    if not bool(torch.isfinite(g).all()):
        reasons.append("golden_data includes NAN or inf.")
    if not bool(torch.isfinite(m).all()):
        reasons.append("my_data includes NAN or inf.")
    if reasons:
        return {**row, **dict.fromkeys(MSIT_COLUMNS[16:23], ""), "cmp_fail_reason": " ".join(reasons)}
    n = g.numel()
    mask = g.abs() > _EPS32
    rel = torch.where(mask, (m / g - 1).abs(), torch.zeros_like(g))
    abs_err = torch.where(mask, (m - g).abs(), torch.zeros_like(g))
    g64, m64 = g.double(), m.double()
    if not bool(g.any()) and not bool(m.any()):
        cosine = 1.0
    else:
        cosine = float(torch.cosine_similarity(g64, m64, dim=0, eps=1e-8))
    kl = torch.nn.functional.kl_div(torch.log_softmax(m, dim=0), torch.softmax(g, dim=0), reduction="sum")
    norm_g = float(g64.norm())
    row.update(
        cosine_similarity=round(cosine, 10),
        max_relative_error=float(rel.max()),
        mean_relative_error=float(rel.sum()) / n,
        max_absolute_error=float(abs_err.max()),
        mean_absolute_error=float(abs_err.sum()) / n,
        kl_divergence=max(0.0, float(kl)),
        relative_euclidean_distance=0.0
        if norm_g <= _EPS32
        else math.sqrt(float(((m64 - g64) ** 2).sum()) / norm_g**2),
        cmp_fail_reason="",
    )
    return row


def msprobe_metrics(bench: np.ndarray, npu: np.ndarray) -> dict[str, Any]:
    """One msprobe compare row's metric columns, msprobe's way (npu is the tensor under test)."""

    def prepared(t: np.ndarray) -> np.ndarray:
        # msprobe hands numpy bf16 and the 8-bit floats as fp32 (numpy has no such types)
        if dtype_name(t) == "bfloat16" or dtype_name(t).startswith("float8"):
            t = t.astype(np.float32)
        return np.squeeze(t)

    b, n = prepared(bench), prepared(npu)
    row: dict[str, Any] = {}
    single = b.ndim == 0 or b.size <= 1  # msprobe keeps only the max errors of a single element
    if single:
        row["Cosine"] = "unsupported"
    else:
        b64, n64 = b.reshape(-1).astype(np.float64), n.reshape(-1).astype(np.float64)
        nb, nn = float(np.linalg.norm(b64)), float(np.linalg.norm(n64))
        if nb <= np.finfo(float).eps and nn <= np.finfo(float).eps:
            row["Cosine"] = 1.0
        elif nb <= np.finfo(float).eps or nn <= np.finfo(float).eps:
            row["Cosine"] = "Nan"
        else:
            value = float(f"{float(b64 @ n64) / (nb * nn):.12f}")
            row["Cosine"] = round(value, 6) if value > 0.9999 else value
    diff64 = n.reshape(-1).astype(np.float64) - b.reshape(-1).astype(np.float64)
    row["EucDist"] = float(f"{float(np.linalg.norm(diff64)):.12f}")
    row["MaxAbsErr"] = float(f"{float(np.max(np.abs(diff64))) if diff64.size else 0.0:.12f}")
    dtype = np.result_type(n, b, np.float32)
    n32, b32 = n.astype(dtype).reshape(-1), b.astype(dtype).reshape(-1)
    zero = b32 == 0
    rel = np.abs(
        (np.where(zero, n32 + _EPS32, n32) - np.where(zero, b32 + _EPS32, b32))
        / np.where(zero, b32 + _EPS32, b32)
    )
    row["MaxRelativeErr"] = float(f"{float(np.max(rel)) if rel.size else 0.0:.12f}")
    row["One Thousandth Err Ratio"] = float(f"{float(np.sum(rel < 0.001)) / max(rel.size, 1):.12f}")
    row["Five Thousandths Err Ratio"] = float(f"{float(np.sum(rel < 0.005)) / max(rel.size, 1):.12f}")
    if single:
        row.update(
            dict.fromkeys(
                ("EucDist", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"), "unsupported"
            )
        )
    return row
