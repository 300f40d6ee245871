"""Which output elements a replay computes: all of a small output, a seeded sample of a large one.

The local error is ``||y - r|| / ||r||`` over the output. Over a uniform random sample of output rows
(and, for a linear, of output columns) the sums of squares scaled by the sampled fraction are
unbiased estimates of the whole output's, and their ratio is a consistent estimate of the local
error whose relative spread shrinks as one over the square root of the elements sampled (about 1 %
for the 2**16 elements a sample holds). What it can miss is an error confined to rows or columns it
did not draw: every element is replayed where the output is small, and the sample's size is stated.

The draw is seeded by the node's name, so a report says the same on every run and every machine.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

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


def plan(output_shape: tuple[int, ...], seed: str) -> Sample | None:
    """The rows to replay of an output of ``output_shape``; None to replay all of it."""
    if not output_shape:
        return None
    columns = max(1, output_shape[-1])
    rows = math.prod(output_shape[:-1])
    if rows * columns <= ELEMENTS or rows <= 1:
        return None
    keep = max(1, min(rows, ELEMENTS // columns))
    if keep >= rows:
        return None
    return Sample(np.sort(_rng(seed).choice(rows, size=keep, replace=False)), rows)


def linear_columns(total: int, rows: int, reduction: int, seed: str) -> np.ndarray | None:
    """The output columns a linear (a reduction of ``reduction`` per element) replays for ``rows``
    rows within MULTIPLY_ADDS; None: every column."""
    affordable = MULTIPLY_ADDS // max(1, rows * reduction)
    if affordable >= total:
        return None
    keep = max(1, affordable)
    return np.sort(_rng(seed + "/columns").choice(total, size=keep, replace=False))


def _rng(seed: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(seed.encode("utf-8", "replace")))
