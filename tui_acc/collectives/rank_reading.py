"""One rank's part of one collective: its input and output read from its dump, and what its dump
records of the call (the reduction, the group, an all-to-all's split).

This is the step that needs the rank's files: ``check.py`` runs it for every rank in one process;
a Ray run (``tui_acc/cluster``) runs it on the host that holds the rank folder and sends only the
reading's ``summary()`` (no tensors) to the head, which decides the groups from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui_acc.collectives.bound import Reduction
from tui_acc.collectives.rank_set import Collective, RankSet
from tui_acc.collectives.tensors import CheckFailed, load_slot, slots_of
from tui_acc.dumps import TensorRef
from tui_acc.dumps.sharding import reduction_named
from tui_acc.replay.dumped_call import all_to_all_arguments

if TYPE_CHECKING:
    import numpy as np


@dataclass
class RankReading:
    """What one rank holds of one collective: its tensors where they were read, or why not."""

    rank: int
    error: str | None = None  # why the rank's row cannot be judged (a missing record, a damaged file)
    input: np.ndarray | None = None
    output: np.ndarray | None = None
    shape: tuple[int, ...] | None = None  # the input's (None: no input): the head decides from it
    nbytes: int = 0  # the tensors read (input and output), as stored
    has_output: bool = False
    reduction: Reduction | None = None  # as the dump records it
    group: tuple[int, ...] | None = None  # rank indexes, as the dump records them
    params: dict[str, Any] = field(default_factory=dict)  # an all-to-all's split

    @property
    def has_input(self) -> bool:
        """Whether the input was read."""
        return self.shape is not None

    def summary(self) -> RankReading:
        """The reading without its tensors: what crosses to the head of a Ray run."""
        return replace(self, input=None, output=None)


class RankReader:
    """Reads ranks' parts of collectives from a RankSet (every rank of a run, or on a host of a Ray
    run the ranks it holds: ``names`` and the rank numbers are the whole run's either way)."""

    def __init__(self, ranks: RankSet) -> None:
        self.ranks = ranks
        self._records: dict[int, dict[str, Any]] = {}  # msprobe: each rank's dump.json records

    def read(self, rank: int, collective: Collective) -> RankReading:
        """Rank ``rank``'s input and output of ``collective`` and what its dump records of the call."""
        reading = RankReading(rank)
        refs = self.ranks.refs(rank, collective.token, collective.op)
        if refs is None:
            reading.error = self.ranks.missing(rank, collective.token)
            return reading
        in_slot, out_slot = slots_of(refs, collective)
        try:
            reading.input = load_slot(self.ranks, rank, refs, in_slot, "input")
            reading.shape, reading.nbytes = tuple(reading.input.shape), int(reading.input.nbytes)
            reading.output = load_slot(self.ranks, rank, refs, out_slot, "output")
            reading.nbytes += int(reading.output.nbytes)
            reading.has_output = True
        except CheckFailed as exc:
            reading.error = str(exc)
        reading.reduction, reading.group, reading.params = self._recorded(rank, refs, collective)
        return reading

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
