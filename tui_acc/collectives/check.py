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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from tui_acc.collectives.bound import DEFAULT_MARGIN, Reduction, beyond_bound, element_bound
from tui_acc.collectives.rank_set import Collective, RankSet
from tui_acc.collectives.tensors import CheckFailed, goldens_of, load_slot, slots_of
from tui_acc.dumps import TensorRef
from tui_acc.dumps.sharding import reduction_named
from tui_acc.replay.dumped_call import all_to_all_arguments

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
        self._records: dict[int, dict[str, Any]] = {}  # msprobe: each rank's dump.json records

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

    # --- one collective ---------------------------------------------------------------------------

    def _compute(self, collective: Collective) -> list[RankRow]:
        size = self.ranks.size
        rows = [self._row(collective, rank) for rank in range(size)]
        inputs: list[np.ndarray | None] = [None] * size
        outputs: list[np.ndarray | None] = [None] * size
        copies = collective.kind in ("all_gather", "all_to_all")
        reduction: Reduction = "gather" if copies else "sum"
        groups: dict[int, tuple[int, ...]] = {}  # a rank's reduction group, where the dump records one
        params: list[dict[str, Any]] = [{} for _ in range(size)]  # an all-to-all's split on each rank
        for rank in range(size):
            refs = self.ranks.refs(rank, collective.token, collective.op)
            if refs is None:
                rows[rank]["error"] = self.ranks.missing(rank, collective.token)
                continue
            in_slot, out_slot = slots_of(refs, collective)
            try:
                inputs[rank] = load_slot(self.ranks, rank, refs, in_slot, "input")
                outputs[rank] = load_slot(self.ranks, rank, refs, out_slot, "output")
            except CheckFailed as exc:
                rows[rank]["error"] = str(exc)
            recorded, group, params[rank] = self._recorded(rank, refs, collective)
            if not copies and recorded is not None:
                reduction = recorded
            if group is not None:
                groups[rank] = group
        for row in rows:
            row["reduction"] = reduction
        for group in self._partition(groups):
            self._judge_group(collective, group, rows, inputs, outputs, reduction, params)
        return rows

    def _partition(self, recorded: dict[int, tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The reduction groups, disjoint: each as its first rank records it (msprobe's ProcessGroup
        ranks, ATB's rankSize), every rank in one group where nothing says otherwise."""
        everyone = tuple(range(self.ranks.size))
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

    def _judge_group(
        self,
        collective: Collective,
        group: tuple[int, ...],
        rows: list[RankRow],
        inputs: list[np.ndarray | None],
        outputs: list[np.ndarray | None],
        reduction: Reduction,
        params: list[dict[str, Any]],
    ) -> None:
        """Every rank of one reduction group against the golden of the group's inputs (``params``:
        what each rank records of its call, for an all-to-all's split)."""
        lacking = [rank for rank in group if inputs[rank] is None]
        if lacking:
            why = "; ".join(rows[r]["error"] or "" for r in lacking)
            for rank in group:
                if rows[rank]["error"] is None:
                    rows[rank]["error"] = f"no golden: the input of rank {lacking[0]} is missing ({why})"
            return
        present = [x for x in (inputs[r] for r in group) if x is not None]
        try:
            goldens, magnitude = goldens_of(present, collective, reduction, [params[r] for r in group])
        except CheckFailed as exc:
            for rank in group:
                rows[rank]["error"] = rows[rank]["error"] or str(exc)
            return
        for position, rank in enumerate(group):
            output = outputs[rank]
            if output is None:
                continue
            try:
                self._judge(rows[rank], goldens[position], magnitude[position], output, reduction, len(group))
            except CheckFailed as exc:
                rows[rank]["error"] = str(exc)

    def _row(self, collective: Collective, rank: int) -> RankRow:
        return RankRow(
            token=collective.token,
            op=collective.op,
            rank=rank,
            rank_folder=self.ranks.names[rank],
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

    def _judge(
        self,
        row: RankRow,
        golden: np.ndarray,
        magnitude: np.ndarray,
        output: np.ndarray,
        reduction: Reduction,
        ranks: int,
    ) -> None:
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
        bound = element_bound(reduction, dtype, ranks, magnitude, self.margin)
        beyond, worst = beyond_bound(golden, flat, bound)
        metrics = collective_metrics(golden.reshape(-1).astype(np.float64), flat)
        row["dtype"] = dtype
        row["numel"] = int(flat.size)
        row["beyond_bound"] = beyond
        row["worst_ratio"] = worst
        row["passed"] = beyond == 0
        for name in METRICS:
            row[name] = _number(metrics.get(name))  # type: ignore[literal-required]

    def _recorded(
        self, rank: int, refs: list[TensorRef], collective: Collective
    ) -> tuple[Reduction | None, tuple[int, ...] | None, dict[str, Any]]:
        """The reduction and the group (rank indexes) the dump records for this operator, where it does,
        and its parameters by name (ATB's op_param.json; msprobe's non-tensor arguments)."""
        index = self.ranks.indexes[rank]
        if index is None or not refs:
            return None, None, {}
        policy = index.load_policy
        if refs[0].slot.startswith(("intensor", "outtensor")):  # ATB: the node folder's op_param.json
            param = Path(refs[0].location).parent.parent / "op_param.json"
            try:
                raw = policy.read_json(param)
            except (OSError, ValueError):
                return None, None, {}
            if not isinstance(raw, dict):
                return None, None, {}
            value = raw.get("allReduceType") or raw.get("reduceType")
            named = reduction_named(str(value)) if value else None
            return named, self._block(rank, raw.get("rankSize")), raw
        records = self._records.get(rank)
        if records is None:
            try:
                dump = policy.read_json(index.data_dir / "dump.json")
                records = dump.get("data", {}) if isinstance(dump, dict) else {}
            except (OSError, ValueError):
                records = {}
            self._records[rank] = records
        entry = records.get(collective.op) if isinstance(records, dict) else None
        if not isinstance(entry, dict):
            return None, None, {}
        reduction: Reduction | None = None
        group: tuple[int, ...] | None = None
        for arg in [*(entry.get("input_args") or []), *(entry.get("input_kwargs") or {}).values()]:
            if not isinstance(arg, dict):
                continue
            if arg.get("type") == "torch.distributed.ReduceOp":
                reduction = reduction_named(str(arg.get("value", "")))
            elif arg.get("type") == "torch.ProcessGroup" and isinstance(arg.get("group_ranks"), list):
                group = self._indexes_of(arg["group_ranks"])
        return reduction, group, all_to_all_arguments(entry) if collective.kind == "all_to_all" else {}

    def _block(self, rank: int, size: object) -> tuple[int, ...] | None:
        """ATB's ``rankSize`` smaller than the run: the block of that many consecutive ranks holding
        ``rank`` (tensor-parallel groups are consecutive devices; the dump says no more)."""
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < self.ranks.size:
            return None
        if self.ranks.size % size:
            return None
        start = rank - rank % size
        return tuple(range(start, start + size))

    def _indexes_of(self, global_ranks: list[object]) -> tuple[int, ...] | None:
        """msprobe's group ranks (global ranks, as its rank{R} folders name them) as rank indexes."""
        by_global: dict[int, int] = {}
        for position, name in enumerate(self.ranks.names):
            digits = "".join(ch for ch in name if ch.isdigit())
            if digits:
                by_global[int(digits)] = position
        found = [by_global.get(r) for r in global_ranks if isinstance(r, int)]
        if not found or any(f is None for f in found):
            return None
        return tuple(f for f in found if f is not None)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
