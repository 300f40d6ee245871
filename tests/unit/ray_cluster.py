"""What the Ray tests share (test_ranks_on_ray.py, test_pair_on_ray.py): a cluster on this machine whose
head holds nothing, nodes named by the test, and a node removed once its worker reaches a gate the
test holds (two FIFOs: no sleep, no timing)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


@contextlib.contextmanager
def cluster_of(names: Iterable[str]) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A head that holds no rank folder (the driver's node) and a node of one CPU per name."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = {name: made.add_node(num_cpus=1) for name in names}
        ray.init(address=made.address, log_to_driver=False, include_dashboard=False)
        made.wait_for_nodes()
        yield made, nodes
    finally:
        ray.shutdown()
        made.shutdown()


def ours(text: str) -> list[str]:
    """The lines of captured output that are not Ray's own: a driver prints what the cluster tells it
    whenever it arrives (a node removed by an earlier test marked dead: ``(raylet) The node with
    node id ... has been marked dead``, its reasons on lines that start with a tab)."""
    return [line for line in text.splitlines() if "(raylet)" not in line and not line.startswith("\t")]


def node_places(nodes: dict[str, Any], roots: dict[str, Path]) -> list[str]:
    """``NODE_ID:PATH`` for each node's own folder."""
    return [f"{nodes[name].node_id}:{root}" for name, root in roots.items()]


def hold_here(reached: str, release: str) -> None:
    """Said by the victim's worker at its gate: ``reached`` written (the test removes the node then),
    then a wait on ``release``, never written: the node goes first."""
    with open(reached, "w") as said:  # noqa: PTH123 -- a FIFO: blocks until the test reads
        said.write("reached\n")
    with open(release) as wait:  # noqa: PTH123 -- never written: the node goes first
        wait.read()


@contextlib.contextmanager
def removed_at_gate(made: Any, victim: Any, folder: Path) -> Iterator[tuple[str, str]]:
    """The FIFOs ``(reached, release)`` a gate hands to ``hold_here``; ``victim`` is removed from
    ``made`` once its worker reaches it. On leaving, whatever waits is let go."""
    reached, release = folder / "reached", folder / "release"
    os.mkfifo(reached)
    os.mkfifo(release)

    def remove_once_reached() -> None:
        with reached.open() as gate:  # returns once the victim's worker opens it to write
            if gate.read():
                made.remove_node(victim, allow_graceful=False)

    killer = threading.Thread(target=remove_once_reached)
    killer.start()
    try:
        yield str(reached), str(release)
    finally:
        _unblock(reached)  # the gate never reached (a failure): the killer reads EOF and ends
        killer.join()
        _unblock(release)  # a worker still waiting there, should its node outlive the removal


def _unblock(fifo: Path) -> None:
    """Open ``fifo`` for writing and close it, where someone is waiting to read it (else nothing)."""
    with contextlib.suppress(OSError):  # ENXIO: no reader waiting
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
