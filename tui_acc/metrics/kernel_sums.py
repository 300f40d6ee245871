"""One pair's running sums (``Sums``), and the row of metrics made from them (``finish``)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Sums:
    """What a sweep over a pair adds up: sums, extremes, counts and the worst element."""

    dot: float = 0.0
    gg: float = 0.0
    tt: float = 0.0
    dd: float = 0.0
    abs_sum: float = 0.0
    abs_max: float = 0.0
    rel_sum: float = 0.0
    rel_max: float = 0.0
    rel_count: int = 0
    finite: int = 0
    g_sum: float = 0.0
    t_sum: float = 0.0
    g_max: float = -math.inf
    g_min: float = math.inf
    t_max: float = -math.inf
    t_min: float = math.inf
    kl_sum: float = 0.0
    kl_rows: int = 0
    within_1e3: int = 0
    within_5e3: int = 0
    worst_index: int | None = None
    worst_golden: float | None = None
    worst_test: float | None = None


def cosine_from_sums(gt: float, gg: float, tt: float) -> float:
    """gt / sqrt(gg * tt): exactly 1 for identical tensors (sqrt(x*x) == |x| in IEEE arithmetic)."""
    product = gg * tt
    denominator = math.sqrt(product) if math.isfinite(product) else math.sqrt(gg) * math.sqrt(tt)
    return max(-1.0, min(1.0, gt / denominator))


def finish(s: Sums, is_float: bool) -> dict[str, object]:
    """The pair's metrics (docs/metrics.md) and sufficient statistics from its sums."""
    norm_g, norm_t = math.sqrt(s.gg), math.sqrt(s.tt)
    n = s.finite
    cosine: float | None
    rel_euclid: float | None
    if n == 0:
        # No element finite on both sides (all NaN or Inf, or none at all): nothing was compared,
        # and the empty sums' "both all zero" would read as a perfect match.
        cosine = rel_euclid = None
    elif norm_g == 0.0 and norm_t == 0.0:
        cosine = 1.0
    elif norm_g == 0.0 or norm_t == 0.0:
        cosine = 0.0
    else:
        cosine = cosine_from_sums(s.dot, s.gg, s.tt)
    if n:
        # With no golden scale to be relative to, equal is 0 and anything else infinitely far.
        rel_euclid = math.sqrt(s.dd) / norm_g if norm_g > 0.0 else (0.0 if s.dd == 0.0 else math.inf)
    return {
        "golden_norm": norm_g,
        "test_norm": norm_t,
        "cosine": cosine,
        "abs_euclidean": math.sqrt(s.dd) if n else None,
        "rmse": math.sqrt(s.dd / n) if n else None,
        "thousandth_ratio": s.within_1e3 / n if n else None,
        "five_thousandths_ratio": s.within_5e3 / n if n else None,
        "worst_index": s.worst_index,
        "worst_golden": s.worst_golden,
        "worst_test": s.worst_test,
        # sufficient statistics: aggregates over many tensors are exact from these alone
        "n": n,
        "sum_gg": s.gg,
        "sum_tt": s.tt,
        "sum_gt": s.dot,
        "sum_dd": s.dd,
        "max_abs_err": s.abs_max if n else None,
        "mean_abs_err": s.abs_sum / n if n else None,
        "max_rel_err": s.rel_max if s.rel_count else None,
        "mean_rel_err": s.rel_sum / s.rel_count if s.rel_count else None,
        "rel_euclidean": rel_euclid,
        "kl": s.kl_sum / s.kl_rows if is_float and s.kl_rows else None,
        "golden_max": s.g_max if n else None,
        "golden_min": s.g_min if n else None,
        "golden_mean": s.g_sum / n if n else None,
        "test_max": s.t_max if n else None,
        "test_min": s.t_min if n else None,
        "test_mean": s.t_sum / n if n else None,
    }
