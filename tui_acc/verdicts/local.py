"""Local error: what an operator adds itself, measured on the test side's own dumped tensors.

Two measurements need tensor data, so they are made here, once per node and token, on the thread
that judges (never the UI's), and kept:

- **replay**: the test side's dumped output against the operator recomputed from the test side's
  own dumped inputs and weights (``replay_check.replay_side``, on a sample of a large output). Where
  the test disagrees with its replay, the golden is replayed too: a golden that disagrees with its
  own replay as much shows that the reference is not what this operator computes (an eps not
  recorded, a fused step), and the replay is then no evidence either way.
- **pass-through**: a module whose golden output is bit for bit a descendant's output (an attention
  returning its ``o_proj``'s output, a model returning its final norm's) must do the same on the
  test side; the distance between the two test tensors is its local error.

Neither depends on the error that came in with the inputs, so a fault of 2 % shows under the 1-1.5 %
a bf16 port has accumulated by the middle layers.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from tui_acc.dumps.loading import load_side
from tui_acc.dumps.model import DumpError, DumpIndex
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.pairing import NodePair, Pairing, TensorPair
from tui_acc.replay import collective
from tui_acc.replay.distance import distance
from tui_acc.replay.dumped_call import recorded_arguments
from tui_acc.replay.names import replay_names
from tui_acc.replay.registry import Registry
from tui_acc.replay.sampling import plan
from tui_acc.row_store import RowStore
from tui_acc.tolerances.rounding import UNIT_ROUNDOFF
from tui_acc.verdicts import quantised_weights as quantised
from tui_acc.verdicts.blas_threads import one_blas_thread
from tui_acc.verdicts.quantised_weights import QuantisedWeight
from tui_acc.verdicts.replay_check import SideReplay, replay_side
from tui_acc.verdicts.routing import Routing, Selection, check
from tui_acc.verdicts.test_only import test_only_inside


@dataclass(frozen=True)
class NodeReplay:
    """The test side's replay of a node, what the golden's says of the reference, and the recorded
    arguments (an eps, a dim) where the two sides' differ: a replay from the test's own arguments
    cannot see a wrong one."""

    test: SideReplay
    golden: SideReplay | None  # replayed only where the test disagrees
    arguments: tuple[str, ...] = ()  # "eps: 0.5, the golden's 1e-06"

    @property
    def reference_holds(self) -> bool:
        """False where the golden disagrees with the reference as much as the test does."""
        if self.golden is None or self.golden.verdict != "disagrees":
            return True
        golden_error, bound = self.golden.local_error, self.test.tolerance
        return golden_error is None or bound is None or golden_error <= bound


class LocalChecks:
    """Replays and pass-through distances of one comparison, each computed once (any thread)."""

    def __init__(self, pairing: Pairing, registry: Registry | None = None) -> None:
        self.pairing = pairing
        self.registry = registry or Registry()
        # a node being replayed by one thread (a worker, ahead) is waited for by another (the judge)
        self._replays: RowStore[tuple[int, str], NodeReplay | None] = RowStore()
        self._distances: RowStore[tuple[int, str, str], float | None] = RowStore()
        self._routings: RowStore[tuple[int, str], Routing | None] = RowStore()
        self._inner: RowStore[tuple[int, str], tuple[SideReplay, ...]] = RowStore()
        self._paired_tests: dict[int, frozenset[str]] = {}
        self._inside: dict[tuple[int, str], list[str]] = {}
        self._quantised: RowStore[tuple[int, str], QuantisedWeight | None] = RowStore()
        self._lock = threading.Lock()
        self.replayed = 0  # how many nodes were replayed (for the benchmark)

    def has_reference(self, node: NodePair) -> bool:
        """Whether a reference exists for the test node (no tensor data is read; replay/names.py)."""
        return self.registry.find(*replay_names(self.pairing.test, node.test)) is not None

    def known_replay(self, node: NodePair) -> tuple[bool, NodeReplay | None]:
        """``(known, replay)`` without computing anything (what a UI thread may ask)."""
        key = (node.token, node.golden)
        return key in self._replays, self._replays.get(key)

    def replay(self, node: NodePair, focus: int | None = None) -> NodeReplay | None:
        """The node's replay (None where no reference exists), computed on first use. ``focus``: the
        flat output index where the sides differ most (``replay_check.output_focus`` of its rows),
        which a sample holds: every caller passes the same for a node, from the same rows."""
        return self._replays.once((node.token, node.golden), lambda: self._replay(node, focus))

    def _replay(self, node: NodePair, focus: int | None) -> NodeReplay | None:
        if not self.has_reference(node):
            return None
        with self._lock:
            self.replayed += 1
        with one_blas_thread():
            test = replay_side(self.pairing.test, node.token, node.test, self.registry, "test", focus=focus)
            golden = None
            if test.verdict == "disagrees":
                golden = replay_side(
                    self.pairing.golden, node.token, node.golden, self.registry, "golden", focus=focus
                )
        return NodeReplay(test, golden, self._differing_arguments(node))

    def _differing_arguments(self, node: NodePair) -> tuple[str, ...]:
        """The recorded arguments both sides have and that differ (dtypes and devices aside: a port
        changes those by design)."""
        golden = recorded_arguments(self.pairing.golden, node.token, node.golden)
        test = recorded_arguments(self.pairing.test, node.token, node.test)
        return tuple(
            f"{key}: {test[key]!r}, the golden's {golden[key]!r}"
            for key in sorted(golden.keys() & test.keys())
            if not _same_argument(golden[key], test[key])
        )

    def quantised_weight(self, node: NodePair) -> QuantisedWeight | None:
        """An int8 weight against the golden's through its scale (``quantised_weights.py``), once."""
        key = (node.token, node.golden)
        golden, test = self.pairing.golden, self.pairing.test
        return self._quantised.once(
            key, lambda: quantised.check(golden, test, node.token, node.golden, node.test)
        )

    def known_quantised_weight(self, node: NodePair) -> tuple[bool, QuantisedWeight | None]:
        """``(known, result)`` without reading anything; known and None where the node holds no
        scale beside its weight (nothing to check: no data is read to tell)."""
        key = (node.token, node.golden)
        if key in self._quantised:
            return True, self._quantised.get(key)
        slots = {r.slot for r in self.pairing.test.tensors(node.token, node.test)}
        return (not slots & set(quantised.SCALE_SLOTS)), None

    def inner(self, node: NodePair) -> tuple[SideReplay, ...]:
        """The replays of the records only the test has inside the node (a port's own operators in a
        module both sides have: what the pairing leaves unmatched), those with a reference, in
        execution order; computed once."""
        return self._inner.once((node.token, node.golden), lambda: self._inner_replays(node))

    def known_inner(self, node: NodePair) -> tuple[bool, tuple[SideReplay, ...]]:
        """``(known, replays)`` without computing anything (what a UI thread may ask); known and empty
        where nothing only the test has lies inside the node."""
        key = (node.token, node.golden)
        if key in self._inner:
            return True, self._inner.get(key) or ()
        return (not self.test_only_inside(node)), ()

    def test_only_inside(self, node: NodePair) -> list[str]:
        """The test's records inside the node that only the test has (``test_only.test_only_inside``;
        no data is read), listed once per node and token: the UI thread asks on every look."""
        key = (node.token, node.golden)
        with self._lock:
            known = self._inside.get(key)
        if known is None:
            paired = self._paired_at(node.token)
            known = test_only_inside(self.pairing.test, node.token, node.test, paired, self.registry)
            with self._lock:
                self._inside[key] = known
        return known

    def _golden_only_modules(self, node: NodePair) -> list[str]:
        """The golden's module records inside the node that nothing of the test pairs with."""
        golden = self.pairing.golden
        paired = frozenset(p.golden for p in self.pairing.node_pairs(node.token))
        return [
            n.name
            for n in golden.tree.preorder(node.golden)
            if n.name != node.golden and n.name.startswith("Module.") and n.name not in paired
        ]

    def _paired_at(self, token: int) -> frozenset[str]:
        with self._lock:
            known = self._paired_tests.get(token)
        if known is None:
            known = frozenset(p.test for p in self.pairing.node_pairs(token))
            with self._lock:
                self._paired_tests[token] = known
        return known

    def _inner_replays(self, node: NodePair) -> tuple[SideReplay, ...]:
        names = self.test_only_inside(node)
        if not names:
            return ()
        index = self.pairing.test
        missing = self._golden_only_modules(node)
        if missing:  # the golden runs a module here the test has no record of (a q_norm left out?)
            said = f"the golden runs {missing[0]} here, which the test has no record of"
            return (SideReplay("test", missing[0], "?", "impossible", said),)
        with one_blas_thread():
            return tuple(
                SideReplay(
                    "test", n, "?", "impossible", "gathered from several ranks' files: no one call's inputs"
                )
                if any(ref.parts for ref in index.tensors(node.token, n)) and not _collective(index, n)
                else replay_side(index, node.token, n, self.registry, "test")
                for n in names
            )

    def routing(self, selection: Selection) -> Routing | None:
        """The test side's kept experts against its own scores (routing.py); None where a tensor
        could not be read. Read once."""
        key = (selection.indices.token, selection.indices.golden_node)
        return self._routings.once(key, lambda: self._routing(selection))

    def known_routing(self, selection: Selection) -> tuple[bool, Routing | None]:
        """``(known, routing)`` without reading anything (what a UI thread may ask)."""
        key = (selection.indices.token, selection.indices.golden_node)
        return key in self._routings, self._routings.get(key)

    def _routing(self, selection: Selection) -> Routing | None:
        test, golden = self.pairing.test, self.pairing.golden
        try:
            scores = load_side(selection.scores.test, None, test.load_policy)
            kept = load_side(selection.indices.test, None, test.load_policy)
            golden_kept = load_side(selection.indices.golden, None, golden.load_policy)
        except (TensorLoadError, DumpError, OSError, ValueError):
            return None
        if scores.ndim < 1 or kept.ndim < 1 or scores.shape[:-1] != kept.shape[:-1]:
            return None
        return check(scores, kept, golden_kept)

    def known_distance(self, output: TensorPair, source: TensorPair) -> tuple[bool, float | None]:
        """Whether ``pass_through`` has computed this distance yet, and the distance if so (None
        also where it was unreadable); nothing is read or computed."""
        key = (output.token, output.test.location, source.test.location)
        return key in self._distances, self._distances.get(key)

    def pass_through(self, output: TensorPair, source: TensorPair) -> float | None:
        """The test side's relative distance of ``output`` from ``source`` (None: unreadable)."""
        key = (output.token, output.test.location, source.test.location)
        return self._distances.once(key, lambda: _test_distance(self.pairing.test, output, source))


def _same_argument(golden: Any, test: Any) -> bool:
    if (
        isinstance(golden, str)
        and isinstance(test, str)
        and (_is_dtype_or_device(golden) or _is_dtype_or_device(test))
    ):
        return True
    if isinstance(golden, float) or isinstance(test, float):
        try:
            return math.isclose(float(golden), float(test), rel_tol=1e-6, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(golden, (list, tuple)) and isinstance(test, (list, tuple)) and len(golden) == len(test):
        return all(_same_argument(g, t) for g, t in zip(golden, test, strict=True))
    return bool(golden == test)


def _is_dtype_or_device(value: str) -> bool:
    name = value.removeprefix("torch.")
    return name in _DTYPES or name.split(":")[0] in ("cpu", "cuda", "npu", "meta", "xpu", "mps")


_DTYPES = frozenset(
    {*UNIT_ROUNDOFF, "bool", "uint8", "int8", "int16", "int32", "int64", "complex64", "complex128"}
)


def _test_distance(index: DumpIndex, output: TensorPair, source: TensorPair) -> float | None:
    try:
        out = load_side(output.test, None, index.load_policy)
        src = load_side(source.test, None, index.load_policy)
    except (TensorLoadError, DumpError, OSError, ValueError):
        return None
    if out.shape != src.shape:
        return None
    sample = plan(tuple(out.shape), output.test_node)
    if sample is not None:
        width = out.shape[-1]
        out = out.reshape(-1, width)[sample.rows]
        src = src.reshape(-1, width)[sample.rows]
    found = distance(np.asarray(src), np.asarray(out))
    return found["rel_euclidean"]


def _collective(index: DumpIndex, name: str) -> bool:
    """A collective (all-reduce, reduce-scatter, all-gather): its reference reads every rank's tensors."""
    node = index.tree.nodes.get(name)
    return collective.collective_kind(node.type if node is not None else "", name) is not None
