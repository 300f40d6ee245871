"""``tui-acc report GOLDEN TEST --ray ADDRESS`` (and the view, ``tui-acc GOLDEN TEST --ray``): a sharded
test whose rank folders are spread over a Ray cluster's nodes, against a one-device golden on the
head, with the same report as a local ``--gather`` of the same folders.

``open_pair_on_ray`` joins the cluster, lists each place's rank folders and numbers the ranks as
``report --ranks --ray`` does (``ray_check.laid_out``), has each rank's node open its index (names,
no tensor) and gathers them here as a local run does (``rank_merging.merge_ranks``). The comparison is
then a local one in all but where its test files are read: ``pair_run.py``'s ``RayPairReader``, the
engine's reader (``CompareOptions.test_side``), computes each row on the node holding the test's
files; what the head reads itself (a replay's inputs, the operator's record) comes from that node
through the test's load policy (``node_files.ReadThroughNodes``), once per file. No file of another
node is opened by its path at the head (docs/cluster.md).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui_acc.cluster.connect import Connection, places_of
from tui_acc.cluster.node_files import ReadThroughNodes
from tui_acc.cluster.pair_run import PairRun, PairWorkers, RayPairReader
from tui_acc.cluster.pair_worker import BeforeCompare
from tui_acc.cluster.ray_check import laid_out
from tui_acc.cluster.workers import CallFailed, Progress, Workers
from tui_acc.dumps import DumpError, DumpIndex
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.metrics.pair_reading import PairReader
from tui_acc.pairing import Pairing
from tui_acc.rank_merging import merge_ranks
from tui_acc.session import CompareOptions, Comparison, open_comparison


@dataclass
class RaySide:
    """The test side of a pair read on the cluster (``session.TestSide``)."""

    gathered: DumpIndex
    run: PairRun

    def index(self) -> DumpIndex:
        """The ranks' indexes, opened on their nodes, gathered here."""
        return self.gathered

    def reader(self, pairing: Pairing) -> PairReader:
        """The engine's reader: each row computed on the node holding the test's files."""
        return RayPairReader(pairing, self.run)


@dataclass
class RayPair:
    """A comparison whose test is on the cluster, and its run (nodes, bytes); ``close`` leaves."""

    comparison: Comparison
    run: PairRun
    address: str
    started: float = field(default_factory=time.monotonic)

    def finish(self) -> None:
        """Each node that computed rows said done on stderr, then the bytes."""
        self.run.finish(self.started)
        if self.run.workers.progress is not None:
            self.run.workers.progress(self.run.workers.traffic.line())

    def said(self) -> dict[str, Any]:
        """``--json``'s ``ray``: the address, each node, the bytes, and the ranks whose files were not
        compared from when their node was lost (each such row is in the report's ``errors``)."""
        said = {"address": self.address, **self.run.said()}
        said["not_compared"] = [
            {"node": state.label, "ranks": list(state.ranks), "reason": state.reason}
            for place, state in enumerate(self.run.workers.states)
            if place in self.run.workers.lost
        ]
        return said

    def close(self) -> None:
        """End the workers, leave the cluster (where this run joined it) and remove the files fetched."""
        self.run.workers.close()
        self.run.workers.connection.close()
        self.run.files.close()


def open_pair_on_ray(
    golden: str | Path,
    arguments: list[str],
    address: str | None,
    options: CompareOptions | None = None,
    progress: Progress | None = None,
    before_compare: BeforeCompare | None = None,
) -> RayPair:
    """Join the cluster at ``address``; ``golden`` (a path here) against the test whose rank folders
    are at ``arguments`` (one path on every node, or HOST:PATH pairs). ``progress`` gets a line as a
    node is lost, holds nothing, or (``RayPair.finish``) is done. Raises DumpError where the nodes
    hold fewer than two ranks or lack one, UsageError for a HOST no alive node is, ClusterError
    without a cluster, RayMissing without Ray."""
    options = options or CompareOptions()
    connection = Connection(address)
    workers: Workers | None = None
    run: PairRun | None = None
    try:
        places = places_of(arguments, connection.alive_nodes())
        workers = PairWorkers(connection, places, options.follow_links, before_compare, progress)  # type: ignore[arg-type]
        layout = laid_out(workers, arguments)
        if layout.absent:
            raise DumpError("; ".join(layout.absent[r] for r in sorted(layout.absent)))
        indexes: list[DumpIndex] = []
        owners: dict[Path, int] = {}
        calls = {
            rank: workers.actors[place].rank_index.remote(layout.names[rank])
            for rank, place in sorted(layout.reader.items())
        }
        for rank, call in calls.items():
            place = layout.reader[rank]
            workers.states[place].ranks.append(layout.names[rank])
            workers.states[place].state = "working"
            try:
                index: DumpIndex = workers.result(place, call)
            except CallFailed as exc:
                raise DumpError(f"rank {rank} ({layout.names[rank]}) not opened: {exc}") from exc
            # numbered as a local run numbers it: rank r of the run's ranks, not of this node's
            indexes.append(replace(index, ranks=list(layout.names), rank=rank))
            owners[Path(index.data_dir)] = place
        label = " ".join(arguments)
        run = PairRun(workers, owners)
        test = merge_ranks(label, indexes[0], indexes[1:], unasked=False)
        test = replace(test, policy=ReadThroughNodes(_policy_over(indexes).root, files=run.files))
        side = RaySide(test, run)
        # gathered, as --gather is: a golden of several ranks is refused there (compare rank to rank)
        cmp = open_comparison(golden, label, replace(options, test_side=side, gather=True, cache=False))
        return RayPair(cmp, run, connection.address)
    except BaseException:
        if workers is not None:
            workers.close()
        connection.close()
        if run is not None:
            run.files.close()
        raise


def _policy_over(indexes: list[DumpIndex]) -> LoadPolicy:
    """The gathered test's load policy at the head, for the files of a rank folder on the head's own
    node (those of the others are read through their nodes): the one root every rank's dump shares,
    or the folder the roots have in common, never the file system's root (rank 0's then)."""
    roots = [index.load_policy.root for index in indexes]
    if any(root is None for root in roots):
        return LoadPolicy.anywhere()  # --follow-links
    common = Path(os.path.commonpath([str(root) for root in roots if root is not None]))
    return LoadPolicy(common) if common.parent != common else indexes[0].load_policy
