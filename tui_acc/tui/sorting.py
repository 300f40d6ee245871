"""Ordering a table by any of its columns (no textual here: the screens hold the state)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

# Which end of a column is the bad one: picking a column puts its worst rows first.
Worst = Literal["low", "high"]


# Metrics whose high values are the bad ones; every other column sorts its lowest values first.
HIGH_IS_BAD = frozenset({"kl", "max_abs_err", "rel_euclidean", "norm_rel_diff", "max_diff", "mean_diff"})


def worst_end(column: str) -> Worst:
    return "high" if column in HIGH_IS_BAD else "low"


# What "worst first" means for the columns that are not plain numbers.
_NOTES = {
    **dict.fromkeys(("inputs", "outputs", "passed"), "failures first"),
    **dict.fromkeys(("name", "test_name", "type", "shape", "test_node"), "A to Z"),
    **dict.fromkeys(("order", "token"), "first to last"),
    "top1": "flipped first",
}


def worst_note(column: str) -> str:
    return _NOTES.get(column) or ("highest first" if column in HIGH_IS_BAD else "lowest first")


@dataclass(frozen=True)
class SortColumn:
    key: str
    label: str
    worst: Worst

    @property
    def note(self) -> str:
        """What picking it does, in the sort dialog."""
        return worst_note(self.key)


@dataclass(frozen=True)
class Sort:
    """``column`` None is the view's natural order (execution order, token order)."""

    column: str | None = None
    descending: bool = False

    def picked(self, column: SortColumn | None) -> Sort:
        """The sort after the user picks ``column``: worst first, or reversed when it is the current one."""
        if column is None:
            return Sort()
        if column.key == self.column:
            return Sort(column.key, not self.descending)
        return Sort(column.key, column.worst == "high")

    def reversed(self) -> Sort:
        return self if self.column is None else Sort(self.column, not self.descending)

    def describe(self, columns: Iterable[SortColumn]) -> str:
        label = next((c.label for c in columns if c.key == self.column), self.column)
        return f"{label} {'▼' if self.descending else '▲'}"


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def sorted_keys(keys: list[str], value: Callable[[str, str], object], sort: Sort) -> list[str]:
    """``keys`` ordered by ``value(key, sort.column)``; rows without a value (pending, n/a) stay last.

    The sort is stable, so rows with equal values keep the view's natural order.
    """
    if sort.column is None:
        return keys
    column = sort.column
    present: list[tuple[object, str]] = []
    missing: list[str] = []
    for key in keys:
        found = value(key, column)
        if _missing(found):
            missing.append(key)
        else:
            present.append((found, key))
    present.sort(key=lambda pair: pair[0], reverse=sort.descending)  # type: ignore[arg-type, return-value]
    return [key for _, key in present] + missing


def verdict_rank(passed: bool | None, label: str | None = None) -> int | None:
    """Failures before passes; among failures, where the error starts before where it is inherited."""
    if passed is None:
        return None
    if passed:
        return 9
    return {"local": 0, "contains": 1, "inherited": 2}.get(label or "", 3)
