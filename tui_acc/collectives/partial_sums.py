"""A group's golden built host by host, as a Ray run (``tui_acc/cluster``) builds it: each host adds its
own ranks' inputs to what the hosts before it sent, and only that running result travels on.

The arithmetic is ``replay.collective.shares``' own, step by step: numpy reduces axis 0 of the
stacked inputs row by row, in rank order, from the reduction's identity (0 for a sum, 1 for a
product; the first row for max and min), so folding the ranks in one at a time in rank order gives
the same float64 bits wherever the sum is cut between hosts. (Not for one-element inputs: numpy
sums a one-column stack pairwise from 8 rows on, so those, like the copies (all-gather, all-to-all)
and inputs of unequal shapes, travel as they are and the last host calls ``goldens_of`` on all of
them: the local check's code.) ``tests/unit/test_partial_sums.py`` holds the two to the same bits.

What travels is the smaller of the running reduction (its float64 values stored in the narrowest
float type that holds them exactly: a sum of a few bfloat16 values fits a float32) and the raw
inputs not yet folded in: a host holding one bfloat16 rank sends its input (2 bytes an element),
not a float64 sum and magnitude (16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui_acc.collectives.bound import Reduction
from tui_acc.collectives.rank_set import Collective
from tui_acc.collectives.tensors import CheckFailed, goldens_of

if TYPE_CHECKING:
    import numpy as np

FOLDED = ("sum", "avg", "prod", "max", "min")  # reductions with a running value (copies have none)


@dataclass
class RunningInputs:
    """A group's inputs so far, in rank order: a running reduction of the first ``folded`` of them
    (``total``, and ``magnitude``: sum |x| for a sum or average) and the inputs after those, as read."""

    reduction: Reduction
    folded: int = 0
    total: np.ndarray | None = None  # float64 values, held in the narrowest float dtype that is exact
    magnitude: np.ndarray | None = None
    pending: list[np.ndarray] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays: what it costs to send."""
        arrays = [a for a in (self.total, self.magnitude) if a is not None] + self.pending
        return sum(int(a.nbytes) for a in arrays)


def foldable(collective: Collective, reduction: Reduction, shapes: Sequence[tuple[int, ...] | None]) -> bool:
    """Whether a running reduction reproduces ``shares`` for these inputs (their shapes in rank
    order): a sum, average, product, max or min of inputs of one shape and more than one element."""
    if collective.kind not in ("all_reduce", "reduce_scatter") or reduction not in FOLDED:
        return False
    if not shapes or any(shape is None for shape in shapes) or len(set(shapes)) > 1:
        return False
    first = shapes[0]
    numel = 1
    for dim in first or ():
        numel *= dim
    return numel > 1


def extend(
    state: RunningInputs | None, inputs: Sequence[np.ndarray], reduction: Reduction, fold: bool
) -> RunningInputs:
    """``state`` (None: the group's first host) with ``inputs`` (the next ranks', in rank order) added:
    folded in where ``fold`` allows and that is smaller to send, else kept as they are."""
    state = state if state is not None else RunningInputs(reduction)
    kept = RunningInputs(reduction, state.folded, state.total, state.magnitude, [*state.pending, *inputs])
    if not fold:
        return kept
    folded = _folded(kept)
    return folded if folded.nbytes < kept.nbytes else kept


def complete(
    state: RunningInputs, collective: Collective, params: Sequence[dict[str, Any]], size: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each rank's golden and magnitude (by position in the group of ``size`` ranks), as
    ``goldens_of`` gives them from every input.

    Raises:
        CheckFailed: inputs that do not reduce together, named as the local check names them.
    """
    from tui_acc.replay.collective import split_shares

    if not state.folded:  # nothing folded on the way: the local check's own code on every input
        return goldens_of(state.pending, collective, state.reduction, list(params))
    whole = _folded(state)
    assert whole.total is not None
    total = _wide(whole.total)
    magnitude = _finished_magnitude(whole, total, size)
    if state.reduction == "avg":
        total = total / size
    try:
        return split_shares(total, magnitude, collective.kind, size)
    except ValueError as exc:
        raise CheckFailed(f"{collective.op}: {exc}") from exc


def _folded(state: RunningInputs) -> RunningInputs:
    """Every input of ``state`` folded into its running reduction, in rank order."""
    import numpy as np

    from tui_acc.dumps.dtypes import widened

    reduction = state.reduction
    total = None if state.total is None else _wide(state.total).copy()
    magnitude = None if state.magnitude is None else _wide(state.magnitude).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        for raw in state.pending:
            x = np.asarray(widened(raw), dtype=np.float64).reshape(-1)
            if total is None:  # from the identity, as numpy's reduction starts: 0 + x keeps no -0.0
                total = x + 0.0 if reduction in ("sum", "avg") else x.copy()
                magnitude = np.abs(x) if reduction in ("sum", "avg") else None
            elif reduction in ("sum", "avg"):
                total += x
                assert magnitude is not None
                magnitude += np.abs(x)
            elif reduction == "prod":
                total *= x
            elif reduction == "max":
                np.maximum(total, x, out=total)
            else:
                np.minimum(total, x, out=total)
    return RunningInputs(
        reduction,
        state.folded + len(state.pending),
        None if total is None else narrowest(total),
        None if magnitude is None else narrowest(magnitude),
    )


def _finished_magnitude(state: RunningInputs, total: np.ndarray, size: int) -> np.ndarray:
    """The magnitude ``shares`` gives with the total: sum |x| (over N for an average), |prod|, or 0."""
    import numpy as np

    if state.reduction in ("sum", "avg"):
        assert state.magnitude is not None
        magnitude = _wide(state.magnitude)
        return magnitude / size if state.reduction == "avg" else magnitude
    if state.reduction == "prod":
        return np.abs(total)
    return np.zeros(total.size)


def narrowest(values: np.ndarray) -> np.ndarray:
    """float64 ``values`` in the narrowest float dtype that gives back the same bits (bfloat16,
    float16, float32), else as they are: lossless, a quarter or half the bytes to send."""
    import ml_dtypes
    import numpy as np

    bits = values.view(np.uint64)
    with np.errstate(over="ignore", invalid="ignore"):
        for dtype in (ml_dtypes.bfloat16, np.float16, np.float32):
            narrow = values.astype(dtype)
            if np.array_equal(narrow.astype(np.float64).view(np.uint64), bits):
                return narrow
    return values


def _wide(values: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.asarray(values, dtype=np.float64)
