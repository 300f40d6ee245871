"""The first rule that can judge a node, in the order walk.py's docstring gives: the hard cases, a
router's kept experts, the weights, the output's own rounding, the replay, the baseline, the error
model, the statistics and the thresholds. One node at a time; what came into it is in its ``Facts``."""

from __future__ import annotations

from dataclasses import replace

from tui_acc.dumps.gather import SUM
from tui_acc.pairing import NodePair
from tui_acc.replay.sampling import output_focus
from tui_acc.tolerances.errors import error_of
from tui_acc.tolerances.thresholds import gains_non_finite, is_float
from tui_acc.verdicts.judging import Judging, integer_differs
from tui_acc.verdicts.port_rules import by_inner_replays, by_quantised_kernel, by_quantised_weight
from tui_acc.verdicts.replay_check import SideReplay
from tui_acc.verdicts.routing import selection_of
from tui_acc.verdicts.rules import (
    Facts,
    Reading,
    Tensors,
    by_error_model,
    by_own_rounding,
    by_replay,
    by_statistics,
    by_threshold,
    by_weights,
    data_inputs,
)


def first_reading(facts: Facts, judging: Judging, node: NodePair | None, compute: bool) -> Reading | None:
    """The first rule that can judge the node (the module docstring's order); None where the replay
    it needs is not known and ``compute`` is False."""
    row = facts.row
    outputs = [t for t in facts.tensors if t.get("role") == "output" and not t.get("error")]
    hard = row.get("error") or row.get("outputs_unknown") or row["outputs_passed"] is None
    if hard or not judging.models or any(gains_non_finite(t) for t in outputs):
        return by_threshold(facts)
    if any(integer_differs(t) for t in outputs):
        return _routed(facts, judging, node, compute, outputs)
    # integer outputs equal to the golden's (a router's kept experts) carry no error to model
    floats = [t for t in outputs if is_float(t.get("golden_dtype")) and is_float(t.get("test_dtype"))]
    return _rules(facts, judging, node, compute, floats)


def _routed(
    facts: Facts, judging: Judging, node: NodePair | None, compute: bool, outputs: Tensors
) -> Reading | None:
    """Integer outputs that differ: no rounding explains them (the thresholds judge), unless they are
    a router's kept experts (routing.py): the top k of its own scores, they flipped between near-equal
    scores and the scores are judged; not the top k, the router chose wrongly."""
    checks = judging.checks
    selection = selection_of(node, facts.tensors) if node is not None and checks is not None else None
    differing = {t.get("slot") for t in outputs if integer_differs(t)}
    if checks is None or selection is None or differing != {selection.indices.slot}:
        return by_threshold(facts)
    known, routing = (True, checks.routing(selection)) if compute else checks.known_routing(selection)
    if not known:
        return None
    if routing is None:  # a file could not be read: the thresholds alone
        return by_threshold(facts)
    slots = f"{selection.indices.slot} against {selection.scores.slot}"
    if not routing.consistent:
        said = (
            f"its kept experts are not the top k of its own scores ({slots}) at {routing.wrong} of "
            f"{routing.rows} tokens (the first: row {routing.first_wrong})"
        )
        return Reading("replay", True, None, None, said)
    scores = [t for t in outputs if t.get("slot") == selection.scores.slot]
    reading = _rules(replace(facts, output_error=error_of(scores[0])), judging, node, compute, scores)
    if reading is None:
        return None
    flip = (
        f"it keeps other experts than the golden at {routing.flipped} of {routing.rows} tokens, the top "
        f"k of its own scores ({slots}): near-equal scores flipped by their error"
    )
    return replace(reading, reason=f"{reading.reason}; {flip}")


def _rules(
    facts: Facts, judging: Judging, node: NodePair | None, compute: bool, outputs: Tensors
) -> Reading | None:
    """The rules after the hard cases, on ``outputs`` (the node's float outputs that can be read)."""
    row = facts.row
    weights = by_weights(facts.tensors, facts.type)
    if weights is not None and weights.local:
        return weights
    if judging.checks is not None and node is not None:  # an int8 weight, through its scale
        checks = judging.checks
        known, quantised = (
            (True, checks.quantised_weight(node)) if compute else checks.known_quantised_weight(node)
        )
        if not known:
            return None
        if quantised is not None and not quantised.consistent:
            return by_quantised_weight(quantised)
    untouched = by_own_rounding(facts.output_error, outputs)
    if untouched is not None:  # nothing for a replay to find: it is not run
        return untouched
    by_inner: Reading | None = None
    inner: tuple[SideReplay, ...] = ()
    if judging.checks is not None and node is not None:
        known, inner = (True, judging.checks.inner(node)) if compute else judging.checks.known_inner(node)
        if not known:
            return None
        by_inner = by_inner_replays(inner) if inner else None
        if by_inner is not None and by_inner.local:  # a record only the test has disagrees: named
            return by_inner
    modelled = by_error_model(facts, outputs, data_inputs(row, facts.tensors), roundings=_roundings(node))
    if by_inner is None and inner:  # all consistent: quiet only for a quantisation within its budget
        explained = modelled.expected_error if modelled is not None else None
        by_inner = by_inner_replays(inner, facts.output_error, explained)
    if _replayable(facts, judging, node):
        assert judging.checks is not None and node is not None  # _replayable says so
        known, replay = (
            (True, judging.checks.replay(node, output_focus(facts.tensors)))
            if compute
            else judging.checks.known_replay(node)
        )
        if not known:
            return None
        found = by_replay(replay) if replay is not None else None
        # a consistent replay of a sample can miss an error in the rows or columns it did not draw:
        # where the output fails while the inputs pass and the model says the error is its own, the
        # model's reading stands (a replay of the whole output is not second-guessed)
        sampled = replay is not None and bool(replay.test.sampled)
        own = facts.failing and facts.inputs_passed is True and modelled is not None and modelled.local
        if found is not None and not found.local and sampled and own:
            return modelled
        if found is not None and not found.local and replay is not None:
            explained = modelled.expected_error if modelled is not None else None
            by_quantisation = by_quantised_kernel(replay.test, facts.output_error, explained)
            if by_quantisation is not None:  # said as what it is: a quantisation
                return by_quantisation
        if found is not None:
            return found
    if by_inner is not None:  # no replay of its own: what the test's own operators inside it say
        return by_inner
    if facts.integers_differ:  # other token ids, other experts: a change no error model describes
        return by_threshold(facts)
    if judging.baseline and row.get("noise_ratio") is not None:
        return by_threshold(facts, rule="baseline")
    if modelled is not None:
        return modelled
    return by_statistics(facts, outputs, data_inputs(row, facts.tensors)) or by_threshold(facts)


def _roundings(node: NodePair | None) -> int:
    """How often the test's output was rounded: once, plus once per rank's partial sum where the
    ranks' outputs are summed (a row-parallel matmul before its all-reduce)."""
    if node is None:
        return 1
    summed = [len(pair.test.parts) for pair in node.outputs if pair.test.merge == SUM]
    return 1 + max(summed, default=0)


def _replayable(facts: Facts, judging: Judging, node: NodePair | None) -> bool:
    """Whether the node is replayed: a reference exists, its inputs are not its own output (an
    in-place op's dumped input was saved after the op overwrote it), and each tensor is one file (a
    rank's shard is no operator's whole input)."""
    if judging.checks is None or node is None or facts.row.get("in_place"):
        return False
    return not any(pair.test.parts for pair in node.tensors) and judging.checks.has_reference(node)
