"""How a tensor row's error is read: its relative Euclidean distance from the golden,
``r = ||t - g|| / ||g||`` (msit's "relative euclidean"); for a statistics-only row, the norms'
relative difference, which is a lower bound of it (``| ||t|| - ||g|| | <= ||t - g||``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tui_acc.tolerances.masks import masked
from tui_acc.tolerances.rounding import unit_roundoff


def relative_error(row: Mapping[str, Any]) -> float | None:
    """A tensor row's relative error as measured: relative Euclidean distance, or for a
    statistics-only row the norms' relative difference (None when it has neither, or could not be
    read)."""
    if row.get("error"):
        return None
    value = row.get("norm_rel_diff") if row.get("stats_only") else row.get("rel_euclidean")
    return abs(value) if isinstance(value, (int, float)) and not math.isnan(value) else None


def error_of(row: Mapping[str, Any]) -> float | None:
    """A tensor row's relative error as the model reads it: ``relative_error`` of a float tensor,
    None for what it says nothing of: an integer tensor (token ids: a difference is not an error
    that grows), a mask's fill values (their difference between dtypes is no error), a golden of
    zeros (an infinite relative error)."""
    value = relative_error(row)
    floats = (
        unit_roundoff(row.get("golden_dtype")) is not None
        and unit_roundoff(row.get("test_dtype")) is not None
    )
    if value is None or not floats or masked(row) or math.isinf(value):
        return None
    return value


def modelled(row: Mapping[str, Any]) -> bool:
    """Whether the error model can read this tensor: data (statistics are computed in the tensor's
    own dtype, a rounding of their own), and no mask."""
    return not row.get("stats_only") and error_of(row) is not None
