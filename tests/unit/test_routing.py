"""An MoE router's kept experts against its own scores: a flip between near-equal scores is no fault,
a router that does not keep its top k is; an operator fed other experts, or a token after a step
that chose another token, starts no error.

The arrays are the top-k definition worked by hand (the k largest scores of a row, ties either way),
not made by the code under test.
"""

from __future__ import annotations

import numpy as np

from tui_acc.dumps.model import Node, NodeTree, TensorRef
from tui_acc.pairing.model import NodePair, TensorPair
from tui_acc.verdicts.judging import Judging, TokenInput
from tui_acc.verdicts.routing import Routing, Selection, check, selection_of
from tui_acc.verdicts.walk import TokenWalk


def test_kept_experts_are_checked_against_the_top_k_of_their_own_scores() -> None:
    scores = np.array([[0.50, 0.49, 0.10, 0.00], [0.1, 0.2, 0.3, 0.4]])
    # row 0 keeps experts 0 and 1, its top 2, where the golden kept 0 and 2: a flip
    # row 1 keeps 3 and 2, its top 2 in another order, as the golden did
    found = check(scores, np.array([[0, 1], [3, 2]]), np.array([[0, 2], [2, 3]]))
    assert found == Routing(rows=2, flipped=1, wrong=0, first_wrong=None) and found.consistent
    # keeping experts 2 and 3 of row 0 (scores 0.10 and 0.00 over 0.50 and 0.49) is no top 2
    wrong = check(scores, np.array([[2, 3], [3, 2]]), np.array([[0, 1], [3, 2]]))
    assert (wrong.wrong, wrong.first_wrong, wrong.consistent) == (1, 0, False)
    # equal scores at the boundary: either is the top k
    assert check(np.array([[0.5, 0.5, 0.5, 0.0]]), np.array([[0, 2]]), np.array([[0, 1]])).consistent
    # an index out of range, or one kept twice, is no top k
    assert not check(scores[:1], np.array([[0, 4]]), np.array([[0, 1]])).consistent
    assert not check(scores[:1], np.array([[0, 0]]), np.array([[0, 1]])).consistent


def _tensor(node: str, slot: str, role: str, **fields: object) -> dict[str, object]:
    return {"golden_node": node, "slot": slot, "role": role, "golden_dtype": "float32",
            "test_dtype": "bfloat16", "numel": 4, **fields}  # fmt: skip


def _router() -> tuple[NodePair, list[dict[str, object]], dict[str, object]]:
    """A router at token 1: scores [1, 4] within their rounding, kept weights [1, 2], kept experts
    [1, 2] (integers) that differ from the golden's."""
    name = "gate"
    slots = (("input.0", "input"), ("output.0", "output"), ("output.1", "output"), ("output.2", "output"))
    pairs = tuple(
        TensorPair(1, name, name, TensorRef(slot, role, f"{slot}.pt"), TensorRef(slot, role, f"{slot}.pt"))  # type: ignore[arg-type]
        for slot, role in slots
    )
    node = NodePair(1, name, name, "TopKRouter", "TopKRouter", 1, pairs)
    rows = [
        _tensor(name, "input.0", "input", rel_euclidean=0.004, passed=True, golden_shape="[1, 32]"),
        _tensor(
            name,
            "output.0",
            "output",
            rel_euclidean=0.003,
            passed=True,
            golden_shape="[1, 4]",
            test_shape="[1, 4]",
        ),
        _tensor(
            name,
            "output.1",
            "output",
            rel_euclidean=0.2,
            passed=False,
            golden_shape="[1, 2]",
            test_shape="[1, 2]",
        ),
        _tensor(
            name,
            "output.2",
            "output",
            golden_dtype="int64",
            test_dtype="int64",
            max_abs_err=1.0,
            passed=False,
            golden_shape="[1, 2]",
            test_shape="[1, 2]",
        ),
    ]
    row = {"token": 1, "golden_node": name, "golden_type": "TopKRouter", "test_type": "TopKRouter",
           "outputs_passed": False, "inputs_passed": True}  # fmt: skip
    return node, rows, row


class _Checks:
    def __init__(self, routing: Routing) -> None:
        self.found = routing
        self.asked: list[Selection] = []

    def has_reference(self, node: NodePair) -> bool:
        return False

    def inner(self, node: NodePair) -> tuple:
        return ()  # nothing only the test has inside it

    def quantised_weight(self, node: NodePair) -> None:
        return None  # no int8 weight

    def routing(self, selection: Selection) -> Routing:
        self.asked.append(selection)
        return self.found


def _tree(*children: str) -> NodeTree:
    nodes = {"root": Node("root", "Model", None, 0, list(children))}
    nodes.update({c: Node(c, "T", "root", 1) for c in children})
    return NodeTree("root", nodes)


def test_a_flip_between_near_equal_scores_is_not_the_routers_fault() -> None:
    node, rows, row = _router()
    selection = selection_of(node, rows)
    assert selection is not None and (selection.scores.slot, selection.indices.slot) == (
        "output.0",
        "output.2",
    )
    checks = _Checks(Routing(rows=1, flipped=1, wrong=0))
    verdict = TokenWalk(1, Judging(_tree("gate"), checks)).judge(row, rows, node)  # type: ignore[arg-type]
    assert checks.asked == [selection]
    assert verdict is not None and verdict.label == "inherited"  # its output fails: came in, not its own
    assert "flipped" in verdict.reason and "top k of its own scores" in verdict.reason


def test_a_router_that_does_not_keep_its_top_k_is_local() -> None:
    node, rows, row = _router()
    checks = _Checks(Routing(rows=1, flipped=1, wrong=1, first_wrong=0))
    verdict = TokenWalk(1, Judging(_tree("gate"), checks)).judge(row, rows, node)  # type: ignore[arg-type]
    assert verdict is not None and verdict.label == "local" and "not the top k" in verdict.reason


def test_an_operator_fed_other_experts_is_not_judged_by_the_error_model() -> None:
    name = "experts"
    rows = [
        _tensor(name, "input.0", "input", rel_euclidean=0.005, passed=True),
        _tensor(
            name, "input.1", "input", golden_dtype="int64", test_dtype="int64", max_abs_err=2.0, passed=False
        ),
        _tensor(name, "output.0", "output", rel_euclidean=0.3, passed=False),
    ]
    row = {"token": 0, "golden_node": name, "golden_type": "Experts", "test_type": "Experts",
           "outputs_passed": False, "inputs_passed": False}  # fmt: skip
    verdict = TokenWalk(0, Judging(_tree(name))).judge(row, rows)  # type: ignore[arg-type]
    assert verdict is not None and verdict.label == "inherited" and verdict.rule == "threshold"


def test_nothing_starts_an_error_at_a_token_after_another_token_was_chosen() -> None:
    name = "linear"
    rows = [
        _tensor(name, "input.0", "input", rel_euclidean=0.001, passed=True),
        _tensor(name, "output.0", "output", rel_euclidean=0.5, passed=False),
    ]
    row = {"token": 2, "golden_node": name, "golden_type": "Linear", "test_type": "Linear",
           "outputs_passed": False, "inputs_passed": True}  # fmt: skip
    came = TokenInput(False, "token 1 chose 55, the golden 216")
    verdict = TokenWalk(2, Judging(_tree(name)), lambda: came).judge(row, rows)  # type: ignore[arg-type]
    assert verdict is not None and verdict.label == "inherited"
    assert verdict.reason.startswith("token 1 chose 55, the golden 216")
    # the same operator at a token whose input is the golden's is its own error
    own = TokenWalk(2, Judging(_tree(name)), lambda: None).judge(row, rows)  # type: ignore[arg-type]
    assert own is not None and own.label == "local"
