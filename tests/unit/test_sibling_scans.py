"""What fed a node whose inputs were not dumped: the last earlier sibling with a verdict, found in time
linear in a module's children (a dump with thousands of empty module folders under one module took
minutes when each node looked back over all its siblings), and the trees a later token grows adopted
without copying a parent's children once per child."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tui_acc.dumps import model
from tui_acc.dumps.model import Node, NodeTree
from tui_acc.verdicts.sibling_scans import SiblingScans


@dataclass
class _Facts:
    """What SiblingScans reads of a node's facts: its row's output verdict."""

    name: str
    row: dict[str, Any] = field(default_factory=dict)


def _flat_tree(count: int) -> NodeTree:
    tree = NodeTree("root", {"root": Node("root", "model", None, 0)})
    for i in range(count):
        tree.nodes[f"c{i}"] = Node(f"c{i}", "Module", "root", 1)
        tree.nodes["root"].children.append(f"c{i}")
    return tree


def _naive(facts: dict[str, _Facts], children: list[str], child: str) -> str | None:
    """The definition, looked up from scratch: the nearest earlier sibling whose outputs have a verdict."""
    for sibling in reversed(children[: children.index(child)]):
        row = facts[sibling].row if sibling in facts else None
        if row is not None and row["outputs_passed"] is not None and not row.get("outputs_unknown"):
            return sibling
    return None


def test_scans_agree_with_looking_back_from_scratch_as_facts_arrive_and_change() -> None:
    rng = random.Random(7)
    tree = _flat_tree(60)
    children = tree.children("root")
    facts: dict[str, _Facts] = {}
    scans = SiblingScans(tree, facts.get)  # type: ignore[arg-type]
    for _ in range(2000):
        child = rng.choice(children)
        if rng.random() < 0.3:  # judged (anew): a verdict, none, or outputs that could not be read
            scans.forget(child)
            passed = rng.choice([True, False, None])
            facts[child] = _Facts(child, {"outputs_passed": passed, "outputs_unknown": rng.random() < 0.1})
        found = scans.handed_on_before("root", child)
        assert (found.name if found is not None else None) == _naive(facts, children, child)


def test_a_child_adopted_between_old_ones_mid_walk_is_seen() -> None:
    """A later token's nodes adopted while a token is judged (another worker pairs it, or the walk
    asks what fed the token): the parent's children are a new list, maybe with a node between old
    ones, and every answer is as if looked up from scratch."""
    tree = _flat_tree(0)
    for name in ("1_a", "3_c", "4_d"):
        tree.nodes[name] = Node(name, "Module", "root", 1)
        tree.nodes["root"].children.append(name)
    facts = {"3_c": _Facts("3_c", {"outputs_passed": True})}
    scans = SiblingScans(tree, facts.get)  # type: ignore[arg-type]
    assert scans.handed_on_before("root", "4_d").name == "3_c"  # type: ignore[union-attr]
    grown = tree.copy()
    grown.nodes["2_b"] = Node("2_b", "Module", "root", 1)
    grown.nodes["root"].children.insert(1, "2_b")  # kept in id order, as the ATB readers keep them
    tree.adopt(grown)
    facts["2_b"] = _Facts("2_b", {"outputs_passed": False})
    for child in ("4_d", "3_c", "2_b"):
        found = scans.handed_on_before("root", child)
        assert (found.name if found else None) == _naive(facts, tree.children("root"), child), child


def test_a_module_of_thousands_of_children_without_outputs_is_scanned_once() -> None:
    """In execution order, each child asks about the ones before it: every child is looked at a
    bounded number of times in all, not once per later sibling."""
    count = 5000
    tree = _flat_tree(count)
    looked: list[str] = []
    facts = {"c0": _Facts("c0", {"outputs_passed": True})}

    def last_output(name: str) -> _Facts | None:
        looked.append(name)
        return facts.get(name)

    scans = SiblingScans(tree, last_output)  # type: ignore[arg-type]
    for child in tree.children("root")[1:]:
        scans.forget(child)
        found = scans.handed_on_before("root", child)
        assert found is not None and found.name == "c0"
    assert len(looked) <= 3 * count, len(looked)


def test_adopting_a_grown_tree_copies_each_parent_that_gains_children_once(monkeypatch) -> None:
    tree = _flat_tree(1)
    grown = tree.copy()
    for i in range(1, 2001):
        grown.nodes[f"c{i}"] = Node(f"c{i}", "Module", "root", 1)
        grown.nodes["root"].children.append(f"c{i}")
    copies: list[str] = []
    real_copy = Node.copy

    def counting_copy(node: Node, children: list[str] | None = None) -> Node:
        copies.append(node.name)
        return real_copy(node, children)

    monkeypatch.setattr(Node, "copy", counting_copy)
    tree.adopt(grown)
    assert tree.children("root") == grown.children("root") and len(tree.nodes) == 2002
    assert copies.count("root") == 1 and len(copies) == 2001  # the new nodes, and their parent once


def test_outermost_candidates_walk_up_once_each_not_over_every_other(monkeypatch) -> None:
    """by_type's outermost candidates among 2,000 siblings: each walks up its own ancestors (a few
    steps), where each asked every other candidate whether it was an ancestor (4 million questions
    for 2,000; 20,000 sibling op folders took minutes). Counted, not timed."""
    from tui_acc.pairing import by_type

    tree = _flat_tree(2000)
    tree.nodes["c0"].children.append("inner")
    tree.nodes["inner"] = Node("inner", "Module", "c0", 2)
    asked = 0
    original = model.NodeTree.is_ancestor

    def counted(self: NodeTree, ancestor: str, name: str) -> bool:
        nonlocal asked
        asked += 1
        return original(self, ancestor, name)

    monkeypatch.setattr(model.NodeTree, "is_ancestor", counted)
    names = [*tree.children("root"), "inner"]
    assert by_type._outermost(tree, names) == tree.children("root")  # "inner" sits inside c0
    assert asked <= 2 * len(names)


def test_sibling_folders_keep_their_id_order_inserted_one_at_a_time() -> None:
    """ATB op folders join their parent's children in folder-id order as they are found, in any order
    (bisect, not a sort per folder)."""
    from tui_acc.dumps.msit.atb_dump import _insert_child

    tree = NodeTree("root", {"root": Node("root", "model", None, 0)})
    ids = list(range(500))
    random.Random(3).shuffle(ids)
    for i in ids:
        name = f"root/{i}_Op"
        tree.nodes[name] = Node(name, "Op", "root", 1)
        _insert_child(tree, "root", name)
    assert tree.children("root") == [f"root/{i}_Op" for i in range(500)]
