"""Which output elements a replay computes: all of a small output, a seeded sample of a large one.

The local error is ``||y - r|| / ||r||`` over the output. Over a uniform random sample of output rows
(and, for a linear, of output columns) the sums of squares scaled by the sampled fraction are
unbiased estimates of the whole output's, and their ratio is a consistent estimate of the local
error whose relative spread shrinks as one over the square root of the elements sampled (about 1 %
for the 2**16 elements a sample holds). What it can miss is an error confined to rows or columns it
did not draw: every element is replayed where the output is small, the sample's size is stated, and
the row and column where the two sides differ most (the metrics' ``worst_index``) are always drawn.

The draw is seeded by the node's name, so a report says the same on every run and every machine.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# elements replayed per output: every one of an output this size or smaller
ELEMENTS = 1 << 16
# multiply-adds a linear's replay may spend (rows x columns x reduction): some 10 ms of float32
# BLAS, at least 4096 output elements of a 4096-wide layer's 16 sampled rows
MULTIPLY_ADDS = 1 << 24


@dataclass(frozen=True)
class Sample:
    """Output rows (indices over the flattened leading dimensions) kept, in increasing order, and
    how many there are in all."""

    rows: np.ndarray
    total_rows: int
    columns: np.ndarray | None = None  # where the planner already limits columns (none: all)

    def describe(self) -> str:
        """``12 of 4096 rows``: how much of the output the replay computes."""
        return f"{len(self.rows)} of {self.total_rows} rows"


def plan(output_shape: tuple[int, ...], seed: str, focus: int | None = None) -> Sample | None:
    """The rows to replay of an output of ``output_shape``; None to replay all of it. ``focus``: a
    flat output index whose row the sample holds (where the two sides differ most)."""
    if not output_shape:
        return None
    columns = max(1, output_shape[-1])
    rows = math.prod(output_shape[:-1])
    if rows * columns <= ELEMENTS or rows <= 1:
        return None
    keep = max(1, min(rows, ELEMENTS // columns))
    if keep >= rows:
        return None
    drawn = _rng(seed).choice(rows, size=keep, replace=False)
    return Sample(
        _with(drawn, focus // columns if focus is not None and 0 <= focus < rows * columns else None), rows
    )


def linear_columns(
    total: int, rows: int, reduction: int, seed: str, focus: int | None = None
) -> np.ndarray | None:
    """The output columns a linear (a reduction of ``reduction`` per element) replays for ``rows``
    rows within MULTIPLY_ADDS; None: every column. ``focus``: a column the sample holds."""
    affordable = MULTIPLY_ADDS // max(1, rows * reduction)
    if affordable >= total:
        return None
    keep = max(1, affordable)
    drawn = _rng(seed + "/columns").choice(total, size=keep, replace=False)
    return _with(drawn, focus if focus is not None and 0 <= focus < total else None)


def _with(drawn: np.ndarray, kept: int | None) -> np.ndarray:
    """``drawn`` sorted, with ``kept`` among them: an error confined to a few rows or columns (a
    kernel's last eight columns wrong) is where the two sides differ most, and a random draw of 95
    columns of 4096 misses all eight four times in five."""
    return np.unique(np.append(drawn, kept)) if kept is not None else np.sort(drawn)


def output_focus(outputs: Sequence[Mapping[str, Any]]) -> int | None:
    """Where the node's first output differs most from the golden (its row's ``worst_index``): the
    element a sampled replay always computes, so an error confined to a few rows or columns is not
    left out of the sample."""
    found = next((t.get("worst_index") for t in outputs if t.get("role") == "output"), None)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _rng(seed: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(seed.encode("utf-8", "replace")))
