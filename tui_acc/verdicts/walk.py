"""A token's nodes judged one at a time, in execution order, then its modules once everything inside
them is judged.

Each node is judged by the first rule that can judge it (``first_rule.py`` applies them in this
order; ``rules.py`` says how each one reads):

1. **threshold**, for what no model softens: a file that could not be read, a NaN or infinity the
   golden lacks, an integer tensor (token ids) that differs. Local where its inputs pass.
2. **weights**: a weight further from the golden's than its dtype's cast explains (``weights.py``);
   an int8 weight that is not the golden's quantised with its own scale (``quantised_weights.py``).
3. **own rounding**: an output within its own rounding of the golden is never local (no replay runs).
4. **replay**: the test side's output against its own inputs, recomputed (``local.py``); for a module
   whose test side runs records the golden has none of (a port's fused operators), their replays
   (the first inconsistent one named; all consistent: not local); for a module
   that passes a descendant's output through, the distance between the two. A consistent replay
   yields to the error model where the output fails, the inputs pass and the model calls it local
   (a sample can miss the rows it did not draw).
5. **baseline** (``--baseline``): its error beyond the noise floor while its inputs are within it.
6. **error model**: its error beyond what its inputs' error explains (``propagation.py``).
7. **threshold**: its output fails the thresholds while its inputs pass (the fallback).

Where a node's inputs were not dumped (ATB child ops, modules called with keyword arguments), or
were overwritten by the op itself (an in-place op), its input is what fed it: the outputs of the
larger of the previous sibling's outputs and the parent's input. Modules are judged again once
everything inside them is (``TokenWalk.finish``): "contains" where an operator inside them is
local; "inherited" where something inside them fails with error that came in; never a ✓ over a
failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.rows import NodeRow, TensorRow
from tui_acc.tolerances.errors import error_of
from tui_acc.tolerances.rounding import coarsest
from tui_acc.tolerances.thresholds import is_float
from tui_acc.verdicts.first_rule import first_reading
from tui_acc.verdicts.glue import by_glue, by_glue_thresholds
from tui_acc.verdicts.judging import Judging, TokenInput, integer_differs
from tui_acc.verdicts.propagation import rotary
from tui_acc.verdicts.rules import (
    Facts,
    Reading,
    Tensors,
    by_error_model,
    data_inputs,
    pass_through,
    type_of,
)
from tui_acc.verdicts.sibling_scans import SiblingScans
from tui_acc.verdicts.verdict import Label, NodeVerdict, TokenVerdict


class TokenWalk:
    """One token's nodes judged in execution order (``judge``), then its modules (``finish``).

    ``compute`` False is what a UI thread asks: no replay runs, and a node whose verdict needs one
    not made yet is left unjudged. ``token_input`` says what fed the token (asked only for a node
    that nothing dumped before it fed).
    """

    def __init__(
        self,
        token: int,
        judging: Judging,
        token_input: Callable[[], TokenInput | None] | None = None,
        compute: bool = True,
        cached: Callable[[str], float | None] | None = None,
    ) -> None:
        """``cached``: for an attention module at a decode step, the largest error its key and value
        projections showed at the earlier tokens (what its KV cache holds, which no dump holds as an
        input); None where they are not known."""
        self.token = token
        self.judging = judging
        self._token_input = token_input
        self._compute = compute
        self._cached = cached
        self.facts: dict[str, Facts] = {}
        self.verdicts: dict[str, NodeVerdict] = {}
        self._siblings = SiblingScans(judging.tree, self._last_output)

    def judge(self, row: NodeRow, tensors: Tensors, node: NodePair | None = None) -> NodeVerdict | None:
        """Judge the next node in execution order from its row, its tensors' rows and what came
        before it; None where a replay it needs is not known and ``compute`` is False."""
        facts = self._facts(row, tensors)
        came = self._diverged()
        if came is not None:  # another token than the golden's: nothing here computes the same thing
            said = f"{came.source}: this token works on another input than the golden's"
            reading: Reading | None = Reading("threshold", False, facts.output_error, None, said)
        else:
            reading = first_reading(facts, self.judging, node, self._compute)
        if reading is None:
            return None
        name = row["golden_node"]
        self._siblings.forget(name)
        self.facts[name] = facts
        self.verdicts[name] = verdict = _verdict(facts, reading)
        return verdict

    _came: TokenInput | None = None
    _came_asked = False

    def _diverged(self) -> TokenInput | None:
        """Where the step before this token chose another token than the golden, what it chose: the
        whole token then works on another input, and none of its operators starts an error."""
        if not self._came_asked and self._token_input is not None:
            self._came, self._came_asked = self._token_input(), True
        return self._came if self._came is not None and not self._came.passed else None

    def result(self, metrics: dict[str, NodeRow], total: int, complete: bool) -> TokenVerdict:
        """The token's verdict as judged so far, beside ``metrics`` (the engine's rows by name)."""
        return TokenVerdict(self.token, self.judging.tree, dict(self.verdicts), metrics, total, complete)

    # --- what came in -------------------------------------------------------------------------

    def _facts(self, row: NodeRow, tensors: Tensors) -> Facts:
        """The inputs' verdict and error: the dumped ones, or where there are none (or they are the
        op's own output, in place) what fed the node."""
        data = data_inputs(row, tensors)
        errors = [e for t in data if (e := error_of(t)) is not None]
        if not errors and data and all(_exact_integers(t) for t in data):
            errors = [0.0]  # token ids (an embedding's) equal to the golden's: nothing came in
        outputs = [e for t in tensors if t.get("role") == "output" and (e := error_of(t)) is not None]
        passed, source = row.get("inputs_passed"), cast(str | None, "files")
        input_error = max(errors) if errors else None
        if passed is None or row.get("in_place") or not errors:
            fed = self._feed(row["golden_node"])
            if fed is not None and (passed is None or row.get("in_place")):
                passed, source = fed.passed, fed.source
            elif passed is None:
                came = self._token_input() if self._token_input is not None else None
                passed = came.passed if came is not None else None
                source = came.source if came is not None else None
            if fed is not None and (row.get("in_place") or not errors):
                input_error = fed.error
        differ = any(integer_differs(t) for t in data)
        # a rotary embedding's frequencies are a buffer rounded to the model's dtype
        buffers = self._model_dtype() if rotary(type_of(row)) else None
        worst = max(outputs) if outputs else None
        return Facts(row, tensors, passed, source, input_error, worst, differ, buffers)

    def _feed(self, name: str) -> _Fed | None:
        """What fed ``name``: the previous sibling with outputs, else its parent's input, looking up.

        Its verdict is that node's; its error the larger of that sibling's output and the parent's
        input: glue code between operators (a residual add above all) mixes the two, and a sum's
        relative error stays within its terms' largest.
        """
        tree = self.judging.tree
        current = name
        while True:
            parent = tree.nodes[current].parent
            if parent is None:
                return None
            above = self.facts.get(parent)
            came_in = above.input_error if above is not None else None
            facts = self._siblings.handed_on_before(parent, current)
            if facts is not None:
                known = [e for e in (facts.output_error, came_in) if e is not None]
                return _Fed(bool(facts.row["outputs_passed"]), max(known) if known else None, facts.name)
            if above is not None and above.inputs_passed is not None:
                return _Fed(above.inputs_passed, came_in, parent)
            current = parent  # a parent with no rows (a container): look one level up

    def _last_output(self, name: str) -> Facts | None:
        """What node ``name`` hands on: its own row, else (a container without rows, the layers'
        list) the last of its children that has one, looking down: the previous layer feeds what
        follows the layers, not whatever ran before them."""
        facts = self.facts.get(name)
        if facts is not None:
            return facts
        for child in reversed(self.judging.tree.children(name)):
            found = self._last_output(child)
            if found is not None:
                return found
        return None

    # --- modules ------------------------------------------------------------------------------

    def finish(
        self, tensors_of: Callable[[str], Tensors], pairs_of: Callable[[str], NodePair | None]
    ) -> list[NodeVerdict]:
        """Judge each module again now that everything inside it is judged; returns the verdicts
        changed.

        A module that passes a descendant's output through is judged by the distance between the two
        (test side); another by the error model over its inputs and every output inside it. Then the
        modules above a local operator are labelled "contains", and those that pass while something
        inside them fails "inherited".
        """
        before = dict(self.verdicts)
        for name, verdict in [] if self._diverged() is not None else list(self.verdicts.items()):
            inside = [n for n in _descendants(self.judging.tree, name) if n in self.verdicts]
            facts = self.facts[name]
            if not self.judging.models or not inside or verdict.rule in ("weights", "replay"):
                continue
            if facts.integers_differ:  # fed other token ids or experts: nothing inside is its own error
                continue
            if facts.row.get("error"):
                continue
            reading = self._module_reading(facts, inside, tensors_of, pairs_of)
            if reading is not None:
                self.verdicts[name] = _verdict(facts, reading)
        self._label_containers()
        return [v for name, v in self.verdicts.items() if v != before.get(name)]

    def _module_reading(
        self,
        facts: Facts,
        inside: Sequence[str],
        tensors_of: Callable[[str], Tensors],
        pairs_of: Callable[[str], NodePair | None],
    ) -> Reading | None:
        """A module's reading once everything inside it is judged: the output it passes through, else
        the error model over its inputs and every output inside it; where neither calls it local, its
        glue code (not at a decode step's attention, whose KV cache is an input no dump holds)."""
        inner = [self.facts[n] for n in inside]
        reading = pass_through(facts, inner, tensors_of, pairs_of, self.judging.checks, self._compute)
        if reading is None:
            own = tensors_of(facts.name)
            outputs = [t for t in own if t.get("role") == "output" and not t.get("error")]
            inputs = [t for t in own if t.get("role") == "input"]
            reading = by_error_model(facts, outputs, inputs, inner)
        if reading is None or not reading.local:
            children = self._judged_children(facts.name)
            # where a module's keyword arguments were not dumped (msit), what they carried is unknown:
            # everything judged before it at this token stands for it (a looser bound, not none)
            before = None if self.judging.whole_inputs else self._carried_before(facts.name)
            decoding = facts.row["token"] != self.judging.first_token and attention(facts.row)
            if facts.row.get("stats_only"):
                passes = self.judging.whole_inputs or self._all_pass_before(facts.name)
                return by_glue_thresholds(facts, children, passes, decoding) or reading
            glue = by_glue(facts, children, before)
            if glue is not None and decoding:
                # at a decode step an attention also reads its KV cache, which no dump holds as an
                # input: what its key and value projections made at the earlier tokens (read only
                # here, where the glue would otherwise be called local)
                cache = self._cached(facts.name) if self._cached is not None else None
                known = [e for e in (cache, before) if e is not None]
                glue = by_glue(facts, children, max(known)) if cache is not None else None
            reading = glue or reading
        return reading

    def _before(self, name: str) -> list[Facts]:
        """Every node judged before module ``name`` at this token, not its ancestors (whose outputs
        come after it), nor nodes fed other token ids or experts."""
        tree = self.judging.tree
        above: set[str] = set()
        parent = tree.nodes[name].parent
        while parent is not None:
            above.add(parent)
            parent = tree.nodes[parent].parent
        found = []
        for node, f in self.facts.items():  # in execution order: up to the module itself
            if node == name:
                break
            if node not in above and not f.integers_differ:
                found.append(f)
        return found

    def _all_pass_before(self, name: str) -> bool:
        """Everything judged before module ``name`` at this token passes the thresholds: what any
        input it was not dumped with can carry, in a statistics dump."""
        return not any(f.failing for f in self._before(name))

    def _carried_before(self, name: str) -> float | None:
        """The largest output error of every node judged before module ``name`` at this token: what any
        input it was not dumped with can carry at most."""
        errors = [f.output_error for f in self._before(name) if f.output_error is not None]
        return max(errors, default=None)

    def _model_dtype(self) -> str | None:
        """The test model's dtype: as its dump names it, else the coarsest its operators' outputs
        have at this token (a bf16 model's hidden states, beside the float32 its rope computes in)."""
        if self.judging.model_dtype is not None:
            return self.judging.model_dtype
        return coarsest(f.row.get("test_dtype") for f in self.facts.values())

    def _label_containers(self) -> None:
        """ "contains" on every module above a local node; "inherited" on every module that passes
        while something inside it fails with error that came in (never a ✓ over a failure)."""
        tree = self.judging.tree
        for name, verdict in list(self.verdicts.items()):
            if verdict.label not in ("local", "inherited"):
                continue
            parent = tree.nodes[name].parent
            while parent is not None:
                above = self.verdicts.get(parent)
                if above is not None and verdict.label == "local" and above.label != "contains":
                    said = f"{name} inside it starts an error; itself: {above.reason}"
                    shown = self.facts[parent].inputs_passed
                    self.verdicts[parent] = replace(above, label="contains", reason=said, inputs_passed=shown)
                elif above is not None and above.label is None:
                    said = f"{name} inside it fails with error that came in; itself: {above.reason}"
                    self.verdicts[parent] = replace(
                        above, label="inherited", reason=said, inputs_passed=False
                    )
                parent = tree.nodes[parent].parent

    def _judged_children(self, name: str) -> list[Facts]:
        """The judged nodes right below ``name``, in execution order, looking through nodes without
        rows (a ModuleList holding the layers)."""
        found: list[Facts] = []
        for child in self.judging.tree.children(name):
            facts = self.facts.get(child)
            found += [facts] if facts is not None else self._judged_children(child)
        return found


@dataclass(frozen=True)
class _Fed:
    """What fed a node whose inputs were not dumped: that node's verdict, its error, its name."""

    passed: bool | None
    error: float | None
    source: str


def _verdict(facts: Facts, reading: Reading) -> NodeVerdict:
    """A reading as the node's verdict: local where the rule says so, inherited where its output fails
    otherwise. In (``inputs_passed``) as the rule saw the inputs: they pass for a local node (they
    do not explain its error), fail for an inherited one (they do), and are the thresholds' verdict
    of them otherwise."""
    label: Label | None = "local" if reading.local else "inherited" if facts.failing else None
    if label == "inherited":
        shown: bool | None = False
    elif label == "local" and reading.rule in ("threshold", "baseline"):
        shown = facts.inputs_passed  # local by a threshold: its inputs pass, or none was known
    elif label == "local":
        shown = True
    else:
        shown = facts.inputs_passed
    return NodeVerdict(
        node=facts.name,
        label=label,
        rule=reading.rule,
        local_error=reading.local_error,
        expected_error=reading.expected_error,
        reason=reading.reason,
        inputs_passed=shown,
        inputs_from=facts.inputs_from,
        input_error=facts.input_error,
        output_error=facts.output_error,
        outputs_passed=facts.row["outputs_passed"],
        operator=reading.operator,
    )


def attention(row: NodeRow) -> bool:
    """Whether a node is an attention (by its types or name)."""
    names = f"{row.get('golden_type')} {row.get('test_type')} {row.get('golden_node')}".lower()
    return "attention" in names or "attn" in names


def _descendants(tree: NodeTree, name: str) -> list[str]:
    return [node.name for node in tree.preorder(name) if node.name != name]


def _exact_integers(row: TensorRow) -> bool:
    """An integer tensor with every value equal to the golden's (token ids, positions)."""
    if row.get("stats_only") or row.get("error"):
        return False
    floats = is_float(row.get("golden_dtype")) or is_float(row.get("test_dtype"))
    return not floats and row.get("max_abs_err") in (0, 0.0)
