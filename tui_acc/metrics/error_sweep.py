"""The error map's one pass over a pair: tiles of about ``CHUNK_ELEMENTS`` (as the metric kernels
read), each folded into the cells' largest and summed |Δ|, each row's and channel's, and a
histogram of |Δ|/|g| in power-of-two bins, read on a systematic sample past ``HISTOGRAM_BUDGET``
elements. Nothing here is a float64 copy of the tensor: memory is a few tiles, whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tui_acc.dumps.dtypes import is_complex, widened
from tui_acc.metrics.engine import Cancelled
from tui_acc.metrics.kernels import CHUNK_ELEMENTS, REL_ERR_FLOOR

HISTOGRAM_BUDGET = 1 << 22
# Rows (or channels) past this many keep no maximum or mean each (16 MiB): the blocks still say where
LINE_LIMIT = 1 << 20
# Bin i holds relative errors in [2^(e-1), 2^e) for e = EXPONENT_LOW + i; the first bin also holds
# everything smaller, the last everything larger (2^-40 is below any float's rounding but float64's).
EXPONENT_LOW, EXPONENT_HIGH = -40, 8


@dataclass(frozen=True)
class Worst:
    """The element with the largest |t - g|."""

    row: int
    channel: int
    golden: float
    test: float


def swept(
    golden: np.ndarray,
    test: np.ndarray,
    row_edges: np.ndarray,
    channel_edges: np.ndarray,
    should_stop: Callable[[], bool],
) -> Sweep:
    """Every element of two (rows, channels) views folded in, a tile at a time, each tile within one
    row block; Cancelled when ``should_stop`` says so (asked between tiles)."""
    height, width = golden.shape
    sweep = Sweep(row_edges, channel_edges, height, width)
    rows_per_tile = max(1, CHUNK_ELEMENTS // width)
    tiles = _column_tiles(channel_edges)
    for block in range(len(row_edges) - 1):
        first, end = int(row_edges[block]), int(row_edges[block + 1])
        for row in range(first, end, rows_per_tile):
            stop = min(row + rows_per_tile, end)
            for c0, c1, first_block, starts in tiles:
                if should_stop():
                    raise Cancelled
                sweep.add(
                    block, first_block, starts, golden[row:stop, c0:c1], test[row:stop, c0:c1], (row, c0)
                )
    return sweep


class Sweep:
    """The running sums of one pass."""

    def __init__(self, row_edges: np.ndarray, channel_edges: np.ndarray, height: int, width: int) -> None:
        self.row_edges, self.channel_edges = row_edges, channel_edges
        shape = (len(row_edges) - 1, len(channel_edges) - 1)
        self.cell_max = np.zeros(shape)
        self.cell_sum = np.zeros(shape)
        self.cell_bad = np.zeros(shape, dtype=np.int64)
        self.row_max = np.zeros(height) if height <= LINE_LIMIT else None
        self.channel_max = np.zeros(width) if width <= LINE_LIMIT else None
        self.row_sum = np.zeros(height) if height <= LINE_LIMIT else None
        self.channel_sum = np.zeros(width) if width <= LINE_LIMIT else None
        self.width, self.step = width, _sample_step(height * width, width)
        self.histogram = np.zeros(EXPONENT_HIGH - EXPONENT_LOW + 1, dtype=np.int64)
        self.exact = self.no_scale = self.finite = 0
        self.gg = 0.0
        self.worst: Worst | None = None
        self._worst_abs = 0.0  # a worst element differs

    def add(
        self,
        block: int,
        first_block: int,
        starts: np.ndarray,
        g_tile: np.ndarray,
        t_tile: np.ndarray,
        at: tuple[int, int],
    ) -> None:
        """Fold one tile (rows of whole channel blocks, or a piece of one block; its first element at
        row, channel ``at``) into the sums."""
        g, t = _values(g_tile), _values(t_tile)
        with np.errstate(over="ignore", invalid="ignore"):
            diff = np.subtract(t, g)
            diff = np.abs(diff, out=diff) if diff.dtype.kind == "f" else np.abs(diff)
        cells = slice(first_block, first_block + len(starts))
        # Reduced over the tile's rows first (a fast, vectorised pass down the columns), then over
        # each block's columns (a short vector): a cell's largest is the largest of its columns'.
        columns = diff.max(axis=0)
        bad: np.ndarray | None = None
        if not np.isfinite(columns).all():  # NaN wins a maximum: one small check for the common case
            # NaN/Inf on a side, or finite values whose float32 difference overflowed: float64
            # tells them apart
            with np.errstate(over="ignore", invalid="ignore"):
                diff = np.abs(t.astype(np.complex128 if is_complex(t) else np.float64) - g)
            bad = ~np.isfinite(diff)
            diff[bad] = 0.0
            g = np.where(bad, 0, g)
            self.cell_bad[block, cells] += np.add.reduceat(bad.sum(axis=0), starts)
            columns = diff.max(axis=0)
        most = np.maximum.reduceat(columns, starts)
        self.cell_max[block, cells] = np.maximum(self.cell_max[block, cells], most)
        column_sums = diff.sum(axis=0, dtype=np.float64)
        self.cell_sum[block, cells] += np.add.reduceat(column_sums, starts)
        row, c0 = at
        rows, channels = slice(row, row + diff.shape[0]), slice(c0, c0 + diff.shape[1])
        if self.row_max is not None:
            np.maximum(self.row_max[rows], diff.max(axis=1), out=self.row_max[rows])
        if self.channel_max is not None and self.channel_sum is not None:
            np.maximum(self.channel_max[channels], columns, out=self.channel_max[channels])
            self.channel_sum[channels] += column_sums
        if self.row_sum is not None:
            self.row_sum[rows] += diff.sum(axis=1, dtype=np.float64)
        self.finite += diff.size - (int(np.count_nonzero(bad)) if bad is not None else 0)
        self.gg += float(np.vdot(g, g).real)
        peak = float(most.max(initial=0.0))
        if peak > self._worst_abs:
            self._worst_abs = peak
            index = int(diff.argmax())
            r, c = divmod(index, diff.shape[1])
            self.worst = Worst(row + r, c0 + c, float(g.flat[index].real), float(t.flat[index].real))
        self._histogram(diff, g, bad, row * self.width + c0)

    def _histogram(self, diff: np.ndarray, g: np.ndarray, bad: np.ndarray | None, flat_start: int) -> None:
        """Add the tile's relative errors (its elements on the sample's stride) to the histogram."""
        pick = slice((-flat_start) % self.step, None, self.step)
        d, magnitude = diff.reshape(-1)[pick], np.abs(g.reshape(-1)[pick])
        scaled = magnitude > REL_ERR_FLOOR
        if bad is not None:  # NaN/Inf are counted by the cells, not as errors of any size
            ok = ~bad.reshape(-1)[pick]
            scaled &= ok
            unscaled = int(np.count_nonzero(ok)) - int(np.count_nonzero(scaled))
        else:
            unscaled = scaled.size - int(np.count_nonzero(scaled))
        self.no_scale += unscaled
        with np.errstate(over="ignore"):
            relative = d / np.where(scaled, magnitude, np.inf)  # 0 where there is no scale (or NaN/Inf)
        mantissa, exponents = np.frexp(relative)  # exact: no logarithm's rounding decides a bin
        np.clip(exponents, EXPONENT_LOW, EXPONENT_HIGH, out=exponents)
        bins = self.histogram.size
        # zeros (t == g, and the elements without a scale) in one more bin: no boolean gather
        counts = np.bincount(np.where(mantissa == 0, bins, exponents - EXPONENT_LOW), minlength=bins + 1)
        self.histogram += counts[:bins]
        self.exact += int(counts[bins]) - (relative.size - int(np.count_nonzero(scaled)))


def _values(tile: np.ndarray) -> np.ndarray:
    """A tile as the kernels read it: float32 for 16-bit floats, float64 else, complex128 for complex."""
    return np.ascontiguousarray(tile, dtype=np.complex128) if is_complex(tile) else widened(tile)


def edges(length: int, blocks: int) -> np.ndarray:
    """Edges of min(blocks, length) near-equal blocks covering 0..length."""
    count = min(blocks, length)
    if count <= 0:
        return np.zeros(1, dtype=np.int64)
    return (np.arange(count + 1, dtype=np.int64) * length) // count


def _column_tiles(edges: np.ndarray) -> list[tuple[int, int, int, np.ndarray]]:
    """(first channel, end, first block, block starts inside) of each column tile: every channel at
    once when a row fits a chunk, else pieces of at most a chunk, none across a block's edge."""
    width = int(edges[-1])
    if width <= CHUNK_ELEMENTS:
        return [(0, width, 0, edges[:-1].copy())]
    tiles = []
    for block in range(len(edges) - 1):
        for c0 in range(int(edges[block]), int(edges[block + 1]), CHUNK_ELEMENTS):
            end = min(c0 + CHUNK_ELEMENTS, int(edges[block + 1]))
            tiles.append((c0, end, block, np.zeros(1, dtype=np.int64)))
    return tiles


def _sample_step(size: int, width: int) -> int:
    """Every how many elements the histogram reads: 1 up to HISTOGRAM_BUDGET, else the smallest
    step that keeps within it and is coprime to the row length (so each channel is read)."""
    step = max(1, -(-size // HISTOGRAM_BUDGET))
    while step > 1 and math.gcd(step, width) != 1:
        step += 1
    return step
