"""How a judged node shows on screen (✓ or ✗), without importing the machinery that judged it: the
screens read it before numpy and polars are loaded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def failing(row: Mapping[str, Any] | None) -> bool | None:
    """What a screen shows of a node: failing (✗) where an error starts in it, is inside it or came
    in with its inputs, or its outputs fail; passing (✓) where its outputs are within their
    bounds and nothing inside it fails; None while it is not known."""
    if row is None:
        return None
    if row.get("label") in ("local", "contains", "inherited"):
        return True
    passed = row.get("outputs_passed")
    return None if passed is None else not passed
