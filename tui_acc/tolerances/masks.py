"""Values at a float dtype's limit: a mask's fill (float32's -3.4e38 against float16's -65504), equal
by intent however far apart their digits are, and judged by neither a relative error nor an error
model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the largest finite value of each float dtype: a value at it is a mask's fill (or an overflow)
_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def saturates(value: object, dtype: object) -> bool:
    """Whether ``value`` is at ``dtype``'s largest magnitude."""
    limit = _FLOAT_MAX.get(str(dtype).removeprefix("torch."))
    return limit is not None and isinstance(value, (int, float)) and abs(value) >= limit


def masked(row: Mapping[str, Any]) -> bool:
    """A tensor both sides fill with their own dtype's extreme (an attention mask: float32's
    -3.4e38 golden, float16's -65504 test): equal by intent, however far apart their digits are."""
    return any(
        saturates(row.get(f"golden_{key}"), row.get("golden_dtype"))
        and saturates(row.get(f"test_{key}"), row.get("test_dtype"))
        for key in ("max", "min")
    )
