"""``tui-acc ranks DUMP --ray ADDRESS``: the check across ranks with each rank folder read on the node
that holds it, and the same rows as a local run of the same folders.

``open_on_ray`` joins the cluster, lists on every place (a node and its path) the rank folders it
holds, numbers the ranks as a local run does (``placement.py``), has each place open its ranks and
send their names (which collectives each rank recorded at each token: no tensor), and returns a
``RayRanksCheck``: a ``RanksCheck`` whose rows are computed on the nodes (``collective_jobs.py``), a
token at a time, so that the report and the ranks screen use it as they use a local one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tui_acc.cluster.collective_jobs import CollectiveJobs
from tui_acc.cluster.connect import Connection, places_of
from tui_acc.cluster.node_worker import BeforeRead, Opened, RankCatalog
from tui_acc.cluster.placement import Layout, lay_out
from tui_acc.cluster.workers import Progress, Workers
from tui_acc.collectives.check import RankRow, RanksCheck
from tui_acc.collectives.rank_set import Collective, RankSet, merged_collectives
from tui_acc.dumps import DumpError, Format, Problem


class RemoteRankSet(RankSet):
    """The run's ranks as the head knows them: names, and what the nodes sent of each (no index here)."""

    def __init__(
        self,
        path: str,
        format: Format,
        names: list[str],
        catalogs: dict[int, RankCatalog],
        unreadable: list[Problem],
        notes: list[str],
    ) -> None:
        super().__init__(path, format, names, [None] * len(names), unreadable, notes)
        self.catalogs = catalogs
        self.found: dict[int, list[Problem]] = {}  # each rank's damaged files, as its node last said

    @property
    def problems(self) -> list[Problem]:
        """The ranks that could not be opened, then each rank's damaged files, in rank order."""
        return list(self.unreadable) + [p for rank in range(self.size) for p in self.found.get(rank, [])]

    def tokens(self) -> list[int]:
        """Every token any rank's node listed, in order."""
        return sorted({t for catalog in self.catalogs.values() for t in catalog.tokens})

    def collectives(self, token: int) -> list[Collective]:
        """The collectives at ``token``, merged across ranks as a local run merges them."""
        per_rank = [
            self.catalogs[r].tokens.get(token) if r in self.catalogs else None for r in range(self.size)
        ]
        return merged_collectives(token, per_rank)


class RayRanksCheck(RanksCheck):
    """The check of a run whose rank folders are spread over a Ray cluster's nodes."""

    def __init__(self, ranks: RemoteRankSet, margin: float, workers: Workers, layout: Layout, address: str):
        super().__init__(ranks, margin)
        self.remote = ranks
        self.workers = workers
        self.layout = layout
        self.address = address
        self._jobs = CollectiveJobs(workers, layout, margin)
        self._computing = threading.Lock()
        self._finished = False

    def _compute(self, collective: Collective) -> list[RankRow]:
        """Every collective of ``collective``'s token not yet checked, at once (they are pipelined
        across the nodes); this one's rows."""
        with self._computing:
            key = (collective.token, collective.op)
            if key in self._rows:
                return self._rows[key]
            waiting = [c for c in self.collectives(collective.token) if (c.token, c.op) not in self._rows]
            if collective not in waiting:
                waiting.append(collective)
            for done, rows in self._jobs.rows(waiting).items():
                self._rows.setdefault(done, rows)
            if len(self._rows) >= sum(len(self.collectives(t)) for t in self.tokens()):
                self.finish()  # the last token (the screen never asks for all_rows)
            return self._rows[key]

    def all_rows(self, should_stop: Callable[[], bool] | None = None) -> list[RankRow]:
        """Every token's rows; then the nodes' damaged files are asked for, and each node says it is done."""
        rows = super().all_rows(should_stop)
        self.finish()
        return rows

    def finish(self) -> None:
        """The nodes' problems fetched, each node's last line said (once)."""
        if self._finished:
            return
        self._finished = True
        self.remote.found = self.workers.problems()
        for state in self.workers.states:
            if state.state == "working":
                state.state, state.ended = "done", time.monotonic()
                if self.workers.progress is not None:
                    self.workers.progress(state.line())
        if self.workers.progress is not None:
            self.workers.progress(self.workers.traffic.line())

    def not_compared(self) -> list[dict[str, Any]]:
        """The ranks no node read to the end: absent from every node, or their node lost."""
        named = [
            {"rank": rank, "rank_folder": self.layout.names[rank], "node": None, "reason": why}
            for rank, why in sorted(self.layout.absent.items())
        ]
        for rank, place in sorted(self.layout.reader.items()):
            if place in self.workers.lost:
                state = self.workers.states[place]
                named.append(
                    {
                        "rank": rank,
                        "rank_folder": self.layout.names[rank],
                        "node": state.label,
                        "reason": state.reason,
                    }
                )
        return named

    def said(self) -> dict[str, Any]:
        """``--json``'s ``ray``: the address, each node's state, the ranks not compared, the bytes."""
        return {
            "address": self.address,
            "nodes": [state.said() for state in self.workers.states],
            "not_compared": self.not_compared(),
            "bytes": self.workers.traffic.said(),
        }

    def status(self) -> str:
        """One line for the screen: each node's ranks and state."""
        return "nodes: " + " · ".join(s.brief() for s in self.workers.states if s.state != "empty")

    def close(self) -> None:
        """End the workers and leave the cluster (where this run joined it)."""
        self.workers.close()
        self.workers.connection.close()


def open_on_ray(
    arguments: list[str],
    address: str | None,
    margin: float,
    follow_links: bool = False,
    progress: Progress | None = None,
    before_read: BeforeRead | None = None,
) -> RayRanksCheck:
    """Join the cluster at ``address`` and open the run whose rank folders are at ``arguments`` (one
    path on every node, or HOST:PATH pairs); ``progress`` gets a line as each node finishes or is
    lost. Raises DumpError where no node holds two ranks between them, UsageError for a HOST no alive
    node is, ClusterError without a cluster, RayMissing without Ray."""
    connection = Connection(address)
    workers: Workers | None = None
    try:
        places = places_of(arguments, connection.alive_nodes())
        workers = Workers(connection, places, follow_links, before_read, progress)
        layout = laid_out(workers, arguments)
        own = {
            p: {r: layout.names[r] for r in layout.ranks_of(p)} for p in sorted(set(layout.reader.values()))
        }
        opened = workers.open(layout.names, own)
        for place, held in own.items():
            workers.states[place].ranks = list(held.values())
        return RayRanksCheck(
            _rank_set(arguments, layout, opened), margin, workers, layout, connection.address
        )
    except BaseException:
        if workers is not None:
            workers.close()
        connection.close()
        raise


def laid_out(workers: Workers, arguments: list[str]) -> Layout:
    """Every place's listing merged into the run's ranks; a place with a different tui-acc holds none."""
    from tui_acc import __version__

    listings = workers.listings()
    found: list[list[str]] = []
    for place, listing in enumerate(listings):
        state = workers.states[place]
        if listing is not None and listing.version != __version__:
            state.state, state.reason = "empty", f"runs tui-acc {listing.version}, the head {__version__}"
        elif listing is not None and not listing.names:
            state.state, state.reason = "empty", listing.error
        found.append(listing.names if listing is not None and state.state == "listing" else [])
        if state.state == "empty" and workers.progress is not None:
            workers.progress(state.line())
    layout = lay_out(found, [p.label for p in workers.places])
    if len(layout.names) < 2:
        said = "; ".join(
            f"{s.label}: {s.reason or ', '.join(f) or 'nothing'}"
            for s, f in zip(workers.states, found, strict=True)
        )
        raise DumpError(
            f"{' '.join(arguments)}: the cluster's nodes hold {len(layout.names)} rank folder(s) between "
            f"them ({said}); the check across ranks needs two or more"
        )
    return layout


def _rank_set(arguments: list[str], layout: Layout, opened: dict[int, Opened]) -> RemoteRankSet:
    """The head's RankSet: the catalogs, the ranks no node could open, rank 0's notes."""
    if not opened:
        raise DumpError(f"{' '.join(arguments)}: every node holding rank folders was lost while opening them")
    formats = {o.format for o in opened.values()}
    if len(formats) > 1:
        raise DumpError(
            f"{' '.join(arguments)}: the nodes hold dumps of different formats ({sorted(formats)})"
        )
    catalogs = {c.rank: c for o in opened.values() for c in o.catalogs}
    unreadable = sorted(
        (p for o in opened.values() for p in o.unreadable), key=lambda p: layout.names.index(p.path)
    )
    zero = opened.get(layout.reader.get(0, -1))
    notes = (list(zero.notes) if zero is not None else []) + layout.notes
    return RemoteRankSet(" ".join(arguments), formats.pop(), layout.names, catalogs, unreadable, notes)
