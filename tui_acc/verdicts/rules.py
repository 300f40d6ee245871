"""The rules that judge a node, each a reading: local or not, the error measured, what was allowed.

``walk.py`` says which rule judges which node; each function here reads one rule's evidence (a
node's ``Facts``: its metric row, its tensors' rows and what came into it) and returns ``None``
where the rule cannot judge (no reference, no inputs, nothing dumped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tui_acc.numbers import number
from tui_acc.pairing import NodePair, TensorPair
from tui_acc.rows import SAME_DATA_FIELDS, NodeRow, TensorRow
from tui_acc.tolerances.errors import modelled, relative_error
from tui_acc.tolerances.rounding import coarser, local_bound
from tui_acc.verdicts.local import LocalChecks, NodeReplay
from tui_acc.verdicts.propagation import (
    GROWTH,
    amplification,
    angle_condition,
    cancellation,
    explained_bound,
    linear_map,
    narrow,
    spread,
    width,
)
from tui_acc.verdicts.verdict import Rule
from tui_acc.verdicts.weights import is_weight, weight_error

Tensors = Sequence[TensorRow]


@dataclass(frozen=True)
class Facts:
    """What the rules read of one node: its metric row (the engine's), its tensors' rows, and what
    came into it (``walk.py``): the thresholds' verdict of its inputs, or of what fed it where they
    were not dumped, and which that was; the largest relative error among its inputs (or what fed
    it) and among its outputs."""

    row: NodeRow
    tensors: Tensors
    inputs_passed: bool | None
    inputs_from: str | None  # "files", or the node whose outputs stood for its inputs
    input_error: float | None
    output_error: float | None
    # an integer input differs from the golden's (other token ids, other experts chosen): what it
    # changes is no error to model
    integers_differ: bool = False
    # the dtype its buffers were cast to, where it reads some (a rotary embedding's frequencies, cast
    # with the model and used in float32): their rounding is allowed too
    buffers: str | None = None

    @property
    def name(self) -> str:
        """The node's golden name."""
        return self.row["golden_node"]

    @property
    def type(self) -> str | None:
        """The operator's type as the test names it, else the golden's."""
        return type_of(self.row)

    @property
    def failing(self) -> bool:
        """Its outputs fail the thresholds (not merely because a file could not be read)."""
        return self.row["outputs_passed"] is False and not self.row.get("outputs_unknown")


@dataclass(frozen=True)
class Reading:
    """One rule's verdict on one node."""

    rule: Rule
    local: bool
    local_error: float | None = None  # the error the rule measured
    expected_error: float | None = None  # the most it allows (None: a threshold, not an error)
    reason: str = ""
    operator: str | None = None  # the test's own operator inside the node that the reading names


def by_threshold(facts: Facts, rule: Rule = "threshold") -> Reading:
    """Today's rule, and the fallback: local where the output fails while the inputs pass."""
    failing, row = facts.failing, facts.row
    local = failing and facts.inputs_passed is not False
    what = "the noise floor" if rule == "baseline" else "the thresholds"
    if row.get("error"):
        reason = f"a tensor could not be compared: {row.get('error')}"
    elif not failing:
        reason = f"its outputs are within {what}"
    elif local:
        where = "" if facts.inputs_from in ("files", None) else f" (fed by {facts.inputs_from})"
        inputs = "its inputs pass" + where if facts.inputs_passed else "no input was dumped"
        reason = f"its output fails {what} while {inputs}"
    else:
        reason = f"its output fails {what}, and so do its inputs"
    return Reading(rule, local, facts.output_error, None, reason)


def by_weights(tensors: Tensors, node_type: str | None) -> Reading | None:
    """The node's weights against what their cast explains; None where it has no float weight."""
    worst: tuple[float, float, TensorRow] | None = None
    for tensor in tensors:
        judged = weight_error(tensor, node_type)
        if judged is None:
            continue
        error, bound = judged
        if worst is None or _ratio(error, bound) > _ratio(worst[0], worst[1]):
            worst = (error, bound, tensor)
    if worst is None:
        return None
    error, bound, tensor = worst
    cast = f"a cast to {tensor.get('test_dtype')} explains up to {number(bound)}"
    if error > bound:
        reason = f"its weight {tensor.get('slot')} is {number(error)} off the golden's; {cast}"
        return Reading("weights", True, error, bound, reason)
    return Reading("weights", False, error, bound, f"its weights are within their cast ({cast})")


def by_replay(replay: NodeReplay) -> Reading | None:
    """The test side's output against its own replay; None where it could not be replayed, or the
    golden's replay shows the reference is not what the operator computes. A test consistent with
    its replay but called with other arguments than the golden's (an eps of 0.5 for 1e-06) computes
    what it was told, wrongly: local."""
    test = replay.test
    error, bound = test.local_error, test.tolerance
    if test.verdict == "impossible" or not replay.reference_holds:
        return None
    sample = f", {test.sampled} replayed" if test.sampled else ""
    explains = f"rounding at {test.dtype} explains up to {number(bound)}"
    if test.verdict == "consistent" and replay.arguments:
        said = "; ".join(replay.arguments)
        return Reading(
            "replay", True, error, bound, f"its own inputs give its output, but its arguments differ: {said}"
        )
    if test.verdict == "consistent":
        said = f"its own inputs give its output: {test.reason}{sample}"
        return Reading("replay", False, error, bound, said)
    said = f"{number(error)} off its replay from its own inputs" if error is not None else test.reason
    return Reading("replay", True, error, bound, f"its output is {said}; {explains}{sample}")


def by_own_rounding(output_error: float | None, outputs: Tensors) -> Reading | None:
    """An output within the rounding the operator itself may add of the golden's: whatever came in, it
    cannot have added more (an error of its own would have to cancel what came in exactly), so there
    is nothing for a replay to find. ``output_error``: the largest of its outputs'. None otherwise
    (the other rules judge it)."""
    if not outputs or not all(modelled(t) for t in outputs) or output_error is None:
        return None
    dtype = coarser(*(t.get(f"{side}_dtype") for t in outputs for side in ("golden", "test")))
    bound = local_bound(dtype)
    if not output_error <= bound:
        return None
    said = f"its output is {number(output_error)} off the golden's, within its own rounding ({number(bound)})"
    return Reading("error model", False, output_error, bound, said)


def by_error_model(
    facts: Facts,
    outputs: Tensors,
    inputs: Tensors = (),
    inside: Sequence[Facts] = (),
    roundings: int = 1,
) -> Reading | None:
    """The output's error against what its inputs (and, for a module, every output inside it) carry;
    None where either is unknown, or an output is beyond the model (``propagation.modelled``).

    ``roundings``: how often the output was rounded to its dtype (a tensor summed from k ranks'
    partial sums, each rounded before the sum, was rounded k + 1 times).
    The rounding allowed is that of the coarser of the two sides' dtypes (both sides' roundings
    show in the distance between them), over a reduction as long as the widest input's rows. A
    narrow output (a gate's single logit) may amplify what came in without bound: it is local only
    where nothing came in beyond rounding."""
    if not outputs or not all(modelled(t) for t in outputs):
        return None
    output_error = facts.output_error
    carried = [facts.input_error] + [f.output_error for f in inside]
    known = [e for e in carried if e is not None and not math.isnan(e)]
    if output_error is None or math.isnan(output_error) or not known:
        return None
    came_in = max(known)
    sides = [t.get(f"{side}_dtype") for t in outputs for side in ("golden", "test")]
    dtype = coarser(*sides, facts.buffers)
    reduction = max([w for t in inputs if (w := width(t)) is not None], default=1)
    condition = angle_condition(facts.type, inputs)
    if condition is None:
        return None
    # a module's inside outputs carry whatever its softmax amplified: only a leaf amplifies here
    amplified = 1.0 if inside else amplification(facts.type, inputs)
    if amplified is None:
        return None
    weights = [t for t in facts.tensors if is_weight(t, facts.type) and not t.get("stats_only")]
    cancels = None if inside else cancellation(facts.type, inputs, weights, outputs[0])
    cancelling = max(1.0, cancels) if cancels is not None else 1.0
    rounding = local_bound(dtype, reduction, roundings, cancelling) * condition
    what = "every output inside it" if inside else "its inputs"
    if cancels is None and any(narrow(t) for t in outputs) and came_in > rounding:
        said = (
            f"{number(output_error)}, from inputs carrying {number(came_in)}: an output this narrow can "
            "amplify its inputs' error beyond any fixed growth (cancellation), and its weight was not "
            "dumped to tell how much: not judged local"
        )
        return Reading("error model", False, output_error, None, said)
    # a sum's few values each carry their own projection of the incoming error (elementwise maps do not)
    elements = min([n for t in outputs if isinstance(n := t.get("numel"), int)], default=None)
    # (and a module's own matrices, which no node inside it stands for: an experts block's weights)
    own_matrices = any(
        t.get("role") == "param" and str(t.get("golden_shape")).count(",") >= 1 for t in facts.tensors
    )
    few = spread(elements) if (linear_map(facts.type) and not inside) or (inside and own_matrices) else 1.0
    growth = GROWTH * amplified * cancelling * few
    bound = explained_bound(came_in, rounding, growth)
    said = (
        f"its error {number(output_error)} against {number(came_in)} carried by {what}: "
        f"{growth:.3g}x that plus its own rounding allows {number(bound)}"
    )
    if cancelling > 1.0:
        said += f" (its sums cancel: condition {cancelling:.3g})"
    return Reading("error model", output_error > bound, output_error, bound, said)


def by_statistics(facts: Facts, outputs: Tensors, inputs: Tensors) -> Reading | None:
    """A statistics-only node that fails its thresholds while its inputs pass, weighed by the one
    statistic that measures an error (the L2 norm's relative difference, a lower bound of the
    relative error): where its norm is no further off than ``GROWTH`` times its inputs' plus its
    own rounding, what fails is where its values moved (a maximum, a minimum), and they moved with
    its inputs: a norm moves a minimum by 3 % for a 1 % input. Not local, then; None otherwise (the
    thresholds judge it)."""
    if not facts.failing or facts.inputs_passed is not True:
        return None
    if not outputs or not all(t.get("stats_only") for t in outputs):
        return None
    out = [e for t in outputs if (e := relative_error(t)) is not None]
    came = [e for t in inputs if t.get("stats_only") and (e := relative_error(t)) is not None]
    if not out or not came:
        return None
    worst, carried = max(out), max(came)
    dtype = coarser(*(t.get(f"{side}_dtype") for t in outputs for side in ("golden", "test")))
    bound = explained_bound(carried, local_bound(dtype))
    if worst > bound:
        return None
    said = (
        f"its statistics fail, but its norm is {number(worst)} off against {number(carried)} in its "
        f"inputs' ({GROWTH:g}x that plus its rounding allows {number(bound)}): its extremes moved "
        "with its inputs"
    )
    return Reading("threshold", False, worst, bound, said)


def pass_through(
    facts: Facts,
    inside: Sequence[Facts],
    tensors_of: Callable[[str], Tensors],
    pairs_of: Callable[[str], NodePair | None],
    checks: LocalChecks | None,
    compute: bool,
) -> Reading | None:
    """A module whose golden output is bit for bit an output inside it (an attention's ``o_proj``): its
    test output is judged by its distance from the same output on the test side."""
    own = [t for t in tensors_of(facts.name) if t.get("role") == "output" and not t.get("error")]
    if not own:
        return None
    output = own[0]
    source = _same_golden_data(output, inside, tensors_of)
    if source is None:
        return None
    bound = local_bound(coarser(output.get("golden_dtype"), output.get("test_dtype")))
    name = source["golden_node"]
    if _fingerprint(output, "test") == _fingerprint(source, "test"):
        return Reading("replay", False, 0.0, bound, f"it passes the output of {name} through unchanged")
    distance = _test_distance(output, source, pairs_of, checks, compute)
    if distance is None:
        return None
    said = f"its output is {number(distance)} off that of {name}, which it passes through in the golden"
    return Reading("replay", distance > bound, distance, bound, f"{said}; rounding allows {number(bound)}")


def _fingerprint(row: Mapping[str, Any], side: str) -> tuple[Any, ...]:
    return tuple(row.get(f"{side}_{key}") for key in SAME_DATA_FIELDS)


def _same_golden_data(
    output: TensorRow, inside: Sequence[Facts], tensors_of: Callable[[str], Tensors]
) -> TensorRow | None:
    """The last output inside the module that holds the module's golden output, bit for bit (equal
    shape, dtype, max, min, mean and norm of a tensor that is not constant)."""
    wanted = _fingerprint(output, "golden")
    if any(v is None for v in wanted) or output.get("golden_max") == output.get("golden_min"):
        return None
    for facts in reversed(inside):
        for tensor in tensors_of(facts.name):
            if tensor.get("role") == "output" and _fingerprint(tensor, "golden") == wanted:
                return tensor
    return None


def _test_distance(
    output: TensorRow,
    source: TensorRow,
    pairs_of: Callable[[str], NodePair | None],
    checks: LocalChecks | None,
    compute: bool,
) -> float | None:
    """The test side's relative distance of the module's output from its source: the norms' where
    only statistics were dumped (a lower bound), else the tensors', read once by ``checks``."""
    if output.get("stats_only") or source.get("stats_only"):
        own, other = output.get("test_norm"), source.get("test_norm")
        if isinstance(own, (int, float)) and isinstance(other, (int, float)) and other:
            return abs(own - other) / abs(other)
        return None
    if checks is None:
        return None
    pairs = [_tensor_pair(pairs_of(r["golden_node"]), r["slot"]) for r in (output, source)]
    if pairs[0] is None or pairs[1] is None:
        return None
    if not compute:
        known, found = checks.known_distance(pairs[0], pairs[1])
        return found if known else None
    return checks.pass_through(pairs[0], pairs[1])


def _tensor_pair(node: NodePair | None, slot: str) -> TensorPair | None:
    return next((t for t in node.tensors if t.slot == slot), None) if node is not None else None


def data_inputs(row: NodeRow, tensors: Tensors) -> list[TensorRow]:
    """The inputs that carry data from the operators before (not its weights)."""
    node_type = type_of(row)
    return [t for t in tensors if t.get("role") == "input" and not is_weight(t, node_type)]


def type_of(row: NodeRow) -> str | None:
    """The operator's type as the test names it (the run under suspicion), else the golden's."""
    found = row.get("test_type") or row.get("golden_type")
    return str(found) if found else None


def _ratio(error: float, bound: float) -> float:
    return error / bound if bound > 0 else math.inf if error > 0 else 0.0
