"""A test tensor whose ranks hold partial sums (an all-reduce's inputs: ``gather.merge_parts``'s SUM),
summed host by host in a pair's Ray run: each host adds its own ranks' parts, in rank order, to what
the hosts before it sent, and only that running sum travels on to the next.

``merge_parts`` adds the parts one at a time in rank order into float64 (complex128 for complex
parts), then rounds once to the parts' dtype: folding them in here in the same order, wherever the
sequence is cut between hosts, gives the same float64 bits, so the row is the local run's to the last
bit (``tests/unit/test_running_sum.py``). What travels is the smaller of the running sum (its float64
values in the narrowest float type that holds them exactly: a sum of a few bfloat16 parts often
fits a float32) and the parts not yet folded in, as read: a host holding one bfloat16 rank sends its
part (2 bytes an element), one holding eight sends a sum (4 or 8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tui_acc.dumps.dtypes import is_float


@dataclass
class RunningSum:
    """The first ``count`` parts of a tensor, in rank order: the sum of the first ``folded`` of them
    (``total``, float64 values held in the narrowest dtype that is exact) and the parts after those."""

    count: int = 0
    folded: int = 0
    total: np.ndarray | None = None
    pending: list[np.ndarray] = field(default_factory=list)
    dtypes: list[np.dtype] = field(default_factory=list)  # every part's, in rank order

    @property
    def nbytes(self) -> int:
        """What it costs to send."""
        held = [self.total] if self.total is not None else []
        return sum(int(a.nbytes) for a in [*held, *self.pending])


def extend(state: RunningSum | None, parts: Sequence[np.ndarray]) -> RunningSum:
    """``state`` (None: the first host's) with ``parts``, the next ranks' in rank order, added: folded
    into the sum where that is smaller to send, else kept as they are."""
    state = state or RunningSum()
    kept = RunningSum(
        state.count + len(parts),
        state.folded,
        state.total,
        [*state.pending, *parts],
        [*state.dtypes, *(p.dtype for p in parts)],
    )
    folded = RunningSum(kept.count, kept.count, _narrowest(_sum(kept)), [], kept.dtypes)
    return folded if folded.nbytes < kept.nbytes else kept


def finished(state: RunningSum) -> np.ndarray:
    """Every part's sum as ``merge_parts`` gives it: rounded to the parts' dtype where they share one
    float dtype, else the float64 (complex128) sum."""
    total = _sum(state)
    if total is None:
        raise ValueError("no part to sum")
    first = state.dtypes[0]
    same = len(set(state.dtypes)) == 1 and is_float(np.empty(0, dtype=first))
    return total.astype(first) if same else total


def _sum(state: RunningSum) -> np.ndarray | None:
    """The float64 (complex128) sum of the parts so far, added in rank order."""
    wide = np.complex128 if any(np.dtype(d).kind == "c" for d in state.dtypes) else np.float64
    total = state.total.astype(wide) if state.total is not None else None
    for part in state.pending:
        if total is None:
            total = part.astype(wide)
        else:
            total += part
    return total


def _narrowest(total: np.ndarray | None) -> np.ndarray | None:
    """``total``'s values in float32 (complex64) where that holds every one of them exactly, bit for
    bit (a NaN's payload too)."""
    if total is None:
        return None
    narrow = np.complex64 if total.dtype.kind == "c" else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        held = total.astype(narrow)
        if np.array_equal(held.astype(total.dtype).view(np.uint64), total.view(np.uint64)):
            return held
    return total
