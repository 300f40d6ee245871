"""Exact aggregates over many tensor pairs, from their sufficient statistics alone.

Each row keeps n, Σg², Σt², Σg·t and Σ(t-g)²; the cosine (or relative distance, or RMSE) of a
whole layer or token, as if all its outputs were one flat tensor, follows without re-reading.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from tui_acc.metrics.kernels import cosine_from_sums


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | int | None]:
    n = gg = tt = gt = dd = 0.0
    count = 0
    for row in rows:
        if row.get("n") is None or row.get("error"):
            continue
        n += row["n"]
        gg += row["sum_gg"]
        tt += row["sum_tt"]
        gt += row["sum_gt"]
        dd += row["sum_dd"]
        count += 1
    if not count:
        return {"tensors": 0, "cosine": None, "rel_euclidean": None, "rmse": None}
    if gg == 0.0 and tt == 0.0:
        cosine = 1.0
    elif gg == 0.0 or tt == 0.0:
        cosine = 0.0
    else:
        cosine = cosine_from_sums(gt, gg, tt)
    return {
        "tensors": count,
        "cosine": cosine,
        "rel_euclidean": math.sqrt(dd / gg) if gg > 0 else (0.0 if dd == 0 else math.inf),
        "rmse": math.sqrt(dd / n) if n else None,
    }
