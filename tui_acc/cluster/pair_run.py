"""The head's side of a pair's Ray run: where each tensor pair's row is computed, and what crosses
between nodes for it.

A test tensor's files are its ranks' (a gathered tensor: one part per rank), each on the node holding
that rank folder; the golden is read here (GOLDEN is on the head). Where its parts are on several
nodes, each node first says what it holds (``PairWorker.survey``: shapes, dtypes, digests; no tensor):

* parts that are slices of a concatenation (``region_sums.split_plan``): each node is sent its slices'
  regions of the golden and sends back their sums; the row is made here from them. No part moves.
* parts that are each the whole tensor, bit for bit the same: one node alone (the head's own where
  it holds a copy, else the first rank's) compares its copy with the golden, sent there: the local
  run's row to the last bit.
* partial sums (an all-reduce's inputs): summed node to node in rank order (``running_sum.py``), the
  running sum passed on, the last node computing the row: the local merge's bits.
* anything else (copies that differ, rows KL needs whole): the row is computed on the
  tensor's **home**, the node holding most of its parts (the lowest rank's among equals); the golden
  is sent there and each other node's parts, as read (a bfloat16 part: 2 bytes an element); the home
  merges and compares them with the local comparison's own code: its row to the last bit.

A tensor on one node is computed there, the golden sent to it. A node lost (or a call that failed on
it) leaves the rows of the tensors it held parts of as errors that say so: the rest stand.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from tui_acc.cluster.node_files import NodeFiles
from tui_acc.cluster.pair_worker import PairSurvey, PairWorker
from tui_acc.cluster.workers import CallFailed, Workers
from tui_acc.dumps.loading import check_recorded, file_states, load_side
from tui_acc.dumps.model import SUM
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.metrics.by_rank import rank_said
from tui_acc.metrics.pair_reading import PairReader, base_row, change_said, with_metrics
from tui_acc.metrics.region_sums import PartSums, Split, combined_row, golden_regions, split_plan
from tui_acc.metrics.schema import TensorRow
from tui_acc.pairing import Pairing, TensorPair

# a line per node on stderr this often while rows are computed (the last ones when the report is made)
PROGRESS_SECONDS = 10.0


class PairWorkers(Workers):
    """``Workers`` whose actors are ``PairWorker``s."""

    worker_class = PairWorker


class PairRun:
    """The tensor pairs' rows computed on the nodes; the bytes and tensors each node handled."""

    def __init__(self, workers: Workers, owners: dict[Path, int]) -> None:
        """``owners``: each rank folder (as its node names it) -> the place (node and path) holding it."""
        self.workers = workers
        self.owners = owners
        self.computed = [0] * len(workers.places)  # rows computed on each place
        self.fetched = 0  # test tensors fetched whole to the head (error map, plots)
        self.fetched_bytes = 0
        # how each row was made: from its parts' sums, on the first rank's node (every rank a copy of
        # it), on its home with the other nodes' parts sent there, or on the one node holding it all
        self.ways = {"split": 0, "copies": 0, "summed": 0, "sent": 0, "one_node": 0}
        self.read = [0] * len(workers.places)  # bytes each place read from its disk (at the end)
        self.files = NodeFiles(workers, self.owner)  # what the head reads itself (replays), from the nodes
        self._lock = threading.Lock()  # the engine's worker threads ask at once
        self._said_at = time.monotonic()

    def owner(self, path: Path) -> int | None:
        """The place holding the file ``path``, or None: no rank folder holds it."""
        return next((place for root, place in self.owners.items() if path.is_relative_to(root)), None)

    def row(self, pair: TensorPair, kl: bool, golden: np.ndarray) -> tuple[TensorRow, bool]:
        """``pair``'s row (not yet judged), and whether it is transient: from its parts' sums where
        it splits, else computed on its home."""
        paths = list(pair.test.parts or (pair.test.path,))
        held = [self.owner(p) for p in paths]
        spread = len(set(held)) > 1 and None not in held and not any(o in self.workers.lost for o in held)
        if spread and pair.test.merge == SUM:
            places = [(p, o) for p, o in zip(paths, held, strict=True) if o is not None]
            summed = self._summed_row(pair, kl, golden, places)
            if summed is not None:
                return summed
        if spread:
            try:
                survey = self._survey(pair, paths, [o for o in held if o is not None])
            except CallFailed as exc:
                return base_row(pair, self._failed(paths, exc)), False
            float_pair = all(s.real_float for s in survey)
            split = split_plan(
                [s.shape for s in survey], [s.dtype for s in survey], pair.test.merge, golden, kl
            )
            if split is not None and float_pair:
                self._tally("split")
                return self._split_row(pair, kl, golden, paths, split)
            copies = (
                all(s.digest == survey[0].digest for s in survey)
                and survey[0].shape
                and (math.prod(survey[0].shape) == golden.size)
            )
            if copies:  # every rank holds the whole tensor, bit for bit: one node alone
                self._tally("copies")
                return self._home_row(pair, kl, golden, paths, copies=True)
        self._tally("sent" if len(set(held)) > 1 else "one_node")
        return self._home_row(pair, kl, golden, paths, copies=False)

    def _tally(self, way: str) -> None:
        """Count a row made ``way``; every PROGRESS_SECONDS, a line per node on stderr."""
        with self._lock:
            self.ways[way] += 1
            now = time.monotonic()
            due = now - self._said_at >= PROGRESS_SECONDS
            if due:
                self._said_at = now
        if due and self.workers.progress is not None:
            for place, state in enumerate(self.workers.states):
                if state.state == "working":
                    self.workers.progress(f"node {state.label}: {self.computed[place]} tensor rows so far")

    def _survey(self, pair: TensorPair, paths: list[Path], held: list[int]) -> list[PairSurvey]:
        """Each part's shape, dtype and digest, from its node, in rank order."""
        calls = {
            place: self.workers.actors[place].survey.remote(
                pair, [str(p) for p, o in zip(paths, held, strict=True) if o == place]
            )
            for place in dict.fromkeys(held)
        }
        answers = {place: iter(self.workers.result(place, call)) for place, call in calls.items()}
        return [next(answers[place]) for place in held]

    def _split_row(
        self, pair: TensorPair, kl: bool, golden: np.ndarray, paths: list[Path], split: Split
    ) -> tuple[TensorRow, bool]:
        """The row from each part's sums on its node, each sent only its region of the golden."""
        held = [o for o in (self.owner(p) for p in paths) if o is not None]
        regions = golden_regions(golden, split)
        calls = {}
        for place in dict.fromkeys(held):
            mine = [i for i, o in enumerate(held) if o == place]
            calls[place] = self.workers.actors[place].region_sums.remote(
                pair, [str(paths[i]) for i in mine], [regions[i] for i in mine], kl
            )
        sums: dict[int, PartSums] = {}
        for place, call in calls.items():
            try:
                found, error, transient = self.workers.result(place, call)
            except CallFailed as exc:
                return base_row(pair, self._failed(paths, exc)), False
            if error is not None:
                return base_row(pair, error), transient
            mine = [i for i, o in enumerate(held) if o == place]
            sums.update(zip(mine, found, strict=True))
            with self._lock:
                self.computed[place] += 1
                if self.workers.places[place].node.node_id != self.workers.connection.head:
                    self.workers.traffic.add("goldens", sum(regions[i].nbytes for i in mine))
        parts = [sums[i] for i in range(len(held))]
        row = base_row(pair)
        try:
            metrics = combined_row(golden, split, parts, kl)
            check_recorded(pair.golden, metrics["golden_max"], metrics["golden_min"])  # type: ignore[arg-type]
        except TensorLoadError as exc:
            row["error"] = str(exc)
            return row, False
        except (
            ValueError,
            IndexError,
        ) as exc:  # parts that do not add up: an error row, as a local compare says
            row["error"] = f"the ranks' parts could not be combined ({exc})"
            return row, False
        metrics["by_rank"] = "; ".join(
            rank_said(rank, region, part.said)
            for rank, (region, part) in enumerate(zip(split.regions, parts, strict=True))
        )
        with_metrics(row, metrics)
        return row, False

    def _summed_row(
        self, pair: TensorPair, kl: bool, golden: np.ndarray, held: list[tuple[Path, int]]
    ) -> tuple[TensorRow, bool] | None:
        """Partial sums (``running_sum.py``): each node adds its run of ranks to the running sum the
        node before it sent (node to node, not through the head), the last one computes the row with
        the golden sent to it. None where a call failed on a node still alive: the parts are then
        sent as they are (``_home_row``), and the row says what a local run says of them."""
        runs: list[tuple[int, list[str]]] = []  # (place, its paths): consecutive ranks of one node
        for path, place in held:
            if runs and runs[-1][0] == place:
                runs[-1][1].append(str(path))
            else:
                runs.append((place, [str(path)]))
        running, received = None, []
        for place, mine in runs[:-1]:
            call = self.workers.actors[place].running_sum.options(num_returns=2)
            running, got = call.remote(pair, mine, running)
            received.append(got)
        home = runs[-1][0]
        call = self.workers.actors[home].row.remote(pair, golden, kl, None, [], before=running)
        try:
            row, transient, last = self.workers.result(home, call)
        except CallFailed as exc:
            for ref in received:  # each asked for, so that Ray does not print a failed one's traceback
                self.workers.bytes_of(ref)
            lost = [o for _, o in held if o in self.workers.lost]
            return (base_row(pair, self._failed([p for p, _ in held], exc)), False) if lost else None
        self._tally("summed")
        self._count(home, golden, 0)
        self.workers.traffic.add("partial_sums", last + sum(self.workers.bytes_of(r) for r in received))
        with self._lock:
            self.computed[home] += 1
        return row, transient

    def _home_row(
        self, pair: TensorPair, kl: bool, golden: np.ndarray, paths: list[Path], copies: bool
    ) -> tuple[TensorRow, bool]:
        """The row computed on the tensor's home, the golden sent there, and the other nodes' parts
        too unless they are ``copies`` of the home's (then read on the head's node where it holds
        one: the golden then crosses no network)."""
        home, sent, why = self._plan(pair, paths, send=not copies)
        if why is not None:
            return base_row(pair, why), False
        copy = next(str(p) for p in paths if self.owner(p) == home) if copies else None
        call = self.workers.actors[home].row.remote(
            pair, golden, kl, copy, [p for p, _ in sent], *[r for _, r in sent]
        )
        try:
            row, transient, sent_bytes = self.workers.result(home, call)
        except CallFailed as exc:
            return base_row(pair, self._failed(paths, exc)), False
        self._count(home, golden, sent_bytes)
        with self._lock:
            self.computed[home] += 1
        return row, transient

    def tensor(self, pair: TensorPair, golden: np.ndarray) -> np.ndarray:
        """The test's tensor of ``pair``, merged on its home and fetched to the head (counted)."""
        from tui_acc.dumps import DumpError

        paths = list(pair.test.parts or (pair.test.path,))
        home, sent, why = self._plan(pair, paths)
        if why is not None:
            raise DumpError(why)
        call = self.workers.actors[home].tensor.remote(
            pair, golden, [p for p, _ in sent], *[r for _, r in sent]
        )
        try:
            values, sent_bytes = self.workers.result(home, call)
        except CallFailed as exc:
            raise DumpError(f"{pair.test.path}: {self._failed(paths, exc)}") from exc
        self._count(home, golden, sent_bytes)
        with self._lock:
            self.fetched += 1
            self.fetched_bytes += values.nbytes
        return values

    def _plan(
        self, pair: TensorPair, paths: list[Path], send: bool = True
    ) -> tuple[int, list[tuple[list[str], Any]], str | None]:
        """The home of a tensor whose files are ``paths`` (with ``send=False``, the first holder on the
        head's node, else the first rank's), and what each other holder sends it (paths, and the call
        that reads them there); or why it cannot be compared."""
        owners = [self.owner(p) for p in paths]
        if any(o is None for o in owners):
            missing = next(p for p, o in zip(paths, owners, strict=True) if o is None)
            return 0, [], f"not compared: {missing} is in no rank folder a node holds"
        held = [o for o in owners if o is not None]
        if any(o in self.workers.lost for o in held):
            return 0, [], self._lost_said(held)
        head = self.workers.connection.head
        if send:
            home = max(dict.fromkeys(held), key=lambda o: (held.count(o), -held.index(o)))
        else:
            home = next((o for o in held if self.workers.places[o].node.node_id == head), held[0])
        sent = []
        for other in dict.fromkeys(held):
            if other != home and send:
                mine = [str(p) for p, o in zip(paths, held, strict=True) if o == other]
                sent.append((mine, self.workers.actors[other].parts.remote(pair, mine)))
        return home, sent, None

    def _failed(self, paths: list[Path], exc: CallFailed) -> str:
        """Why a tensor whose files are ``paths`` was not compared: the nodes of them lost (named), or
        the call that failed on a node alive."""
        held = [o for o in (self.owner(p) for p in paths) if o is not None]
        if any(o in self.workers.lost for o in held):
            return self._lost_said(held)
        return f"not compared: {exc}"

    def _lost_said(self, held: list[int]) -> str:
        lost = [o for o in dict.fromkeys(held) if o in self.workers.lost]
        said = "; ".join(f"node {self.workers.states[o].label}: {self.workers.lost[o]}" for o in lost)
        return f"not compared: a node holding its ranks was lost ({said})"

    def _count(self, home: int, golden: np.ndarray, sent_bytes: int) -> None:
        """The golden sent to the home where the home is not the head's node, and the parts the other
        nodes sent it (``sent_bytes``, as the home received them)."""
        workers = self.workers
        with self._lock:
            if workers.places[home].node.node_id != workers.connection.head:
                workers.traffic.add("goldens", golden.nbytes)
            workers.traffic.add("inputs", sent_bytes)

    def finish(self, started: float) -> None:
        """Each place that computed rows marked done, its line on stderr; what each node read."""
        alive = self.workers.alive(list(range(len(self.workers.places))))
        asked = {place: self.workers.actors[place].bytes_read.remote() for place in alive}
        for place, ref in asked.items():
            self.read[place] = self.workers.bytes_of(ref)
        self.workers.traffic.read = sum(self.read)
        for place, state in enumerate(self.workers.states):
            if state.state in ("working", "listing") and place not in self.workers.lost:
                state.state, state.ended = "done", time.monotonic()
                state.collectives = self.computed[place]
                if self.workers.progress is not None:
                    self.workers.progress(
                        f"node {state.label}: done: {', '.join(state.ranks) or 'no ranks'}, "
                        f"{self.computed[place]} tensor rows computed, {time.monotonic() - started:.1f} s"
                    )

    def status(self) -> str:
        """The view's line of nodes: each one's ranks, state and the rows it computed so far."""
        states = [(place, s) for place, s in enumerate(self.workers.states) if s.state != "empty"]
        return "nodes: " + " · ".join(f"{s.brief()}, {self.computed[place]} rows" for place, s in states)

    def said(self) -> dict[str, Any]:
        """``--json``'s ``ray``: each node's state, the bytes, the tensors fetched whole."""
        bytes_said = self.workers.traffic.said()
        bytes_said["fetched_to_head"] = self.fetched_bytes
        bytes_said["files_to_head"] = self.files.fetched_bytes
        return {
            "nodes": [
                {**state.said(), "rows": self.computed[i], "read": self.read[i]}
                for i, state in enumerate(self.workers.states)
            ],
            "bytes": bytes_said,
            "fetched_tensors": self.fetched,
            "fetched_files": self.files.fetched,
            "rows_made": dict(self.ways),
        }


class RayPairReader(PairReader):
    """``PairReader`` at the head of a pair's Ray run: the golden read here, the test's row computed
    on the node holding its files (``PairRun.row``)."""

    def __init__(self, pairing: Pairing, run: PairRun) -> None:
        super().__init__(pairing)
        self.run = run

    def compare(self, pair: TensorPair, kl: bool) -> tuple[TensorRow, bool]:
        """The pair's row, computed where its test files are (statistics-only pairs: here)."""
        if not (pair.golden.has_data and pair.test.has_data) or pair.golden_from_test:
            return super().compare(pair, kl)
        before = file_states(pair.golden)
        # as the local reader: a large golden read one at a time, and one changed while read said
        with self._alone_if_large(before):
            try:
                golden = load_side(pair.golden, None, self._golden_policy(pair))
            except Exception:  # the golden's own error row, as the local comparison words it
                return super().compare(pair, kl)
            row, transient = self.run.row(pair, kl, golden)
        changed = change_said(before)
        if changed is not None and row.get("error") is None:
            row["error"], transient = changed, True
        return row, transient

    def load_pair(self, pair: TensorPair) -> tuple[np.ndarray, np.ndarray]:
        """Both tensors whole at the head (the error map, a plot): the test's fetched from its home."""
        golden = load_side(pair.golden, None, self._golden_policy(pair))
        if pair.golden_from_test:
            return super().load_pair(pair)
        return golden, self.run.tensor(pair, golden)
