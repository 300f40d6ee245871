"""Verdicts in words, with their numbers: why a token fails, and what to say when no operator is to
blame."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tui_acc.numbers import cosine, number
from tui_acc.tolerances.thresholds import (
    AT_LEAST,
    Thresholds,
    effective_bounds,
    gains_non_finite,
    logits_floor,
    precision_class,
)

_NAMES = {"kl": "KL", "rel_euclidean": "rel eucl", "topk_overlap": "top-k overlap"}


def broken_bounds(row: Mapping[str, Any], bounds: Mapping[str, float]) -> list[str]:
    """Each bound ``row`` breaks, as ``"KL 2.611e-02 > 5.000e-03"``."""
    broken = []
    for metric, bound in effective_bounds(row, bounds).items():
        value = row.get(metric)
        if value is None:
            continue
        shown = cosine if metric == "cosine" else number
        if not isinstance(value, (int, float)) or math.isnan(value):
            broken.append(f"{_NAMES.get(metric, metric)} is {value} (not a number)")
        elif metric in AT_LEAST and value < bound:
            broken.append(f"{_NAMES.get(metric, metric)} {shown(value)} < {shown(bound)}")
        elif metric not in AT_LEAST and value > bound:
            broken.append(f"{_NAMES.get(metric, metric)} {shown(value)} > {shown(bound)}")
    return broken


def token_failure(
    row: Mapping[str, Any], thresholds: Thresholds, floor: str | None = None, computed_in: str = ""
) -> str | None:
    """Why a token's logits fail, in words with the numbers; None where they pass. ``computed_in``:
    the dtype the test computed them in where a Cast followed (``PassFail.computed_in``)."""
    if row.get("passed") is not False:
        return None
    if row.get("error"):
        return str(row["error"])
    if gains_non_finite(row):
        return "the test's logits hold NaN or Inf the golden's do not"
    golden, test = row.get("golden_dtype"), row.get("test_dtype")
    if row.get("stats_only"):
        tolerance = thresholds.for_stats(golden, test, logits_floor(floor, computed_in))
        return f"statistics: norm rel diff {number(row.get('norm_rel_diff'))} (tolerance {number(tolerance)})"
    if row.get("noise_ratio") is not None:
        return f"its error is {number(row['noise_ratio'])}x the baseline's"
    broken = broken_bounds(row, thresholds.for_logits(golden, test, computed_in))
    return "; ".join(broken) if broken else None


def no_culprit(dtype: object = None) -> str:
    """What a token with no local operator shows: every error is what the dtype explains."""
    name = precision_class(dtype) if dtype else "its dtype"
    return f"no operator adds more error than {name} explains"


def accumulated(dtype: object) -> str:
    """What a failing token with no local operator means."""
    return f"accumulated rounding: {no_culprit(dtype)}"
