"""Readings of an Ascend port's own arithmetic, which the golden has no record of: the records only
the test has inside a module both sides have (``by_inner_replays``), and an int8 weight held against
the golden's through its scale (``by_quantised_weight``). ``first_rule.py`` asks them in its order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tui_acc.numbers import number
from tui_acc.tolerances.rounding import MARGIN
from tui_acc.verdicts.quantised_weights import QuantisedWeight
from tui_acc.verdicts.replay_check import SideReplay
from tui_acc.verdicts.rules import Reading


def by_quantised_weight(found: QuantisedWeight) -> Reading:
    """An int8 weight that is not the golden's weight quantised with its own scale is where the error
    starts (a scale or a conversion gone wrong: the kernel computes correctly from it)."""
    if found.consistent:
        said = f"its int8 weight is the golden's quantised with its scale ({found.reason})"
        return Reading("weights", False, found.error, found.expected, said)
    said = f"its int8 weight is not the golden's quantised with its scale: {found.reason}"
    return Reading("weights", True, found.error, found.expected, said)


# a port's own operators that round to integers: the quantisation error they bring is by design
QUANTISING = frozenset({"npu_dynamic_quant", "npu_quantize"})


def by_inner_replays(
    replays: Sequence[SideReplay], output_error: float | None = None, explained: float | None = None
) -> Reading | None:
    """A node whose test side computes with operators the golden has no record of (a port's fused
    kernels inside a module both sides have), judged by those operators' own replays, in execution
    order: the first that disagrees with its inputs is where the error starts (the node is local, and
    the reading names it).

    Where every one is consistent, a replay cannot see a wrong argument or weight (each operator is
    held against what it was given): the node is not local only where it quantises (a W8A8 linear:
    ``npu_dynamic_quant`` then ``npu_quant_matmul``) and its error (``output_error``) is within what
    its inputs and rounding explain (``explained``, the error model's bound) plus its int8
    quantisation: ``MARGIN * sqrt(2)`` times the activations' rounding to integers that the quantise
    step's replay measured (the weights', per channel, taken as large). Otherwise None: the other
    rules judge it (a fused attention called with a defaulted ``scale`` is consistent and wrong)."""
    wrong = next((r for r in replays if r.verdict == "disagrees"), None)
    if wrong is not None:
        error = wrong.local_error
        off = number(error) if error is not None else f"far ({wrong.reason})"
        said = f"{off} off its replay"
        return Reading(
            "replay",
            True,
            error,
            wrong.tolerance,
            f"inside it, the test's {wrong.node}{_on_rank(wrong)} is {said} from its own inputs; rounding at "
            f"{wrong.dtype} explains up to {number(wrong.tolerance)}",
            operator=wrong.node,
        )
    if not replays or any(r.verdict == "impossible" for r in replays):
        return None
    noise = max((r.expected or 0.0 for r in replays if r.type in QUANTISING), default=0.0)
    if not noise or not any(_ported(r.node, r.type) for r in replays) or output_error is None:
        return None
    # only the activations' rounding was measured: the weights', per channel, taken as large
    budget = quantisation_budget(explained, math.sqrt(2.0) * noise)
    if not output_error <= budget:
        return None
    kinds = ", ".join(dict.fromkeys(r.type for r in replays))
    said = (
        f"the test's own operators inside it ({kinds}) each give their output from their own inputs, "
        f"and its error, {number(output_error)}, is within what its inputs and its int8 quantisation "
        f"explain ({number(budget)}): a quantisation by design"
    )
    return Reading("replay", False, output_error, budget, said)


def by_quantised_kernel(
    test: SideReplay, output_error: float | None, explained: float | None
) -> Reading | None:
    """A kernel that computes from integer operands (an ATB ``LinearOperation`` fed int8 by the
    dynamic quantisation before it) and gives its output from them: its error against the float
    golden is put down to their quantisation where it is within what its inputs explain plus
    ``MARGIN`` times the operands' own rounding to integers (``test.quantisation``, activations and
    weights already in quadrature). A wrong int8 weight or scale fed to a right kernel is not ruled
    out by this (an ATB dump gives no ``weight_scale`` to hold the weight against the golden's), and
    the reading says so. None otherwise (the replay's own reading stands: consistent, not local)."""
    noise = test.quantisation
    if test.verdict != "consistent" or not noise or output_error is None:
        return None
    budget = quantisation_budget(explained, noise)
    if not output_error <= budget:
        return None
    said = (
        f"its own int8 inputs give its output ({test.reason}), and its error, {number(output_error)}, is "
        f"within what its inputs and their int8 quantisation explain ({number(budget)}): a quantisation, "
        "unless its int8 weight or scale is itself wrong (the kernel computes from what it is given)"
    )
    return Reading("replay", False, output_error, budget, said)


def quantisation_budget(explained: float | None, noise: float) -> float:
    """What a quantised node's error may be: what its inputs and rounding explain (the error
    model's bound) plus ``MARGIN`` times its operands' rounding to integers (``noise``, relative)."""
    return (explained or 0.0) + MARGIN * noise


def _ported(node: str, node_type: str) -> bool:
    """A port's own operator: a torch_npu call (msprobe's ``NPU.*``) or an ATB operation."""
    return node.startswith("NPU.") or node_type.endswith("Operation")


def _on_rank(replay: SideReplay) -> str:
    """ ", on rank 1" where the replay compared one rank of a gathered collective."""
    return f", on rank {replay.rank}," if replay.rank is not None else ""
