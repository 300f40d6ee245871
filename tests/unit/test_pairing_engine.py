"""Pairing reports what it cannot pair; the engine is lazy, cached, and finds the right suspect."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.model import Node, NodeTree
from tui_acc.metrics.engine import Cancelled
from tui_acc.verdicts.verdict import NodeVerdict, TokenVerdict


def test_unpaired_items_are_listed_not_dropped(damaged_copy: tuple[Path, Path]) -> None:
    cmp = open_comparison(*damaged_copy)
    got = {(u.kind, u.side, u.token, u.name) for u in cmp.pairing.unmatched}
    assert got == {
        ("token", "golden", 7, "7"),
        ("node", "golden", 1, "root.model.layers.0.mlp.act_fn"),
        ("tensor", "golden", 2, "root.model.norm/output"),
        ("tensor", "test", 2, "root.model.norm/output_5"),
    }
    assert cmp.pairing.tokens == list(range(7))


def test_a_damaged_tensor_is_an_error_row_and_the_rest_goes_on(damaged_copy: tuple[Path, Path]) -> None:
    cmp = open_comparison(*damaged_copy)
    rows = {r["golden_node"]: r for r in cmp.engine.node_rows(0)}
    bad = rows["root.model.layers.1.mlp.up_proj"]
    assert bad["outputs_passed"] is False
    assert "up_proj/output.pth: unreadable torch file" in bad["error"]
    assert rows["root.model.layers.1.mlp.gate_proj"]["outputs_passed"] is True


def test_nothing_is_computed_before_asked_and_nothing_twice(demo_pair) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    assert cmp.engine.computed == 0
    cmp.engine.token_rows()
    assert cmp.engine.computed == len(cmp.pairing.tokens)  # the logits pairs only
    cmp.engine.token_rows()
    cmp.engine.first_failing_token()
    assert cmp.engine.computed == len(cmp.pairing.tokens)
    cmp.engine.node_rows(1)
    per_token = sum(len(n.tensors) for n in cmp.pairing.node_pairs(1))
    assert cmp.engine.computed == len(cmp.pairing.tokens) + per_token - 1  # lm_head output was cached


def test_parallel_rows_equal_sequential_rows(demo_pair) -> None:
    from tui_acc.metrics.engine import MetricsEngine

    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    parallel = MetricsEngine(cmp.pairing, workers=4).node_rows(3)
    sequential = MetricsEngine(cmp.pairing, workers=1).node_rows(3)
    assert [r["golden_node"] for r in parallel] == [r["golden_node"] for r in sequential]
    assert [r["cosine"] for r in parallel] == [r["cosine"] for r in sequential]


def test_concurrent_requests_compute_each_pair_once(demo_pair) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    barrier = threading.Barrier(3)

    def work() -> None:
        barrier.wait()
        cmp.engine.node_rows(2)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cmp.engine.computed == sum(len(n.tensors) for n in cmp.pairing.node_pairs(2))


@pytest.mark.parametrize("workers", [1, 2])
def test_should_stop_cancels_between_tensors(demo_pair, workers: int) -> None:
    from tui_acc.metrics.engine import MetricsEngine

    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    engine = MetricsEngine(cmp.pairing, workers=workers)
    stop = threading.Event()

    def stop_after_five() -> bool:
        if engine.computed >= 5:
            stop.set()
        return stop.is_set()

    with pytest.raises(Cancelled):
        engine.node_rows(0, should_stop=stop_after_five)
    total = sum(len(n.tensors) for n in cmp.pairing.node_pairs(0))
    assert 5 <= engine.computed < total  # stopped well before the end; in-flight pairs may finish


def test_demo_fault_is_found(demo_pair) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    assert cmp.engine.first_failing_token() == demo_pair.fault_token
    op = cmp.verdicts.culprit(demo_pair.fault_token)
    assert op is not None and op["golden_node"] == demo_pair.fault_module
    assert op["inputs_passed"] is True and op["cosine"] < 0.99
    # tokens before the fault pass, bf16 noise and all
    assert all(r["passed"] for r in cmp.engine.token_rows(range(demo_pair.fault_token)))


def _tree(spec: dict[str, list[str]]) -> NodeTree:
    nodes: dict[str, Node] = {}
    for parent, children in spec.items():
        nodes.setdefault(parent, Node(parent, "T", None, 0))
        for child in children:
            nodes[child] = Node(child, "T", parent, nodes[parent].depth + 1)
            nodes[parent].children.append(child)
    return NodeTree("root", nodes)


def _culprit(tree: NodeTree, suspects: set[str], names: list[str]) -> str | None:
    nodes = {n: NodeVerdict(n, label="local" if n in suspects else None) for n in names}
    found = TokenVerdict(0, tree, nodes, {}).culprit
    return found.node if found is not None else None


def test_innermost_and_earliest_suspect_wins() -> None:
    tree = _tree({"root": ["a", "b"], "a": ["a1", "a2"], "b": ["b1"]})
    names = ["root", "a", "a1", "a2", "b", "b1"]
    # the parent qualifies because its child does: the child is named
    assert _culprit(tree, {"a", "a2", "b"}, names) == "a2"
    # a qualifying parent with no qualifying child is itself the answer, before later siblings
    assert _culprit(tree, {"a", "b1"}, names) == "a"
    assert _culprit(tree, {"b1"}, names) == "b1"
    assert _culprit(tree, set(), names) is None


def test_tokens_are_listed_and_paired_only_when_asked(demo_pair) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    assert not any(cmp.pairing.is_paired(t) for t in cmp.pairing.tokens)  # opening listed nothing
    assert cmp.engine.cached_token_row(5) is None and not cmp.pairing.is_paired(5)  # looking does not pair
    cmp.engine.token_row(5)
    assert cmp.pairing.is_paired(5) and not cmp.pairing.is_paired(6)
    assert cmp.pairing.unmatched == [] and cmp.pairing.all_paired()  # a full report pairs everything


def _pair(node: str, slot: str):  # type: ignore[no-untyped-def]
    from tui_acc.dumps.model import TensorRef
    from tui_acc.pairing import TensorPair

    ref = TensorRef(slot=slot, role="output", location=f"{node}/{slot}.pth")
    return TensorPair(0, node, node, ref, ref)


def test_rows_on_screen_come_first_as_provisional_rows(demo_pair) -> None:
    """While the first operator is stuck, the preferred (last) one is computed and shown."""
    from tui_acc.metrics.engine import MetricsEngine

    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    engine = MetricsEngine(cmp.pairing, workers=2)
    nodes = cmp.pairing.node_pairs(0)
    first, last = nodes[1].golden, nodes[-2].golden  # nodes[0] is the root, holding the logits
    gate, early = threading.Event(), threading.Event()
    compute = engine.tensors.compute  # a pair read, compared and judged

    def gated(pair):  # type: ignore[no-untyped-def]
        if pair.golden_node == first:
            assert gate.wait(60), "never released"
        return compute(pair)

    engine.tensors.compute = gated  # type: ignore[method-assign]
    seen: list[dict] = []

    def on_row(row: dict) -> None:
        seen.append(row)
        if row["golden_node"] == last and row.get("provisional"):
            early.set()

    worker = threading.Thread(
        target=lambda: seen.append({"final": engine.node_rows(0, on_row=on_row, prefer=lambda: {last})})
    )
    worker.start()
    try:
        assert early.wait(60), "the preferred node was not computed while the first was stuck"
        assert not any(r.get("golden_node") == first for r in seen)  # still stuck
        provisional = next(r for r in seen if r.get("golden_node") == last)
        assert provisional["cosine"] is not None and "label" not in provisional
    finally:
        gate.set()
        worker.join(60)
    final = seen[-1]["final"]
    plain = MetricsEngine(cmp.pairing, workers=1).node_rows(0)
    assert [r["golden_node"] for r in final] == [r["golden_node"] for r in plain]
    assert [(r["cosine"], r["outputs_passed"]) for r in final] == [
        (r["cosine"], r["outputs_passed"]) for r in plain
    ]
    assert not any(r.get("provisional") for r in final)


def test_a_modules_aggregate_is_exactly_its_inside_outputs_as_one_tensor(demo_pair) -> None:
    """``*_within`` comes from the rows' sufficient statistics alone: it equals comparing every
    output inside the module, read again and concatenated, up to float64 rounding."""
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.metrics.kernels import compare_tensors

    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    rows = {row["golden_node"]: row for row in cmp.engine.node_rows(3)}
    tree = cmp.golden.tree
    module = "root.model.layers.2.mlp"  # holds the demo's fault (down_proj)
    leaves = [n.name for n in tree.preorder(module) if not tree.children(n.name) and n.name in rows]
    outputs = [p for node in cmp.pairing.node_pairs(3) if node.golden in leaves for p in node.tensors]
    outputs = [p for p in outputs if p.role == "output"]
    golden = np.concatenate(
        [load_tensor(p.golden.path, ANYWHERE).astype(np.float64).reshape(-1) for p in outputs]
    )
    test = np.concatenate(
        [load_tensor(p.test.path, ANYWHERE).astype(np.float64).reshape(-1) for p in outputs]
    )
    whole = compare_tensors(golden, test)
    row = rows[module]
    assert row["tensors_within"] == len(outputs) >= 3
    assert row["cosine_within"] == pytest.approx(whole["cosine"], rel=1e-9)
    assert row["rel_euclidean_within"] == pytest.approx(whole["rel_euclidean"], rel=1e-9)
    assert rows["root.model.layers.0"]["cosine_within"] > row["cosine_within"]  # before the fault
    assert "tensors_within" not in rows[leaves[0]] or not rows[leaves[0]]["tensors_within"]
    cached = {r["golden_node"]: r for r in cmp.engine.cached_node_rows(3)}
    assert cached[module]["cosine_within"] == row["cosine_within"]  # the same sums, all known


def test_rows_hold_only_the_columns_their_shapes_declare(demo_pair) -> None:
    """The TypedDicts are the rows' one declaration (their frames' schemas derive from them): a
    column the engine adds without declaring it would be lost from every export and the cache."""
    from tui_acc.metrics.schema import NodeRow, TensorRow, TokenRow

    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    nodes = cmp.engine.node_rows(3)
    tensors = cmp.engine.cached_rows()
    tokens = cmp.engine.token_rows([3])
    assert nodes and tensors and tokens
    for rows, shape in ((nodes, NodeRow), (tensors, TensorRow), (tokens, TokenRow)):
        declared = set(shape.__annotations__)
        assert all(set(row) <= declared for row in rows), {k for row in rows for k in row} - declared
