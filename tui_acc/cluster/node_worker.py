"""The worker a Ray run places on each node (pinned there: the rank folders are on its disk). It lists
the rank folders the node holds, opens those the head gives it, and does every step of the check that
needs their files: reading each rank's tensors, adding its ranks' inputs to a group's running
reduction, judging its ranks' outputs against the golden. Only summaries, running reductions and rows
leave it; the tensors it read stay in its memory until the head drops them.

A plain class: ``ray_check.py`` makes it a Ray actor (``ray.remote(NodeWorker)``), so this module does
not import Ray, and a test can run it in one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tui_acc.collectives.bound import Reduction
from tui_acc.collectives.check import RankRow, judge_ranks, new_rows, refuse
from tui_acc.collectives.partial_sums import RunningInputs, complete, extend
from tui_acc.collectives.rank_reading import RankReader, RankReading
from tui_acc.collectives.rank_set import Collective, Kind, RankSet
from tui_acc.collectives.tensors import CheckFailed
from tui_acc.dumps import DumpError, DumpIndex, Format, Problem, open_dump

# run on the node before it reads a collective, given the node's id: tests block a node there
BeforeRead = Callable[[str, Collective], None]


@dataclass
class Listing:
    """What one node holds at its path: the rank folders (in rank order), or why none."""

    version: str  # the node's tui-acc: every node must run the head's
    names: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class RankCatalog:
    """One rank's names, no tensor: its folder, and its collectives at each token in execution order."""

    rank: int
    data_dir: str
    tokens: dict[int, list[tuple[str, Kind]] | None]


@dataclass
class Opened:
    """The ranks a node opened: their catalogs, the format, the notes of rank 0 where it holds it,
    and the ranks it could not open."""

    format: Format
    catalogs: list[RankCatalog]
    notes: list[str]
    unreadable: list[Problem]


class NodeWorker:
    """One node's worker: the folder at ``path`` on this node, the ranks of it the head assigns."""

    def __init__(
        self, node_id: str, path: str, follow_links: bool = False, before_read: BeforeRead | None = None
    ) -> None:
        self.node_id = node_id
        self.path = path
        self.follow_links = follow_links
        self.before_read = before_read
        self._first: DumpIndex | None = None  # rank 0 of this path, opened while listing
        self._local: list[str] = []  # the rank folders here, in rank order
        self._ranks: RankSet | None = None
        self._reader: RankReader | None = None
        self._readings: dict[int, dict[int, RankReading]] = {}  # per collective in flight, per rank

    def listing(self) -> Listing:
        """The rank folders this node holds at its path (none: why)."""
        from tui_acc import __version__

        try:
            self._first = open_dump(self.path, rank=0, follow_links=self.follow_links)
        except DumpError as exc:
            return Listing(__version__, error=str(exc))
        self._local = list(self._first.ranks) or [self._first.data_dir.name]
        return Listing(__version__, list(self._local))

    def open(self, names: list[str], own: dict[int, str]) -> Opened:
        """Open the ranks the head gives this node (``own``: rank number -> folder name here) as ranks
        of the whole run (``names``, every rank's folder in rank order)."""
        indexes: list[DumpIndex | None] = [None] * len(names)
        unreadable: list[Problem] = []
        for rank, name in sorted(own.items()):
            local = self._local.index(name)
            try:
                if local == 0 and self._first is not None:
                    indexes[rank] = self._first
                else:
                    indexes[rank] = open_dump(self.path, rank=local, follow_links=self.follow_links)
            except DumpError as exc:
                unreadable.append(Problem(names[rank], f"rank {rank} not read: {exc}"))
        assert self._first is not None  # the head opens only nodes whose listing found ranks
        self._ranks = RankSet(self.path, self._first.format, names, indexes, unreadable)
        self._reader = RankReader(self._ranks)
        catalogs = [self._catalog(rank, index) for rank, index in enumerate(indexes) if index is not None]
        first = indexes[0]
        notes = [] if first is None else [n for n in first.notes if "ranks" not in n or "holds" not in n]
        return Opened(self._first.format, catalogs, notes, unreadable)

    def _catalog(self, rank: int, index: DumpIndex) -> RankCatalog:
        assert self._ranks is not None
        tokens = {token: self._ranks.rank_collectives(rank, token) for token in index.tokens}
        return RankCatalog(rank, str(index.data_dir), tokens)

    def read(self, cid: int, collective: Collective, ranks: list[int]) -> list[RankReading]:
        """Read ``ranks``' parts of ``collective``; their tensors stay here under ``cid``, their
        summaries go back."""
        if self.before_read is not None:
            self.before_read(self.node_id, collective)
        assert self._reader is not None
        readings = {rank: self._reader.read(rank, collective) for rank in ranks}
        self._readings[cid] = readings
        return [reading.summary() for reading in readings.values()]

    def extend(
        self, cid: int, state: RunningInputs | None, ranks: list[int], reduction: Reduction, fold: bool
    ) -> tuple[RunningInputs, int]:
        """A group's running inputs with ``ranks``' inputs added (rank order), and its size in bytes."""
        readings = self._readings[cid]
        inputs = [readings[rank].input for rank in ranks]
        grown = extend(state, [x for x in inputs if x is not None], reduction, fold)
        return grown, grown.nbytes

    def judge(
        self,
        cid: int,
        collective: Collective,
        group: tuple[int, ...],
        reduction: Reduction,
        params: list[dict[str, Any]],
        margin: float,
        *pieces: RunningInputs,
    ) -> list[RankRow]:
        """This node's ranks of ``group`` judged against the golden of the group's inputs (``pieces``:
        one running reduction of them all, or every run of ranks' inputs as read, in rank order)."""
        assert self._ranks is not None
        readings = self._readings[cid]
        own = [rank for rank in group if rank in readings]
        every = [readings.get(rank) or RankReading(rank) for rank in range(self._ranks.size)]
        rows = new_rows(collective, every, self._ranks.names)
        for rank in own:
            rows[rank]["reduction"] = reduction
        state = RunningInputs(
            reduction,
            pieces[0].folded,
            pieces[0].total,
            pieces[0].magnitude,
            [x for piece in pieces for x in piece.pending],
        )
        try:
            goldens, magnitude = complete(state, collective, params, len(group))
        except CheckFailed as exc:
            refuse(own, rows, exc)
        else:
            judge_ranks(group, own, rows, every, goldens, magnitude, reduction, margin)
        return [rows[rank] for rank in own]

    def drop(self, cid: int) -> None:
        """Forget ``cid``'s tensors: its rows are made."""
        self._readings.pop(cid, None)

    def problems(self) -> dict[int, list[Problem]]:
        """Each opened rank's damaged or unexpected files found so far (ATB's token folders are read
        when first checked)."""
        if self._ranks is None:
            return {}
        return {
            rank: list(index.problems) for rank, index in enumerate(self._ranks.indexes) if index is not None
        }
