"""``tui-acc.toml``'s ``[collectives]`` table::

[collectives]
margin = 2      # an element fails beyond margin x its rounding bound (docs/ranks.md)
"""

from __future__ import annotations

from typing import Any

from tui_acc.collectives.bound import DEFAULT_MARGIN
from tui_acc.errors import TuiAccError
from tui_acc.numbers import as_finite, shown_value


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
    finite = as_finite(value)
    if finite is None or finite < 1:
        said = shown_value(value)
        raise SettingError(f"{where} must be a number >= 1 (a multiple of the rounding bound), not {said}")
    return finite
