"""Where a tensor pair's error sits: |test - golden| over (rows x channel blocks), and how large the
relative error is against the dtype's rounding. Headless: the TUI and ``report --plot`` draw it.

The tensor is viewed as a matrix, its last dimension the channels and everything before it the rows
(a [batch, seq, hidden] activation: one row per token). Rows and channels are cut into at most
``GRID_ROWS`` x ``GRID_CHANNELS`` near-equal blocks; each cell keeps the largest and the summed
|t - g| of its elements and how many of them are NaN/Inf. A cell's picture value is its largest |Δ|
over the golden's RMS (the tensor's own scale): one rounding of a typical element is about u. Each row
and each channel keeps its largest |Δ| too (up to ``LINE_LIMIT`` of them), so a cell that stands out
can be traced to the one row (token) or channel in it.

The histogram holds each element's relative error |t - g| / |g| (where |g| > REL_ERR_FLOOR) in
power-of-two bins, so the dtype's unit roundoff u (bf16 2^-8, fp16 2^-11, fp32 2^-24) is a bin
edge: an operator that only rounds keeps its mass below u.

Bounded cost: one pass, ``CHUNK_ELEMENTS`` at a time (as the metric kernels read), never a float64
copy of the tensor. The cells see every element (one bad row is never sampled away); the histogram,
whose shape is all it shows, reads at most ``HISTOGRAM_BUDGET`` elements, a systematic sample (every
k-th element, k coprime to the row length so every channel is in it) that ``sampled_every`` states.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.metrics.error_spots import HOT, named, standing_out
from tui_acc.metrics.error_sweep import EXPONENT_LOW, Worst, edges, swept
from tui_acc.metrics.kernels import ShapeMismatch
from tui_acc.tolerances.rounding import unit_roundoff

GRID_ROWS, GRID_CHANNELS = 32, 64
# Picture levels: 0 is blank (no error, or below the lowest level), LEVELS - 1 the largest cell;
# each level a factor LEVEL_STEP below the next, so the five drawn levels span 4^5 = 1024x.
LEVELS, LEVEL_STEP = 6, 4.0


def _never() -> bool:
    return False


@dataclass(frozen=True)
class ErrorMap:
    """A tensor pair's error, reduced to a grid of cells and a histogram (see the module's notes)."""

    shape: tuple[int, ...]
    golden_dtype: str
    test_dtype: str
    rows: int  # of the matrix view: the product of every dimension but the last
    channels: int
    row_edges: np.ndarray  # block i holds rows row_edges[i]..row_edges[i+1]-1
    channel_edges: np.ndarray
    cell_max: np.ndarray  # largest |t - g| of each cell's finite elements (0 where none)
    cell_sum: np.ndarray  # Σ|t - g| over them
    cell_bad: np.ndarray  # elements NaN or Inf on either side
    row_max: np.ndarray | None  # largest |t - g| of each row (None past LINE_LIMIT rows)
    channel_max: np.ndarray | None
    row_mean: np.ndarray | None  # mean |t - g| of each row (NaN/Inf counted as 0)
    channel_mean: np.ndarray | None
    golden_rms: float  # over the golden's finite elements
    unit_roundoff: float | None  # of the coarser dtype; None for integers
    histogram: np.ndarray  # counts of relative errors in power-of-two bins (EXPONENT_LOW...)
    exact: int  # elements the histogram read with t == g
    no_scale: int  # elements read with |g| <= REL_ERR_FLOOR: no relative error
    sampled_every: int  # the histogram read every k-th element (1: all of them)
    worst: Worst | None

    # --- the picture ----------------------------------------------------------------------------

    @property
    def scale(self) -> float:
        """What a cell's |Δ| is divided by: the golden's RMS; 1 (absolute) for an all-zero golden."""
        return self.golden_rms if self.golden_rms > 0 else 1.0

    def relative_cells(self) -> np.ndarray:
        """Each cell's largest |Δ| over the golden's RMS."""
        return self.cell_max / self.scale

    def cell_counts(self) -> np.ndarray:
        """Finite elements per cell."""
        return np.outer(np.diff(self.row_edges), np.diff(self.channel_edges)) - self.cell_bad

    def level_tops(self) -> list[float]:
        """The upper edge of levels 1..LEVELS-1, in relative_cells' units; [] when nothing differs."""
        top = float(self.relative_cells().max(initial=0.0))
        if not top > 0 or not math.isfinite(top):
            return []
        return [top / LEVEL_STEP ** (LEVELS - 1 - level) for level in range(1, LEVELS)]

    def levels(self) -> np.ndarray:
        """Each cell's level: 0 blank, LEVELS - 1 the worst cell, -1 a cell holding NaN/Inf."""
        values = self.relative_cells()
        tops = self.level_tops()
        levels = np.zeros(values.shape, dtype=np.int8)
        if tops:
            drawn = values > tops[0] / LEVEL_STEP  # below the lowest level's lower edge: blank
            # on the upper edges: a value at an edge belongs to the level below it
            levels[drawn] = np.searchsorted(np.asarray(tops), values[drawn], side="left") + 1
        levels[self.cell_bad > 0] = -1
        return levels

    def coarsened(self, rows: int, channels: int) -> ErrorMap:
        """The same map with at most ``rows`` x ``channels`` cells: neighbouring cells merged (exact:
        the largest of the largest, the sum of the sums)."""
        height, width = self.cell_max.shape
        r, c = _starts(height, rows), _starts(width, channels)
        if not self.cell_max.size or (len(r) == height and len(c) == width):
            return self

        def merged(cells: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
            return ufunc.reduceat(ufunc.reduceat(cells, r, axis=0), c, axis=1)

        return replace(
            self,
            row_edges=self.row_edges[[*r, height]],
            channel_edges=self.channel_edges[[*c, width]],
            cell_max=merged(self.cell_max, np.maximum),
            cell_sum=merged(self.cell_sum, np.add),
            cell_bad=merged(self.cell_bad, np.add),
        )

    # --- what it says -----------------------------------------------------------------------------

    @property
    def read(self) -> int:
        """Elements the histogram read (every element when ``sampled_every`` is 1)."""
        return int(self.histogram.sum()) + self.exact + self.no_scale

    @staticmethod
    def bin_exponent(index: int) -> int:
        """Bin ``index`` holds relative errors in [2^(e-1), 2^e) for the e returned."""
        return EXPONENT_LOW + index

    @property
    def unit_exponent(self) -> int | None:
        """e with u = 2^e (every float's u is a power of two); None without u."""
        if self.unit_roundoff is None:
            return None
        return math.frexp(self.unit_roundoff)[1] - 1  # frexp(2^e) = (0.5, e + 1)

    def share_within_roundoff(self) -> float | None:
        """The share of relative errors below u (exact ones included); None without u or values."""
        total = int(self.histogram.sum()) + self.exact
        exponent = self.unit_exponent
        if exponent is None or not total:
            return None
        # bin e holds errors below 2^e: the bins up to u's exponent hold the errors below u
        below = int(self.histogram[: max(0, exponent - EXPONENT_LOW + 1)].sum())
        return (below + self.exact) / total

    def standing_out(self, axis: str) -> list[tuple[int, int]]:
        """The rows (``axis="rows"``) or channels set apart from the rest, as [first, last] spans: by
        their largest |Δ| (one element off) or their mean |Δ| (the whole line off, where another
        fault crossing every line evens out the largest), each split where ``error_spots`` finds it. A
        line's |Δ| under one rounding of a typical element (u x the golden's RMS) counts as that
        rounding: exact and rounding-level lines are one group. The blocks stand in for the lines
        past LINE_LIMIT of them; under three lines say nothing."""
        rows = axis == "rows"
        bounds = self.row_edges if rows else self.channel_edges
        largest, mean = (self.row_max, self.row_mean) if rows else (self.channel_max, self.channel_mean)
        if largest is None or mean is None:  # per block: its cells' largest, its mean
            across = 1 if rows else 0
            largest = self.cell_max.max(axis=across, initial=0.0)
            mean = self.cell_sum.sum(axis=across) / np.maximum(self.cell_counts().sum(axis=across), 1)
            spans = [(int(bounds[i]), int(bounds[i + 1]) - 1) for i in range(len(largest))]
        else:
            spans = [(i, i) for i in range(len(largest))]
        return standing_out(largest, mean, spans, (self.unit_roundoff or 0.0) * self.golden_rms)

    def in_units(self, value: float) -> str:
        """A relative value in units of u (``4.9u``, ``78u``, ``1.2e3u``); without u, the value."""
        return short(value) if self.unit_roundoff is None else f"{short(value / self.unit_roundoff)}u"

    def histogram_summary(self) -> str:
        """``8% below u = 2^-8, 0% exact`` and what the histogram read, where it did not read it all."""
        within = self.share_within_roundoff()
        total = int(self.histogram.sum()) + self.exact
        parts = []
        if within is not None:
            parts.append(f"{percent(within)} below u = 2^{self.unit_exponent}")
        if total:
            parts.append(f"{percent(self.exact / total)} exact")
        else:
            parts.append("no element to compare")
        text = ", ".join(parts)
        if self.sampled_every > 1:
            text += f" (every {self.sampled_every}th element: {count(self.read)})"
        if self.no_scale:
            text += f"; {count(self.no_scale)} with golden ≈ 0 left out"
        return text

    def where(self) -> str:
        """One sentence: which rows or channels stand out, or that the error is spread evenly."""
        bad = int(self.cell_bad.sum())
        nan = f"; {bad} NaN/Inf (cells marked !)" if bad else ""
        if not self.cell_max.size:
            return "empty tensor"
        if not self.cell_max.max() > 0:
            return ("no finite element differs" if bad else "test equals golden") + nan
        found = []
        for axis, total in (("rows", self.rows), ("channels", self.channels)):
            spans = self.standing_out(axis)
            count = sum(last - first + 1 for first, last in spans)
            if spans:
                found.append(named(axis, spans) + (f" ({count} of {total})" if count > 1 else ""))
        if not found:
            return f"spread evenly: no row or channel stands {HOT:.0f}x above the rest{nan}"
        return f"stands out ({HOT:.0f}x+ above the rest): {'; '.join(found)}{nan}"


def error_map(
    golden: np.ndarray,
    test: np.ndarray,
    rows: int = GRID_ROWS,
    channels: int = GRID_CHANNELS,
    should_stop: Callable[[], bool] = _never,
) -> ErrorMap:
    """The error map of one pair, in one bounded pass (see the module's notes).

    Raises ShapeMismatch when the element counts differ, Cancelled when ``should_stop`` says so
    (asked between chunks).
    """
    if golden.size != test.size:
        raise ShapeMismatch(f"element counts differ: golden {list(golden.shape)} vs test {list(test.shape)}")
    width = int(golden.shape[-1]) if golden.ndim and golden.shape[-1] else 1
    height = golden.size // width
    g2, t2 = golden.reshape(height, width), test.reshape(height, width)
    sweep = swept(g2, t2, edges(height, rows), edges(width, channels), should_stop)
    units = [u for u in (unit_roundoff(dtype_name(golden)), unit_roundoff(dtype_name(test))) if u is not None]
    return ErrorMap(
        shape=tuple(int(d) for d in golden.shape),
        golden_dtype=dtype_name(golden),
        test_dtype=dtype_name(test),
        rows=height,
        channels=width,
        row_edges=sweep.row_edges,
        channel_edges=sweep.channel_edges,
        cell_max=sweep.cell_max,
        cell_sum=sweep.cell_sum,
        cell_bad=sweep.cell_bad,
        row_max=sweep.row_max,
        channel_max=sweep.channel_max,
        row_mean=None if sweep.row_sum is None else sweep.row_sum / max(width, 1),
        channel_mean=None if sweep.channel_sum is None else sweep.channel_sum / max(height, 1),
        golden_rms=math.sqrt(sweep.gg / sweep.finite) if sweep.finite else 0.0,
        unit_roundoff=max(units) if units else None,
        histogram=sweep.histogram,
        exact=sweep.exact,
        no_scale=sweep.no_scale,
        sampled_every=sweep.step,
        worst=sweep.worst,
    )


def _starts(cells: int, most: int) -> list[int]:
    """The first cell of each of min(most, cells) near-equal groups of ``cells``."""
    return [int(x) for x in edges(cells, most)[:-1]]


def short(value: float) -> str:
    """Two significant digits, ``0.31``, ``4.9``, ``78``, ``690``; ``1.2e3`` past that."""
    if value == 0 or not math.isfinite(value):
        return str(value)
    if 0.01 <= abs(value) < 1000:
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def percent(share: float) -> str:
    """``62%``; ``<1%`` and ``>99%`` where rounding would say 0 or 100 of a share that is not."""
    if 0 < share < 0.01:
        return "<1%"
    if 0.99 < share < 1:
        return ">99%"
    return f"{100 * share:.0f}%"


def count(n: int) -> str:
    """``3.7M``, ``12.0k``, ``950``."""
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 10_000 else str(n)
