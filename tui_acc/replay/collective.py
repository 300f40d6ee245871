"""A collective operator of a sharded test compared with a one-device golden: every rank's output
against what the ranks' inputs together give (docs/ranks.md).

* all-reduce: the reduction (sum by default; avg, max, min, prod where the dump says so: ATB's
  ``op_param.json`` ``allReduceType``, msprobe's recorded ``ReduceOp``) of every rank's input;
* reduce-scatter: rank r's share is chunk r (dimension 0) of that reduction;
* all-gather: every rank's is the concatenation (dimension 0) of every rank's input;
* all-to-all: rank r's is the concatenation, in rank order, of the piece every rank's input sends
  it: equal blocks of dimension 0 (torch's ``all_to_all_single`` without split sizes, ATB's
  ``AllToAllOperation``), the rows msprobe records as ``input_split_sizes``, ATB
  ``AllToAllVOperation``'s ``sendCounts`` / ``sdispls`` (elements of the flat input), or, with ATB's
  ``transpose``, equal blocks of columns of a ``[m, n]`` input.

A gathered comparison holds each of the collective's tensors on every rank (``Call.ranks``); ATB's
``rankSize``, smaller than the run, makes groups of that many consecutive ranks. The
rank whose output is farthest from its share is the one compared, and the notes say every rank's
distance: a collective that went wrong on one rank is named with that rank. ``tui-acc ranks``
(collectives/) checks the same arithmetic without a golden, element by element.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tui_acc.dumps.sharding import Kind, Reduction, collective_kind, kind_of, reduction_named
from tui_acc.replay.call import Call, ProcessGroup, Replayed, ReplayImpossible

__all__ = [
    "Kind",
    "Reduction",
    "across_ranks",
    "collective_kind",
    "kind_of",
    "reduction_named",
    "shares",
    "split_shares",
]


# how a rank's input is split among the ranks of an all-to-all: (start, count) in its flat input for
# each destination rank, COLUMNS (ATB's transpose), or None (equal blocks of dimension 0)
Sends = list[tuple[int, int]] | str | None
COLUMNS = "columns"


def sends_of(params: Mapping[str, Any], shape: Sequence[int]) -> Sends:
    """A rank's all-to-all split from what its dump records: ATB ``AllToAllVOperation``'s
    ``sendCounts`` and ``sdispls``, msprobe's ``input_split_sizes`` (rows of ``shape``), ATB's
    ``transpose``; None where it records none (equal blocks).

    Raises:
        ValueError: a recorded split that is not a list of whole numbers.
    """
    counts, starts = params.get("sendCounts"), params.get("sdispls")
    if counts is not None or starts is not None:
        return list(zip(_whole_numbers(starts, "sdispls"), _whole_numbers(counts, "sendCounts"), strict=True))
    rows = params.get("input_split_sizes")
    if rows is not None:
        row_size = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        sizes = _whole_numbers(rows, "input_split_sizes")
        offsets = np.cumsum([0, *sizes])[:-1]
        return [(int(start) * row_size, size * row_size) for start, size in zip(offsets, sizes, strict=True)]
    return COLUMNS if params.get("transpose") is True else None


def _whole_numbers(value: object, name: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise ValueError(f"{name} {str(value)[:80]} is not a list of whole numbers")
    return list(value)


def _exchanged(inputs: Sequence[np.ndarray], sends: Sequence[Sends] | None) -> list[np.ndarray]:
    """Each rank's share of an all-to-all: what every rank's input sends it, in rank order."""
    size = len(inputs)
    pieces = []
    for source, x in enumerate(inputs):
        split = sends[source] if sends is not None else None
        if isinstance(split, str):  # COLUMNS
            if np.ndim(x) != 2 or np.shape(x)[1] % size:
                raise ValueError(
                    f"rank {source}'s input {list(np.shape(x))} has no {size} equal column blocks"
                )
            width = np.shape(x)[1] // size
            blocks = [np.asarray(x)[:, r * width : (r + 1) * width] for r in range(size)]
            pieces.append([np.asarray(b, dtype=np.float64).reshape(-1) for b in blocks])
            continue
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        ranges: list[tuple[int, int]]
        if split is None:
            rows = np.shape(x)[0] if np.ndim(x) else 0
            if not rows or rows % size:
                raise ValueError(f"rank {source}'s input {list(np.shape(x))} has no {size} equal row blocks")
            step = flat.size // size
            ranges = [(r * step, step) for r in range(size)]
        else:
            ranges = split
        if len(ranges) != size or any(a < 0 or a + c > flat.size for a, c in ranges):
            raise ValueError(
                f"rank {source}'s split {ranges} does not fit its {flat.size} elements and {size} ranks"
            )
        pieces.append([flat[a : a + c] for a, c in ranges])
    return [np.concatenate([pieces[source][r] for source in range(size)]) for r in range(size)]


def shares(
    inputs: Sequence[np.ndarray], kind: Kind, reduction: Reduction, sends: Sequence[Sends] | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each rank's share of what the inputs give, and the magnitude its rounding scales with
    (``sum_r |x_r|``; avg: over N; prod: ``|prod_r x_r|``; copies: 0), flat float64. ``sends``: an
    all-to-all's split on each rank (``sends_of``).

    Raises:
        ValueError: inputs that cannot be reduced together (the message says how they differ).
    """
    size = len(inputs)
    if kind == "all_to_all":
        exchanged = _exchanged(inputs, sends)
        return exchanged, [np.zeros_like(share) for share in exchanged]
    wide = [np.asarray(x, dtype=np.float64).reshape(-1) for x in inputs]
    if kind == "all_gather" or reduction == "gather":
        whole = np.concatenate(wide)
        return [whole] * size, [np.zeros_like(whole)] * size
    if len({tuple(np.shape(x)) for x in inputs}) > 1:
        listed = ", ".join(f"rank {r} {list(np.shape(x))}" for r, x in enumerate(inputs))
        raise ValueError(f"the ranks' inputs differ in shape ({listed}); nothing to reduce")
    stacked = np.stack(wide)
    with np.errstate(over="ignore", invalid="ignore"):
        if reduction == "max":
            total, magnitude = stacked.max(axis=0), np.zeros(stacked.shape[1])
        elif reduction == "min":
            total, magnitude = stacked.min(axis=0), np.zeros(stacked.shape[1])
        elif reduction == "prod":
            total = stacked.prod(axis=0)
            magnitude = np.abs(total)
        else:
            total, magnitude = stacked.sum(axis=0), np.abs(stacked).sum(axis=0)
            if reduction == "avg":
                total, magnitude = total / size, magnitude / size
    return split_shares(total, magnitude, kind, size)


def split_shares(
    total: np.ndarray, magnitude: np.ndarray, kind: Kind, size: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The reduction of ``size`` ranks' inputs as each rank's share: the whole for an all-reduce,
    chunk r (dimension 0, flat) for rank r of a reduce-scatter.

    Raises:
        ValueError: a reduce-scatter whose reduction does not split into ``size`` equal chunks.
    """
    if kind != "reduce_scatter":
        return [total] * size, [magnitude] * size
    if total.size % size:
        raise ValueError(f"{total.size} elements do not split into {size} equal chunks")
    chunk = total.size // size
    return (
        [total[r * chunk : (r + 1) * chunk] for r in range(size)],
        [magnitude[r * chunk : (r + 1) * chunk] for r in range(size)],
    )


def across_ranks(call: Call) -> Replayed:
    """The gathered collective's output on its worst rank against that rank's share of what every
    rank's input gives; the notes give each rank's distance."""
    kind = collective_kind(call.type, call.name)
    inputs, outputs = call.ranks.get("input", ()), call.ranks.get("output", ())
    if kind is None:
        raise ReplayImpossible(f"{call.type}: not a collective this reference knows")
    if len(inputs) < 2 or len(outputs) != len(inputs):
        raise ReplayImpossible(
            "its result depends on every rank's input and this comparison reads one rank's (a "
            "sharded test is gathered against a one-device golden, or with --gather)"
        )
    copies = kind in ("all_gather", "all_to_all")
    reduction: Reduction = "gather" if copies else "sum"
    recorded = _recorded_reduction(call)
    if recorded is not None and not copies:
        reduction = recorded
    wanted: list[np.ndarray] = []
    magnitudes: list[np.ndarray] = []
    for group in _groups(call, len(inputs)):
        try:
            sends = (
                [sends_of(call.rank_params[r], np.shape(inputs[r])) for r in group]
                if kind == "all_to_all" and len(call.rank_params) == len(inputs)
                else None
            )
            group_shares, group_magnitudes = shares([inputs[r] for r in group], kind, reduction, sends)
        except ValueError as exc:
            raise ReplayImpossible(str(exc)) from exc
        wanted += group_shares
        magnitudes += group_magnitudes
    distances = []
    for rank, (share, output) in enumerate(zip(wanted, outputs, strict=True)):
        got = np.asarray(output, dtype=np.float64).reshape(-1)
        if got.size != share.size:
            raise ReplayImpossible(f"rank {rank}'s output has {got.size} elements, its share {share.size}")
        size = float(np.linalg.norm(share))
        gap = float(np.linalg.norm(got - share))
        distances.append(gap / size if size > 0 else gap)
    worst = int(np.argmax(distances))
    listed = ", ".join(f"rank {r} {d:.3e}" for r, d in enumerate(distances))
    note = (
        f"rank {worst} of {len(outputs)} compared, the farthest from its share of what the ranks' "
        f"inputs give ({reduction}; rel euclid {listed})"
    )
    steps = len(inputs) // len(_groups(call, len(inputs))) if reduction in ("sum", "avg", "prod") else 1
    # a sum that cancels (partials of opposite signs) rounds relative to its terms, not to itself
    size = float(np.linalg.norm(wanted[worst]))
    condition = max(1.0, float(np.linalg.norm(magnitudes[worst])) / size) if size > 0 else 1.0
    return Replayed(
        wanted[worst],
        reduction=steps,
        roundings=steps,
        condition=condition,
        notes=(note,),
        observed=np.asarray(outputs[worst]).reshape(-1),
        rank=worst,
    )


def _recorded_reduction(call: Call) -> Reduction | None:
    """The reduction the dump records: ATB's ``allReduceType`` / ``reduceType``, msprobe's ``op``
    keyword or its ``ReduceOp`` passed by position (``RedOpType.MAX``)."""
    keyword = [call.keyword.get(name) for name in ("allReduceType", "reduceType", "op")]
    positional = [value for _, value in sorted(call.positional.items()) if isinstance(value, str)]
    return next((found for value in (*keyword, *positional) if (found := reduction_named(value))), None)


def _groups(call: Call, ranks: int) -> list[range]:
    """The reduction groups: blocks of ATB's ``rankSize`` consecutive ranks where it is smaller than
    the run (as ``tui-acc ranks`` reads it), or of msprobe's recorded process group where it is the
    first such block; else every rank. Another group (not a block from rank 0) cannot be told from
    rank 0's record: refused by name."""
    size = call.keyword.get("rankSize")
    group = next(
        (v for v in (*call.keyword.values(), *call.positional.values()) if isinstance(v, ProcessGroup)), None
    )
    if group is not None and len(group.ranks) < ranks:
        if group.ranks != tuple(range(len(group.ranks))):
            raise ReplayImpossible(
                f"its process group holds ranks {list(group.ranks)} of {ranks}: `tui-acc ranks` checks "
                "it group by group"
            )
        size = len(group.ranks)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 < size < ranks:
        return [range(ranks)]
    if ranks % size:
        raise ReplayImpossible(f"rankSize {size} does not divide the run's {ranks} ranks into groups")
    return [range(start, start + size) for start in range(0, ranks, size)]


REFERENCES = {
    **dict.fromkeys(
        (
            "AllReduceOperation",
            "ReduceScatterOperation",
            "AllGatherOperation",
            "AllToAllOperation",
            "AllToAllVOperation",
        ),
        across_ranks,
    ),
    **{
        f"Distributed.{name}": across_ranks
        for name in (
            "all_reduce",
            "reduce_scatter",
            "reduce_scatter_tensor",
            "_reduce_scatter_base",
            "all_gather_into_tensor",
            "_all_gather_base",
            "all_to_all_single",
        )
    },
}
