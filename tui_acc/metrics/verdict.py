"""Pass/fail thresholds and the verdicts derived from metric rows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

_FLOAT_DTYPES = ("float", "half", "bfloat16", "double")


@dataclass(frozen=True)
class Thresholds:
    """When a tensor counts as matching its golden.

    Logits pass with cosine >= ``logits_cosine`` and KL <= the KL bound for the test precision
    (bf16 carries 8 bits of mantissa, fp16 11, so bf16 gets the looser bound). Every other
    tensor passes with cosine >= ``op_cosine``; integer tensors (token ids) must match exactly.
    """

    logits_cosine: float = 0.999
    logits_kl_fp16: float = 1e-4
    logits_kl_bf16: float = 5e-3
    op_cosine: float = 0.99
    # statistics-only dumps: the L2 norms may differ by this fraction
    stats_norm_rel: float = 0.01

    def logits_kl(self, golden_dtype: str | None, test_dtype: str | None) -> float:
        if "bfloat16" in (golden_dtype, test_dtype):
            return self.logits_kl_bf16
        return self.logits_kl_fp16


def _is_float(dtype: object) -> bool:
    return isinstance(dtype, str) and dtype.startswith(_FLOAT_DTYPES)


def _gains_non_finite(row: Mapping[str, object]) -> bool:
    """The test has NaN/Inf the golden does not: a failure whatever the other metrics say."""

    def count(side: str) -> int:
        return int(row.get(f"{side}_nan") or 0) + int(row.get(f"{side}_inf") or 0)  # type: ignore[call-overload]

    return count("test") > count("golden")


def stats_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict from statistics alone: equal extremes for integers, close L2 norms for floats."""
    if row.get("error"):
        return False
    if _stats_gain_non_finite(row):
        return False
    if not (_is_float(row.get("golden_dtype")) and _is_float(row.get("test_dtype"))):
        return row.get("max_diff") in (0, 0.0, None) and row.get("min_diff") in (0, 0.0, None)
    norm = row.get("norm_rel_diff")
    return norm is None or (isinstance(norm, float) and norm <= thresholds.stats_norm_rel)


def _stats_gain_non_finite(row: Mapping[str, object]) -> bool:
    for name in ("max", "min", "mean", "norm"):
        g, t = row.get(f"golden_{name}"), row.get(f"test_{name}")
        if (
            isinstance(t, float)
            and not math.isfinite(t)
            and not (isinstance(g, float) and not math.isfinite(g))
        ):
            return True
    return False


def tensor_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict for an operator's input or output tensor."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds)
    if row.get("error"):
        return False
    if _gains_non_finite(row):
        return False
    if not (_is_float(row.get("golden_dtype")) and _is_float(row.get("test_dtype"))):
        return row.get("max_abs_err") in (0, 0.0, None)
    cosine = row.get("cosine")
    return isinstance(cosine, float) and cosine >= thresholds.op_cosine


def logits_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict for a token: its logits against the golden logits."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds)
    if row.get("error") or _gains_non_finite(row):
        return False
    cosine, kl = row.get("cosine"), row.get("kl")
    if not isinstance(cosine, float) or cosine < thresholds.logits_cosine:
        return False
    bound = thresholds.logits_kl(_str(row.get("golden_dtype")), _str(row.get("test_dtype")))
    return kl is None or (isinstance(kl, float) and kl <= bound)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None
