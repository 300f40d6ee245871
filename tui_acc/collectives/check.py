"""Each collective's output on every rank against the golden its ranks' inputs give.

* all-reduce: golden = the reduction (sum by default; avg, max, min or prod where the dump says
  so: ATB's ``op_param.json`` ``allReduceType``, msprobe's recorded ``ReduceOp``) of every rank's
  input, in float64; every rank's output is compared with it.
* reduce-scatter: rank r's golden is chunk r (dimension 0) of that reduction.
* all-gather: every rank's golden is the concatenation (dimension 0) of every rank's input.

msprobe records a collective in place (core/dump/data_dump/data_processor/base.py,
``analyze_forward_output``: a distributed API's output is its arguments after the call), so its
input is the argument before the call and its output the same argument after it: ``input.0`` /
``output.0`` for ``all_reduce(tensor)``; ``input.1`` / ``output.0`` for ``reduce_scatter*(out, in)``
and ``all_gather*(out, in)`` (a list argument's items are concatenated). ATB operations have
``intensor0`` / ``outtensor0``.

The verdict is ``bound.beyond_bound``'s; the four metrics are msit's (``metrics.compat``), reported
alongside. A rank lacking the operator or the token, a damaged file, a shape that does not fit:
that rank's row says so (``error``) and the rest is still checked.

A collective is checked in steps that a Ray run (``tui_acc/cluster``) spreads over the hosts holding
the rank folders: each rank read (``rank_reading.py``), the reduction and groups decided from what the
ranks record (``decide``), each group's golden (``tensors.goldens_of``; ``partial_sums.py`` on the
hosts), each rank's output judged against it (``judge_ranks``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from tui_acc.collectives.bound import DEFAULT_MARGIN, Reduction, beyond_bound, element_bound
from tui_acc.collectives.rank_reading import RankReader, RankReading
from tui_acc.collectives.rank_set import Collective, RankSet
from tui_acc.collectives.tensors import CheckFailed, goldens_of

if TYPE_CHECKING:
    import numpy as np

METRICS = ("cosine_similarity", "max_relative_error", "mean_relative_error", "relative_euclidean_distance")


class RankRow(TypedDict):
    """One rank's output of one collective at one token, judged."""

    token: int
    op: str
    rank: int
    rank_folder: str
    kind: str
    reduction: str
    dtype: str | None
    numel: int | None
    cosine_similarity: float | None
    max_relative_error: float | None
    mean_relative_error: float | None
    relative_euclidean_distance: float | None
    beyond_bound: int | None  # elements farther from the golden than the rounding bound allows
    worst_ratio: float | None  # the largest |out - golden| / bound (<= 1 within it; inf: beyond a 0 bound)
    passed: bool | None  # None: not judged (see error)
    error: str | None


class RanksCheck:
    """The check of one run, computed lazily: a collective's rows the first time they are asked for,
    once, from any thread."""

    def __init__(self, ranks: RankSet, margin: float = DEFAULT_MARGIN) -> None:
        self.ranks = ranks
        self.margin = margin
        self._collectives: dict[int, list[Collective]] = {}
        self._rows: dict[tuple[int, str], list[RankRow]] = {}
        self._lock = threading.Lock()
        self._reader = RankReader(ranks)

    def tokens(self) -> list[int]:
        """Every token any readable rank holds, in order."""
        return self.ranks.tokens()

    def collectives(self, token: int) -> list[Collective]:
        """The collectives at ``token`` in execution order, listed once per token (any thread)."""
        with self._lock:
            if token not in self._collectives:
                self._collectives[token] = self.ranks.collectives(token)
            return self._collectives[token]

    def rows(self, collective: Collective) -> list[RankRow]:
        """One row per rank for ``collective`` (an unreadable or missing rank: a row with its ``error``),
        computed the first time it is asked for, then kept (any thread)."""
        key = (collective.token, collective.op)
        cached = self._rows.get(key)
        if cached is None:
            cached = self._rows.setdefault(key, self._compute(collective))
        return cached

    def token_rows(self, token: int, should_stop: Callable[[], bool] | None = None) -> list[RankRow]:
        """The rows of every collective at ``token``, in execution order; ``should_stop`` is asked between
        collectives and ends the list early when true."""
        rows: list[RankRow] = []
        for collective in self.collectives(token):
            if should_stop is not None and should_stop():
                break
            rows.extend(self.rows(collective))
        return rows

    def all_rows(self, should_stop: Callable[[], bool] | None = None) -> list[RankRow]:
        """The rows of every token, in token order (``should_stop`` as in ``token_rows``)."""
        return [row for token in self.tokens() for row in self.token_rows(token, should_stop)]

    def said(self) -> dict[str, Any] | None:
        """What the run says of where it was computed, for ``report --json`` (a Ray run's hosts and
        the bytes that crossed between them); None here: one process read every rank."""
        return None

    def status(self) -> str | None:
        """A line on how the hosts of a Ray run are doing, for the screen; None here."""
        return None

    def close(self) -> None:
        """Release what the check holds beyond its rows (a Ray run's workers); nothing here."""

    # --- one collective ---------------------------------------------------------------------------

    def _compute(self, collective: Collective) -> list[RankRow]:
        readings = [self._reader.read(rank, collective) for rank in range(self.ranks.size)]
        rows = new_rows(collective, readings, self.ranks.names)
        reduction, groups = decide(collective, readings, self.ranks.size)
        for row in rows:
            row["reduction"] = reduction
        for group in groups:
            if refuse_lacking(group, rows, readings):
                continue
            try:
                goldens, magnitude = goldens_of(
                    [x for x in (readings[r].input for r in group) if x is not None],
                    collective,
                    reduction,
                    [readings[r].params for r in group],
                )
            except CheckFailed as exc:
                refuse(group, rows, exc)
                continue
            judge_ranks(group, group, rows, readings, goldens, magnitude, reduction, self.margin)
        return rows


# --- the steps, shared with a Ray run (tui_acc/cluster) -----------------------------------------------


def new_rows(collective: Collective, readings: Sequence[RankReading], names: Sequence[str]) -> list[RankRow]:
    """A row per rank, not yet judged: each with its reading's error."""
    rows = [empty_row(collective, rank, names[rank]) for rank in range(len(names))]
    for reading in readings:
        rows[reading.rank]["error"] = reading.error
    return rows


def decide(
    collective: Collective, readings: Sequence[RankReading], size: int
) -> tuple[Reduction, list[tuple[int, ...]]]:
    """The reduction (as the ranks record it; a copy for all-gather and all-to-all) and the disjoint
    reduction groups, from the readings' summaries alone (no tensor)."""
    copies = collective.kind in ("all_gather", "all_to_all")
    reduction: Reduction = "gather" if copies else "sum"
    groups: dict[int, tuple[int, ...]] = {}  # a rank's reduction group, where the dump records one
    for reading in readings:
        if not copies and reading.reduction is not None:
            reduction = reading.reduction
        if reading.group is not None:
            groups[reading.rank] = reading.group
    return reduction, partition(groups, size)


def partition(recorded: dict[int, tuple[int, ...]], size: int) -> list[tuple[int, ...]]:
    """The reduction groups, disjoint: each as its first rank records it (msprobe's ProcessGroup
    ranks, ATB's rankSize), every rank in one group where nothing says otherwise."""
    everyone = tuple(range(size))
    taken: set[int] = set()
    groups: list[tuple[int, ...]] = []
    for rank in everyone:
        if rank in taken:
            continue
        group = tuple(r for r in recorded.get(rank, everyone) if r not in taken)
        if rank not in group:  # a record that leaves its own rank out: judged alone
            group = (rank,)
        taken.update(group)
        groups.append(group)
    return groups


def refuse_lacking(group: tuple[int, ...], rows: list[RankRow], readings: Sequence[RankReading]) -> bool:
    """Where a rank of ``group`` has no input there is no golden: every row of the group says which
    rank's input is missing and why (True); False where every input is there."""
    lacking = [rank for rank in group if not readings[rank].has_input]
    if not lacking:
        return False
    why = "; ".join(rows[r]["error"] or "" for r in lacking)
    for rank in group:
        if rows[rank]["error"] is None:
            rows[rank]["error"] = f"no golden: the input of rank {lacking[0]} is missing ({why})"
    return True


def refuse(ranks: Collection[int], rows: list[RankRow], exc: CheckFailed) -> None:
    """No golden for these ranks (inputs that do not reduce together): their rows say why."""
    for rank in ranks:
        rows[rank]["error"] = rows[rank]["error"] or str(exc)


def judge_ranks(
    group: tuple[int, ...],
    own: Collection[int],
    rows: list[RankRow],
    readings: Sequence[RankReading],
    goldens: Sequence[np.ndarray],
    magnitude: Sequence[np.ndarray],
    reduction: Reduction,
    margin: float,
) -> None:
    """Each rank of ``group`` in ``own`` whose output was read, against its golden (``goldens`` and
    ``magnitude`` by position in the group)."""
    for position, rank in enumerate(group):
        output = readings[rank].output
        if rank not in own or output is None:
            continue
        try:
            judge(rows[rank], goldens[position], magnitude[position], output, reduction, len(group), margin)
        except CheckFailed as exc:
            rows[rank]["error"] = str(exc)


def empty_row(collective: Collective, rank: int, folder: str) -> RankRow:
    """Rank ``rank``'s row of ``collective``, nothing judged yet."""
    return RankRow(
        token=collective.token,
        op=collective.op,
        rank=rank,
        rank_folder=folder,
        kind=collective.kind,
        reduction="",
        dtype=None,
        numel=None,
        cosine_similarity=None,
        max_relative_error=None,
        mean_relative_error=None,
        relative_euclidean_distance=None,
        beyond_bound=None,
        worst_ratio=None,
        passed=None,
        error=None,
    )


def judge(
    row: RankRow,
    golden: np.ndarray,
    magnitude: np.ndarray,
    output: np.ndarray,
    reduction: Reduction,
    ranks: int,
    margin: float,
) -> None:
    """``row`` filled from ``output`` against ``golden``: the bound's verdict and the four metrics."""
    import numpy as np

    from tui_acc.collectives.metrics import collective_metrics
    from tui_acc.dumps.dtypes import dtype_name, widened

    flat = widened(output).astype(np.float64).reshape(-1)
    if flat.size != golden.size:
        raise CheckFailed(
            f"rank {row['rank']} ({row['rank_folder']}): output {list(output.shape)} holds {flat.size} "
            f"elements, its golden {golden.size}"
        )
    dtype = dtype_name(output)
    bound = element_bound(reduction, dtype, ranks, magnitude, margin)
    beyond, worst = beyond_bound(golden, flat, bound)
    metrics = collective_metrics(golden.reshape(-1).astype(np.float64), flat)
    row["dtype"] = dtype
    row["numel"] = int(flat.size)
    row["beyond_bound"] = beyond
    row["worst_ratio"] = worst
    row["passed"] = beyond == 0
    for name in METRICS:
        row[name] = _number(metrics.get(name))  # type: ignore[literal-required]


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
