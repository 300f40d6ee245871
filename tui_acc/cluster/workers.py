"""The head's side of the nodes' workers: one Ray actor per place (a node and the path there), pinned
to its node (hard node affinity: the rank folders are on that node's disk), and how a failed call is
read: the node or its worker lost (its ranks are then not compared, named with the reason), or one
call that failed on a worker still alive.
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Callable
from typing import Any

from tui_acc.cluster.connect import Connection, Place, first_line
from tui_acc.cluster.node_worker import BeforeRead, Listing, NodeWorker, Opened
from tui_acc.cluster.traffic import PlaceState, Traffic
from tui_acc.dumps import Problem

Progress = Callable[[str], None]  # a line for stderr


class CallFailed(Exception):
    """One call to a worker that failed while its worker lives on (a bug, a MemoryError it raised)."""


class Workers:
    """Every place's worker, its state, the bytes that crossed between nodes, the places lost."""

    worker_class: type[NodeWorker] = NodeWorker  # the pair's run places a PairWorker (pair_worker.py)

    def __init__(
        self,
        connection: Connection,
        places: list[Place],
        follow_links: bool,
        before_read: BeforeRead | None = None,
        progress: Progress | None = None,
    ) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = connection.ray
        self.connection = connection
        self.places = places
        self.progress = progress
        self.traffic = Traffic()
        self.states = [PlaceState(p.label, p.node.node_id, p.path) for p in places]
        self.lost: dict[int, str] = {}  # place -> why it was lost
        # no CPU reserved: a worker mostly reads files, and a node busy with other Ray work must still
        # take it (a reservation would wait for a free CPU, for ever on a full node)
        remote = self.ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(self.worker_class)
        self.actors = [
            remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(place.node.node_id, soft=False)
            ).remote(place.node.node_id, place.path, follow_links, before_read)
            for place in places
        ]
        self._place_of_actor = {actor._actor_id.hex(): i for i, actor in enumerate(self.actors)}

    # --- setting up -------------------------------------------------------------------------------

    def listings(self) -> list[Listing | None]:
        """What each place holds (None: lost while listing)."""
        refs = [actor.listing.remote() for actor in self.actors]
        found: list[Listing | None] = []
        for place, ref in enumerate(refs):
            try:
                found.append(self.result(place, ref))
            except CallFailed as exc:
                self.lose(place, f"listing failed: {exc}")
                found.append(None)
        return found

    def open(self, names: list[str], own: dict[int, dict[int, str]]) -> dict[int, Opened]:
        """Each place with ranks opens them (``own[place]``: rank -> folder name); lost ones are left out."""
        refs = {place: self.actors[place].open.remote(names, ranks) for place, ranks in own.items()}
        opened: dict[int, Opened] = {}
        for place, ref in refs.items():
            try:
                opened[place] = self.result(place, ref)
            except CallFailed as exc:
                self.lose(place, f"opening its ranks failed: {exc}")
        for place in opened:
            self.states[place].state = "working"
        return opened

    def problems(self) -> dict[int, list[Problem]]:
        """Every alive place's ranks' damaged files found so far, by rank."""
        refs = {p: self.actors[p].problems.remote() for p in self.alive(list(range(len(self.places))))}
        found: dict[int, list[Problem]] = {}
        for place, ref in refs.items():
            try:
                found.update(self.result(place, ref))
            except CallFailed:
                continue  # its files' problems are not known; its ranks' rows say what was compared
        return found

    # --- calls and failures ---------------------------------------------------------------------------

    def alive(self, places: list[int]) -> list[int]:
        """Those of ``places`` not lost."""
        return [p for p in places if p not in self.lost]

    def result(self, place: int, ref: Any) -> Any:
        """A call's result, counted as bytes that crossed where its worker is on another node than the
        head. CallFailed where it failed: the place marked lost first where its worker or node died."""
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            raise CallFailed(self.failure(place, exc)) from exc
        if self.places[place].node.node_id != self.connection.head:
            self.traffic.add("results", len(pickle.dumps(value, protocol=5)))
        return value

    def bytes_of(self, ref: Any) -> int:
        """The size a worker reported of something it made (0 where it was never made)."""
        try:
            return int(self.ray.get(ref))
        except self.ray.exceptions.RayError:
            return 0

    def failure(self, place: int, exc: BaseException) -> str:
        """Why a call to ``place`` failed. A dead worker (the error names its actor: the one called, or
        the one that made what the call was given) or a node no longer alive marks its place lost."""
        errors = self.ray.exceptions
        if isinstance(exc, errors.RayActorError):
            dead = self._place_of_actor.get(str(getattr(exc, "actor_id", "") or ""), place)
            self.lose(dead, _reason(exc))
            return self.lost[dead]
        if isinstance(exc, errors.RayTaskError):  # the worker raised: it lives on
            cause = getattr(exc, "cause", None) or exc
            return f"{type(cause).__name__} on node {self.places[place].node.label}: {first_line(cause)}"
        alive = {node.node_id for node in self.connection.alive_nodes()}  # an object lost with its node
        for other, where in enumerate(self.places):
            if where.node.node_id not in alive:
                self.lose(other, f"its node is no longer alive ({first_line(exc)})")
        return self.lost.get(place, first_line(exc))

    def lose(self, place: int, reason: str) -> None:
        """Mark ``place`` lost (once): its ranks are not compared from here on; stderr is told."""
        if place in self.lost:
            return
        self.lost[place] = reason
        state = self.states[place]
        state.state, state.reason, state.ended = "lost", reason, time.monotonic()
        if self.progress is not None:
            self.progress(state.line())

    def close(self) -> None:
        """End every worker (a cluster joined before, as a test's, is left without them)."""
        for actor in self.actors:
            with contextlib.suppress(Exception):  # already gone with its node
                self.ray.kill(actor)


def _reason(exc: BaseException) -> str:
    """A dead worker's error, said briefly: what happened, then Ray's first line."""
    text = first_line(exc)
    if "memory" in text.lower():
        what = "its worker was killed for lack of memory"
    elif type(exc).__name__.endswith("UnavailableError"):
        what = "its worker stopped answering (the node died or is unreachable)"
    else:
        what = "its worker died"
    return f"{what}: {text[:200]}"
