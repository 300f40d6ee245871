"""What every headless report shares: its exit codes and strict JSON."""

from __future__ import annotations

import math
from typing import Any

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity made ``null`` (strict JSON readers reject them); each
    object that held one says which in ``non_finite`` (``{"rel_euclidean": "inf"}``: an all-zero golden
    makes relative errors infinite)."""
    if isinstance(value, dict):
        cleaned = {key: strict_json(item) for key, item in value.items()}
        lost = {key: _spelled(item) for key, item in value.items() if _non_finite(item)}
        if lost:
            cleaned["non_finite"] = lost
        return cleaned
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return None if _non_finite(value) else value


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _spelled(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
