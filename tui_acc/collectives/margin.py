"""``tui-acc.toml``'s ``[collectives]`` table::

[collectives]
margin = 2      # an element fails beyond margin x its rounding bound (docs/ranks.md)
"""

from __future__ import annotations

import math
from typing import Any

from tui_acc.collectives.bound import DEFAULT_MARGIN
from tui_acc.errors import TuiAccError


class SettingError(TuiAccError, ValueError):
    """A ``[collectives]`` table that cannot be used; the message names the file."""


def margin_of(section: Any, source: str) -> float:
    """The margin a ``[collectives]`` table sets (the default without one)."""
    if section is None:
        return DEFAULT_MARGIN
    if not isinstance(section, dict):
        raise SettingError(f"{source}: [collectives] must be a table")
    unknown = sorted(set(section) - {"margin"})
    if unknown:
        raise SettingError(f"{source}: unknown keys in [collectives]: {unknown}; known: ['margin']")
    value = section.get("margin", DEFAULT_MARGIN)
    return checked_margin(value, f"{source}: [collectives] margin")


def checked_margin(value: Any, where: str) -> float:
    """``value`` as a float; SettingError naming ``where`` unless it is a finite number >= 1 (a bool is
    not)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 1
    ):
        raise SettingError(f"{where} must be a number >= 1 (a multiple of the rounding bound), not {value!r}")
    return float(value)
