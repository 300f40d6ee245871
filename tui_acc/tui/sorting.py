"""Ordering and filtering a table's rows, as polars expressions (no textual here: the screens hold
the state, and say what each row's value in a column is)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

# polars is imported by the functions that use it: the token list is drawn before it is (an import
# of some 0.2 s), and nothing is sorted or filtered before the user asks.

# Which end of a column is the bad one: picking a column puts its worst rows first.
Worst = Literal["low", "high"]


# Differences of statistics (test - golden): signed, and as bad below zero as above. They order by
# magnitude, so "worst first" puts MaxDiff -0.0172 before 0.001.
SIGNED = frozenset(
    {f"{stat}_{kind}" for stat in ("max", "min", "mean", "norm") for kind in ("diff", "rel_diff")}
)
# Metrics whose high values (magnitudes, for the signed ones) are the bad ones; every other column
# sorts its lowest values first.
HIGH_IS_BAD = frozenset({"kl", "max_abs_err", "rel_euclidean"}) | SIGNED


def worst_end(column: str) -> Worst:
    """Which end of ``column`` is the bad one: ``high`` for the error metrics (``HIGH_IS_BAD``), else
    ``low``."""
    return "high" if column in HIGH_IS_BAD else "low"


# What "worst first" means for the columns that are not plain numbers.
_NOTES = {
    **dict.fromkeys(("inputs", "outputs", "passed"), "failures first"),
    **dict.fromkeys(("name", "test_name", "type", "shape", "test_node"), "A to Z"),
    **dict.fromkeys(("order", "token"), "first to last"),
    "top1": "flipped first",
}


def worst_note(column: str) -> str:
    """What picking ``column`` puts first, in words for the sort dialog (``highest first``, ``A to Z``…)."""
    if column in SIGNED:
        return "largest difference first, either sign"
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
        """The same column the other way round; the natural order stays as it is."""
        return self if self.column is None else Sort(self.column, not self.descending)

    def describe(self, columns: Iterable[SortColumn]) -> str:
        """``KL ▼``: the sorted column's label among ``columns`` and its direction."""
        label = next((c.label for c in columns if c.key == self.column), self.column)
        return f"{label} {'▼' if self.descending else '▲'}"


def sorted_keys(keys: list[str], value: Callable[[str, str], object], sort: Sort) -> list[str]:
    """``keys`` ordered by ``value(key, sort.column)`` (by magnitude in a ``SIGNED`` column); rows
    without a value (pending, n/a, NaN) stay last, whichever way. The sort is stable: rows with equal
    values keep the view's natural order."""
    if sort.column is None or not keys:
        return keys
    import polars as pl

    values = pl.Series("value", [value(key, sort.column) for key in keys], strict=False)
    if values.dtype.is_float():
        values = values.fill_nan(None)
    if sort.column in SIGNED and values.dtype.is_numeric():
        values = values.abs()
    frame = pl.DataFrame({"key": keys, "value": values})
    ordered = frame.sort("value", descending=sort.descending, nulls_last=True, maintain_order=True)
    return ordered["key"].to_list()


def matching_keys(texts: Mapping[str, Sequence[str]], wanted: str) -> list[str]:
    """The keys (in their order) one of whose texts (name, type, ...) holds ``wanted``, any case."""
    if not wanted or not texts:
        return list(texts)
    import polars as pl

    width = max(len(values) for values in texts.values())
    frame = pl.DataFrame(
        [[key, *values, *[""] * (width - len(values))] for key, values in texts.items()],
        schema=["key", *(f"text{i}" for i in range(width))],
        orient="row",
    )
    needle = wanted.lower()
    hit = pl.any_horizontal(
        pl.col(f"text{i}").str.to_lowercase().str.contains(needle, literal=True) for i in range(width)
    )
    return frame.filter(hit)["key"].to_list()


def verdict_rank(passed: bool | None, label: str | None = None) -> int | None:
    """Failures before passes; among failures, where the error starts before where it is inherited."""
    if passed is None:
        return None
    if passed:
        return 9
    return {"local": 0, "contains": 1, "inherited": 2}.get(label or "", 3)
