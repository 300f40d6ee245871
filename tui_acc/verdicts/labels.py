"""Labels of a token's node rows: where an error starts (local), where it came in (inherited), and
which modules hold it (contains); and which rule decided, with its numbers.

Each node is judged by the first rule that can judge it (``rules.py`` says how each one reads):

1. **threshold**, for what no model softens: a file that could not be read, a NaN or infinity the
   golden lacks, an integer tensor (token ids) that differs. Local where its inputs pass.
2. **weights**: a weight further from the golden's than its dtype's cast explains (``weights.py``).
3. **own rounding**: an output within its own rounding of the golden is never local (no replay runs).
4. **replay**: the test side's output against its own inputs, recomputed (``local.py``); for a module
   that passes a descendant's output through, the distance between the two. A consistent replay
   yields to the error model where the output fails, the inputs pass and the model calls it local
   (a sample can miss the rows it did not draw).
5. **baseline** (``--baseline``): its error beyond the noise floor while its inputs are within it.
6. **error model**: its error beyond what its inputs' error explains (``propagation.py``).
7. **threshold**: its output fails the thresholds while its inputs pass (the fallback).

Where a node's inputs were not dumped (ATB child ops, modules called with keyword arguments), or
were overwritten by the op itself (an in-place op), its input is what fed it: the outputs of the
larger of the previous sibling's outputs and the parent's input. Modules are judged
again once everything inside them is (``finish``): "contains" where an operator inside them is
local, or fails while they pass; never a ✓ over a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tui_acc.dumps.gather import SUM
from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.rows import NodeRow, TensorRow
from tui_acc.verdicts.local import LocalChecks
from tui_acc.verdicts.propagation import error_of
from tui_acc.verdicts.rules import (
    Reading,
    by_error_model,
    by_glue,
    by_own_rounding,
    by_replay,
    by_threshold,
    by_weights,
    pass_through,
    type_of,
)
from tui_acc.verdicts.thresholds import gains_non_finite, is_float
from tui_acc.verdicts.weights import is_weight

Tensors = Sequence[TensorRow]


@dataclass(frozen=True)
class Judging:
    """What judging a comparison's nodes needs besides their rows."""

    tree: NodeTree
    checks: LocalChecks | None = None  # None: no replay
    baseline: bool = False  # tensors were judged against a baseline's noise floor
    # False: the thresholds alone (one dump checked on its own, whose "failing" is an anomaly: no
    # error to model)
    models: bool = True
    first_token: int = 0  # a later token is a decode step: its attention reads a cache no dump holds
    # whether a module's dumped inputs are all it takes in: msit leaves keyword arguments out (a
    # Llama attention's position embeddings), so what came in cannot be told from its glue there
    whole_inputs: bool = True

    def prefetch(self, node: NodePair, tensors: Tensors) -> None:
        """See the module's ``prefetch``: a worker replays a node its judge will want replayed."""
        prefetch(self, node, tensors)


@dataclass(frozen=True)
class TokenInput:
    """What came into a token before any of its nodes: whether it was the golden's, and why not."""

    passed: bool
    source: str


def diverged(previous: int, golden_top1: object, test_top1: object) -> TokenInput | None:
    """A decode step's input where the step before chose another token: every node of it works on
    another token than the golden's, so nothing in it starts an error (where the token ids are not
    dumped to say so themselves)."""
    if golden_top1 is None or test_top1 is None or golden_top1 == test_top1:
        return None
    return TokenInput(False, f"token {previous} chose {test_top1}, the golden {golden_top1}")


def prefetch(judging: Judging, node: NodePair, tensors: Tensors) -> None:
    """Replay ``node`` now (on a worker, while others compare tensors) where judging it will: the
    judge then finds the replay made. Skipped where the cheaper rules decide without it."""
    if judging.checks is None or not judging.models or any(pair.test.parts for pair in node.tensors):
        return
    if not judging.checks.has_reference(node):
        return
    outputs = [t for t in tensors if t.get("role") == "output"]
    if not outputs or any(t.get("error") or gains_non_finite(t) or _integer_differs(t) for t in outputs):
        return
    errors = [e for t in outputs if (e := error_of(t)) is not None]
    if errors and by_own_rounding({"output_error": max(errors)}, outputs) is not None:
        return
    weights = by_weights(tensors, node.test_type or node.golden_type)
    if weights is None or not weights.local:
        judging.checks.replay(node)


def judge_one(
    row: NodeRow,
    tensors: Tensors,
    earlier: Mapping[str, NodeRow],
    judging: Judging,
    node: NodePair | None = None,
    compute: bool = True,
    token_input: Callable[[], TokenInput | None] | None = None,
) -> bool:
    """Set ``row``'s verdict from its tensors and the rows before it (``earlier``, by golden name).

    ``token_input``: what fed the token (asked only for a node nothing dumped before it fed). Returns False,
    leaving the row unjudged, where a reading it needs is not known and ``compute`` is False (what
    a UI thread asks: it never replays).
    """
    _set_inputs(row, tensors, earlier, judging.tree, token_input)
    reading = _reading(row, tensors, judging, node, compute)
    if reading is None:
        return False
    apply(row, reading)
    return True


def _reading(
    row: NodeRow, tensors: Tensors, judging: Judging, node: NodePair | None, compute: bool
) -> Reading | None:
    """The first rule that can judge the node (the module docstring's order); None where the replay
    it needs is not known and ``compute`` is False."""
    failing = row["outputs_passed"] is False and not row.get("outputs_unknown")
    outputs = [t for t in tensors if t.get("role") == "output" and not t.get("error")]
    hard = row.get("error") or row.get("outputs_unknown") or row["outputs_passed"] is None
    if hard or not judging.models or any(gains_non_finite(t) or _integer_differs(t) for t in outputs):
        return by_threshold(row, failing)
    weights = by_weights(tensors, type_of(row))
    if weights is not None and weights.local:
        return weights
    untouched = by_own_rounding(row, outputs)
    if untouched is not None:  # nothing for a replay to find: it is not run
        return untouched
    modelled = by_error_model(row, outputs, _data_inputs(row, tensors), roundings=_roundings(node))
    if _replayable(row, judging, node):
        assert judging.checks is not None and node is not None  # _replayable says so
        known, replay = (True, judging.checks.replay(node)) if compute else judging.checks.known_replay(node)
        if not known:
            return None
        found = by_replay(replay) if replay is not None else None
        # a consistent replay of a sample can miss an error in the rows or columns it did not draw:
        # where the output fails while the inputs pass and the model says the error is its own, the
        # model's reading stands (a replay of the whole output is not second-guessed)
        sampled = replay is not None and bool(replay.test.sampled)
        own = failing and row.get("inputs_effective") is True and modelled is not None and modelled.local
        if found is not None and not found.local and sampled and own:
            return modelled
        if found is not None:
            return found
    if judging.baseline and row.get("noise_ratio") is not None:
        return by_threshold(row, failing, rule="baseline")
    return modelled if modelled is not None else by_threshold(row, failing)


def _roundings(node: NodePair | None) -> int:
    """How often the test's output was rounded: once, plus once per rank's partial sum where the
    ranks' outputs are summed (a row-parallel matmul before its all-reduce)."""
    if node is None:
        return 1
    summed = [len(pair.test.parts) for pair in node.outputs if pair.test.merge == SUM]
    return 1 + max(summed, default=0)


def _replayable(row: Mapping[str, Any], judging: Judging, node: NodePair | None) -> bool:
    """Whether the node is replayed: a reference exists, its inputs are not its own output (an
    in-place op's dumped input was saved after the op overwrote it), and each tensor is one file (a
    rank's shard is no operator's whole input)."""
    if judging.checks is None or node is None or row.get("in_place"):
        return False
    return not any(pair.test.parts for pair in node.tensors) and judging.checks.has_reference(node)


def apply(row: NodeRow, reading: Reading) -> None:
    """Put a reading's verdict on the row."""
    failing = row["outputs_passed"] is False and not row.get("outputs_unknown")
    row["rule"] = reading.rule
    row["local_error"] = reading.local_error
    row["expected_error"] = reading.expected_error
    row["reason"] = reading.reason
    row["suspect"] = bool(reading.local)
    row["label"] = "local" if reading.local else "inherited" if failing else None


def _set_inputs(
    row: NodeRow,
    tensors: Tensors,
    earlier: Mapping[str, NodeRow],
    tree: NodeTree,
    token_input: Callable[[], TokenInput | None] | None,
) -> None:
    """The inputs' verdict and error: the dumped ones, or where there are none (or they are the
    op's own output, in place) what fed the node."""
    data = _data_inputs(row, tensors)
    errors = [e for t in data if (e := error_of(t)) is not None]
    outputs = [e for t in tensors if t.get("role") == "output" and (e := error_of(t)) is not None]
    row["output_error"] = max(outputs) if outputs else None
    row["inputs_effective"], row["inputs_from"] = row["inputs_passed"], "files"
    row["input_error"] = max(errors) if errors else None
    if row["inputs_passed"] is None or row.get("in_place") or not errors:
        fed, source = _feed(row["golden_node"], earlier, tree)
        if fed is not None and (row["inputs_passed"] is None or row.get("in_place")):
            row["inputs_effective"], row["inputs_from"] = bool(fed["passed"]), source
        elif row["inputs_passed"] is None:
            came = token_input() if token_input is not None else None
            row["inputs_effective"] = came.passed if came is not None else None
            row["inputs_from"] = came.source if came is not None else None
        if fed is not None and (row.get("in_place") or not errors):
            row["input_error"] = fed["error"]


def _feed(
    name: str, earlier: Mapping[str, NodeRow], tree: NodeTree
) -> tuple[dict[str, Any] | None, str | None]:
    """What fed ``name``: the previous sibling with outputs, else its parent's input, looking up.

    Its verdict is that node's; its error the larger of that sibling's output and the parent's input:
    glue code between operators (a residual add above all) mixes the two, and a sum's relative
    error stays within its terms' largest.
    """
    current = name
    while True:
        parent = tree.nodes[current].parent
        if parent is None:
            return None, None
        siblings = tree.children(parent)
        before = [earlier[s] for s in siblings[: siblings.index(current)] if s in earlier]
        parent_row = earlier.get(parent)
        came_in = parent_row.get("input_error") if parent_row is not None else None
        for row in reversed(before):
            if row["outputs_passed"] is not None and not row.get("outputs_unknown"):
                errors = [e for e in (row.get("output_error"), came_in) if isinstance(e, (int, float))]
                fed = {"passed": row["outputs_passed"], "error": max(errors) if errors else None}
                return fed, row["golden_node"]
        if parent_row is not None and parent_row.get("inputs_effective") is not None:
            return {"passed": parent_row["inputs_effective"], "error": came_in}, parent
        current = parent  # a parent with no rows (a container): look one level up


def finish(
    judged: Mapping[str, NodeRow],
    tensors_of: Callable[[str], Tensors],
    pairs_of: Callable[[str], NodePair | None],
    judging: Judging,
    compute: bool = True,
) -> list[NodeRow]:
    """Judge each module again now that everything inside it is judged; returns the rows changed.

    A module that passes a descendant's output through is judged by the distance between the two
    (test side); another by the error model over its inputs and every output inside it. Then the
    modules above a local operator are labelled "contains", as are those that pass while something
    inside them fails.
    """
    changed: dict[str, NodeRow] = {}
    for name, row in judged.items():
        inside = [judged[n] for n in _descendants(judging.tree, name) if n in judged]
        if not judging.models or not inside or row.get("rule") in ("weights", "replay") or row.get("error"):
            continue
        before = (row.get("rule"), row.get("label"))
        reading = _module_reading(name, row, inside, judged, tensors_of, pairs_of, judging, compute)
        if reading is not None:
            apply(row, reading)
        if (row.get("rule"), row.get("label")) != before:
            changed[name] = row
    return list({**changed, **_label_containers(judging.tree, judged)}.values())


def _module_reading(
    name: str,
    row: NodeRow,
    inside: Sequence[NodeRow],
    judged: Mapping[str, NodeRow],
    tensors_of: Callable[[str], Tensors],
    pairs_of: Callable[[str], NodePair | None],
    judging: Judging,
    compute: bool,
) -> Reading | None:
    """A module's reading once everything inside it is judged: the output it passes through, else
    the error model over its inputs and every output inside it; where neither calls it local, its
    glue code (not at a decode step's attention, whose KV cache is an input no dump holds)."""
    reading = pass_through(row, inside, tensors_of, pairs_of, judging.checks, compute)
    if reading is None:
        own = tensors_of(name)
        outputs = [t for t in own if t.get("role") == "output" and not t.get("error")]
        inputs = [t for t in own if t.get("role") == "input"]
        reading = by_error_model(row, outputs, inputs, inside)
    if reading is None or not reading.local:
        children = _judged_children(judging.tree, name, judged)
        decode_attention = row["token"] != judging.first_token and _attention(row)
        glue = judging.whole_inputs and not decode_attention
        reading = (by_glue(row, children) if glue else None) or reading
    return reading


def _label_containers(tree: NodeTree, judged: Mapping[str, NodeRow]) -> dict[str, NodeRow]:
    """Label "contains" every module above a local operator, and every one that passes while
    something inside it fails; returns those changed."""
    changed: dict[str, NodeRow] = {}
    for name, row in judged.items():
        local = row.get("label") == "local"
        failing = local or row.get("label") == "inherited" or row["outputs_passed"] is False
        if not failing:
            continue
        parent = tree.nodes[name].parent
        while parent is not None:
            above = judged.get(parent)
            if (
                above is not None
                and (local or above.get("label") is None)
                and above.get("label") != "contains"
            ):
                above["label"], above["suspect"] = "contains", False
                changed[parent] = above
            parent = tree.nodes[parent].parent
    return changed


def _judged_children(tree: NodeTree, name: str, judged: Mapping[str, NodeRow]) -> list[NodeRow]:
    """The rows right below ``name``, in execution order, looking through nodes without rows (a
    ModuleList holding the layers)."""
    found: list[NodeRow] = []
    for child in tree.children(name):
        row = judged.get(child)
        found += [row] if row is not None else _judged_children(tree, child, judged)
    return found


def _attention(row: Mapping[str, Any]) -> bool:
    names = f"{row.get('golden_type')} {row.get('test_type')} {row.get('golden_node')}".lower()
    return "attention" in names or "attn" in names


def _descendants(tree: NodeTree, name: str) -> list[str]:
    return [node.name for node in tree.preorder(name) if node.name != name]


def _data_inputs(row: Mapping[str, Any], tensors: Tensors) -> list[TensorRow]:
    """The inputs that carry data from the operators before (not its weights)."""
    node_type = type_of(row)
    return [t for t in tensors if t.get("role") == "input" and not is_weight(t, node_type)]


def _integer_differs(row: Mapping[str, Any]) -> bool:
    """An integer tensor (token ids, positions) whose values differ: no rounding explains it."""
    if row.get("stats_only"):
        return False
    floats = is_float(row.get("golden_dtype")) and is_float(row.get("test_dtype"))
    return not floats and row.get("max_abs_err") not in (0, 0.0, None)


def first_suspect(tree: NodeTree, rows: Mapping[str, Any]) -> Any:
    """The innermost, earliest local node in execution order: a module and its child can both
    qualify (the parent's output fails because the child's does); the child is the answer."""

    def search(name: str) -> NodeRow | None:
        for child in tree.children(name):
            found = search(child)
            if found is not None:
                return found
        row = rows.get(name)
        return row if row is not None and row.get("label") == "local" else None

    return search(tree.root)
