"""A token's collectives checked on the nodes, a few at a time, in the steps of ``collectives/check.py``:

1. every place reads its ranks' parts (their summaries come back; the tensors stay on the node);
2. the head decides the reduction and the groups from the summaries (``check.decide``), as a local run;
3. each group's inputs travel from node to node in rank order, each node adding its ranks' inputs
   to the running reduction (``partial_sums``), and the last node's result goes to every node that
   holds ranks of the group; where there is nothing to sum (all-gather, all-to-all) each node's inputs
   go to the others as read;
4. each node judges its own ranks' outputs against that golden, and sends back their rows.

A node lost on the way: its ranks' rows say "not compared" and why, the rows of its groups' other
ranks say their golden lacks its input, every other row stands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tui_acc.cluster.placement import Layout
from tui_acc.cluster.workers import CallFailed, Workers
from tui_acc.collectives.bound import Reduction
from tui_acc.collectives.check import RankRow, decide, new_rows, refuse_lacking
from tui_acc.collectives.partial_sums import foldable
from tui_acc.collectives.rank_reading import RankReading
from tui_acc.collectives.rank_set import Collective

WINDOW = 4  # collectives in flight at once: each holds its ranks' tensors in the nodes' memory


@dataclass
class Job:
    """One collective on its way through the steps."""

    cid: int
    collective: Collective
    reads: dict[int, Any] = field(default_factory=dict)  # place -> its read call
    readings: list[RankReading] = field(default_factory=list)
    rows: list[RankRow] = field(default_factory=list)
    judges: list[tuple[int, tuple[int, ...], Any]] = field(default_factory=list)  # place, group, call
    moves: list[tuple[str, Any]] = field(default_factory=list)  # (what, size reported) crossing nodes


class CollectiveJobs:
    """Runs collectives on ``workers``, the ranks laid out as ``layout`` says."""

    def __init__(self, workers: Workers, layout: Layout, margin: float) -> None:
        self.workers = workers
        self.layout = layout
        self.margin = margin
        self._next = 0

    def rows(self, collectives: list[Collective]) -> dict[tuple[int, str], list[RankRow]]:
        """Every rank's row of each collective, a window of them in flight at once."""
        done: dict[tuple[int, str], list[RankRow]] = {}
        for start in range(0, len(collectives), WINDOW):
            jobs = [self._read(c) for c in collectives[start : start + WINDOW]]
            for job in jobs:
                self._summaries(job)
            for job in jobs:
                self._plan(job)
            for job in jobs:
                self._judged(job)
                done[(job.collective.token, job.collective.op)] = job.rows
        return done

    # --- 1: read ------------------------------------------------------------------------------------

    def _read(self, collective: Collective) -> Job:
        self._next += 1
        job = Job(self._next, collective)
        for place in self.workers.alive(sorted(set(self.layout.reader.values()))):
            ranks = self.layout.ranks_of(place)
            job.reads[place] = self.workers.actors[place].read.remote(job.cid, collective, ranks)
        return job

    def _summaries(self, job: Job) -> None:
        readings: dict[int, RankReading] = {}
        for place, ref in job.reads.items():
            try:
                summaries: list[RankReading] = self.workers.result(place, ref)
            except CallFailed as exc:
                for rank in self.layout.ranks_of(place):
                    readings[rank] = RankReading(rank, error=self._not_compared(rank, str(exc)))
                continue
            self.workers.states[place].collectives += 1
            for reading in summaries:
                readings[reading.rank] = reading
                self.workers.traffic.read += reading.nbytes
        job.readings = [readings.get(rank) or RankReading(rank, self._absent(rank)) for rank in self._every()]

    # --- 2, 3: decide, then send the inputs on their way ----------------------------------------------

    def _plan(self, job: Job) -> None:
        collective, readings = job.collective, job.readings
        job.rows = new_rows(collective, readings, self.layout.names)
        reduction, groups = decide(collective, readings, len(self.layout.names))
        for row in job.rows:
            row["reduction"] = reduction
        for group in groups:
            if refuse_lacking(group, job.rows, readings):
                continue
            self._send(job, group, reduction)
        for place in self.workers.alive(list(job.reads)):
            self.workers.actors[place].drop.remote(job.cid)

    def _send(self, job: Job, group: tuple[int, ...], reduction: Reduction) -> None:
        """The group's inputs on their way to every node holding its ranks, then each node's judging."""
        actors, node = self.workers.actors, self._node
        runs = self._runs(group)
        fold = foldable(job.collective, reduction, [job.readings[r].shape for r in group])
        pieces: list[tuple[Any, int, Any]] = []  # what goes to the judges: (call, place, size)
        if fold:  # one running reduction, node after node in rank order
            state: Any = None
            for place, ranks in runs:
                made, size = (
                    actors[place].extend.options(num_returns=2).remote(job.cid, state, ranks, reduction, True)
                )
                if pieces and node(pieces[0][1]) != node(place):
                    job.moves.append(("partial_sums", pieces[0][2]))
                state, pieces = made, [(made, place, size)]
            what = "goldens"
        else:  # nothing to sum: each run's inputs as read, to every node
            for place, ranks in runs:
                made, size = (
                    actors[place].extend.options(num_returns=2).remote(job.cid, None, ranks, reduction, False)
                )
                pieces.append((made, place, size))
            what = "inputs"
        params = [job.readings[r].params for r in group]
        for place in dict.fromkeys(place for place, _ in runs):
            call = actors[place].judge.remote(
                job.cid, job.collective, group, reduction, params, self.margin, *(p[0] for p in pieces)
            )
            job.judges.append((place, group, call))
            job.moves += [(what, size) for _, made_on, size in pieces if node(made_on) != node(place)]

    def _runs(self, group: tuple[int, ...]) -> list[tuple[int, list[int]]]:
        """The group's ranks cut into runs read on one place, in rank order."""
        runs: list[tuple[int, list[int]]] = []
        for rank in group:
            place = self.layout.reader[rank]
            if runs and runs[-1][0] == place:
                runs[-1][1].append(rank)
            else:
                runs.append((place, [rank]))
        return runs

    # --- 4: the rows ------------------------------------------------------------------------------

    def _judged(self, job: Job) -> None:
        for place, group, call in job.judges:
            try:
                rows: list[RankRow] = self.workers.result(place, call)
            except CallFailed as exc:
                self._unjudged(job, place, group, str(exc))
                continue
            for row in rows:
                job.rows[row["rank"]] = row
        for what, size in job.moves:
            self.workers.traffic.add(what, self.workers.bytes_of(size))

    def _unjudged(self, job: Job, place: int, group: tuple[int, ...], why: str) -> None:
        """``place``'s ranks of ``group`` when its judging failed: not compared where their node is
        lost, no golden where another rank's node is, else the failure itself."""
        lost = [rank for rank in group if self.layout.reader.get(rank) in self.workers.lost]
        for rank in (r for r in group if self.layout.reader.get(r) == place):
            if job.rows[rank]["error"] is not None:
                continue
            if rank in lost:
                error = self._not_compared(rank, self.workers.lost[place])
            elif lost:
                missing = "; ".join(
                    self._not_compared(r, self.workers.lost[self.layout.reader[r]]) for r in lost
                )
                error = f"no golden: the input of rank {lost[0]} is missing ({missing})"
            else:
                error = f"rank {rank} ({self.layout.names[rank]}) not compared: {why}"
            job.rows[rank]["error"] = error

    # --- names ------------------------------------------------------------------------------------

    def _every(self) -> range:
        return range(len(self.layout.names))

    def _node(self, place: int) -> str:
        return self.workers.places[place].node.node_id

    def _not_compared(self, rank: int, why: str) -> str:
        place = self.layout.reader[rank]
        label = self.workers.places[place].node.label
        return f"rank {rank} ({self.layout.names[rank]}) not compared: node {label}: {why}"

    def _absent(self, rank: int) -> str:
        """Why no node reads ``rank``: no node holds it, or the node that did was lost."""
        if rank in self.layout.absent:
            return self.layout.absent[rank]
        place = self.layout.reader[rank]
        return self._not_compared(rank, self.workers.lost.get(place, "not read"))
