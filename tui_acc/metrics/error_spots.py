"""Which rows or channels of an error map stand out from the rest: a split of their largest (or
mean) |Δ| into the quiet and the off, or none. Rounding alone leaves no split: a line's largest
rounding error is at most a few u x the golden's RMS, and lines under one rounding count as one.
"""

from __future__ import annotations

import math

import numpy as np

# Rows or channels stand out when a gap of this factor (two picture levels) parts them from the rest,
# or their group's typical value is this factor above the rest's, and at least QUIET of the lines are
# below them (the quiet part may be the smaller one: the last 48 of 64 channels wrong).
HOT, QUIET = 16.0, 0.1
SPANS_SHOWN = 3


def standing_out(
    largest: np.ndarray, mean: np.ndarray, spans: list[tuple[int, int]], rounding: float
) -> list[tuple[int, int]]:
    """The spans (each line's [first, last] rows or channels) set apart by their largest |Δ| (one
    element off) or their mean |Δ| (the whole line off, where another fault crossing every line evens
    out the largest); ``rounding`` (u x the golden's RMS) is the least either counts as. Joined where
    adjacent; under three lines, none."""
    if len(largest) < 3:
        return []
    hot = np.zeros(len(largest), dtype=bool)
    for lines in (largest, mean):
        values = np.maximum(lines, rounding)
        ordered = np.sort(values)
        split = _split(ordered)
        if split is not None:
            hot |= values >= ordered[split]
    return _joined([spans[i] for i in np.flatnonzero(hot)])


def _split(ordered: np.ndarray) -> int | None:
    """Where ascending line values part into the quiet and the off: above a gap of HOT or more (a few
    lines off, however few), else the upper of two groups whose typical values are HOT apart (most of
    them off, the groups overlapping a little); with at least QUIET of the lines below; or None."""
    split = _gap_split(ordered)
    return _group_split(ordered) if split is None else split


def _gap_split(ordered: np.ndarray) -> int | None:
    """In ascending line values, the first index above the lowest gap of HOT or more that has at
    least QUIET of the lines below it."""
    for index in range(max(1, math.ceil(QUIET * len(ordered))), len(ordered)):
        low, high = ordered[index - 1], ordered[index]
        if high > 0 and (low == 0 or high / low >= HOT):
            return index
    return None


def _group_split(ordered: np.ndarray) -> int | None:
    """In ascending positive line values, the first index of the upper group of Otsu's two (the split
    of their logarithms with the largest variance between the groups), when the groups' geometric
    means are HOT apart or more and the lower holds at least QUIET of the lines. One population, even a
    wide one (the largest |Δ| of single elements), splits into halves far less than HOT apart."""
    if not ordered[0] > 0:
        return None
    logs = np.log(ordered)
    n = len(logs)
    below = np.arange(1, n)  # the lower group's size at each split
    sums = np.cumsum(logs)[:-1]
    low_mean = sums / below
    high_mean = (logs.sum() - sums) / (n - below)
    between = below * (n - below) * (high_mean - low_mean) ** 2
    between[below < math.ceil(QUIET * n)] = -1.0
    index = int(np.argmax(between))
    if between[index] < 0 or high_mean[index] - low_mean[index] < math.log(HOT):
        return None
    return index + 1


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent [first, last] spans made one."""
    joined: list[tuple[int, int]] = []
    for first, last in spans:
        if joined and joined[-1][1] + 1 == first:
            joined[-1] = (joined[-1][0], last)
        else:
            joined.append((first, last))
    return joined


SPANS_SHOWN = 3


def named(axis: str, spans: list[tuple[int, int]]) -> str:
    """``rows 17, 40-41 +2 more``; ``row 17``."""
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans[:SPANS_SHOWN])
    more = f" +{len(spans) - SPANS_SHOWN} more" if len(spans) > SPANS_SHOWN else ""
    one = len(spans) == 1 and spans[0][0] == spans[0][1]
    return f"{axis[:-1] if one else axis} {shown}{more}"
