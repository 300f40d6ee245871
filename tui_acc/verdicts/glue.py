"""A module whose own code, between the operators inside it, starts the error: glue code (a residual
add, a reshape, an attention's score arithmetic between its projections) or a tensor no operator made
(a buffer). Judged once everything inside the module is (``walk.py``), only where the module's other
rules call nothing local."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tui_acc.numbers import number
from tui_acc.tolerances.rounding import coarser, local_bound
from tui_acc.verdicts.propagation import GROWTH, explained_bound
from tui_acc.verdicts.rules import Facts, Reading


def by_glue(facts: Facts, children: Sequence[Facts], also: float | None = None) -> Reading | None:
    """A module whose own code between its operators adds error: an operator inside it takes in more
    error (its dumped inputs') than everything before it there carries (the module's inputs, the
    earlier operators' outputs) explains. That is glue code (a residual add, a reshape) or a tensor
    no operator made (a buffer the port computes otherwise: a rotary embedding's frequencies).
    Local, or None. ``also``: the error of what else its operators read beside the module's inputs
    (an attention's KV cache at a decode step; inputs not dumped). A module's buffers (``Facts``)
    are allowed their rounding."""
    if facts.row.get("stats_only"):
        return None  # statistics are computed in each tensor's own dtype: too coarse for this
    carried = _larger(facts.input_error, also)  # the most error anything before the child carries
    for child in children:
        error = child.input_error
        # an operator fed other token ids or other experts takes in a change, not an error
        dumped = (
            child.inputs_from == "files" and not child.row.get("stats_only") and not child.integers_differ
        )
        if dumped and carried is not None and error is not None and not math.isnan(error):
            dtype = coarser(child.row.get("golden_dtype"), child.row.get("test_dtype"), facts.buffers)
            bound = explained_bound(carried, local_bound(dtype))
            if error > bound:
                said = (
                    f"the input of {child.name} carries {number(error)}, more than "
                    f"{GROWTH:g}x the {number(carried)} of everything before it here plus rounding "
                    f"({number(bound)}): the error appears in this module's own code (glue, or a "
                    "tensor no operator made: a buffer)"
                )
                return Reading("error model", True, error, bound, said)
        carried = _larger(carried, child.output_error)  # a running maximum: linear in the children
    return None


def _larger(*errors: float | None) -> float | None:
    """The largest of the errors that are known numbers (None and NaN left out); None without one."""
    return max((e for e in errors if e is not None and not math.isnan(e)), default=None)


def by_glue_thresholds(
    facts: Facts, children: Sequence[Facts], before_passes: bool, cache: bool
) -> Reading | None:
    """A statistics dump's glue, by the threshold rule: the module fails while what came into it
    passes, and the first operator inside it that does not pass is one whose dumped inputs fail
    (nothing inside made them). ``by_glue`` leaves statistics alone (a norm's difference bounds an
    error from below only: a rotation keeps it), so this is the threshold rule, said as such.

    ``before_passes``: everything judged before the module at this token passes (what stands for
    inputs not dumped). Where the norms' differences are known, the failing input's must also
    exceed what the module's inputs and the operators before it carry, grown, plus a rounding
    (``explained_bound``). ``cache``: the module is a decode step's attention, which also reads its
    KV cache."""
    if not facts.failing or facts.inputs_passed is not True or not before_passes:
        return None
    carried = [facts.input_error]
    for child in children:
        if child.integers_differ:
            return None  # fed other token ids or experts: what follows changes, and no error is said
        if child.inputs_from == "files" and child.inputs_passed is False:
            known = [e for e in carried if e is not None and not math.isnan(e)]
            error = child.input_error
            if known and error is not None:
                # statistics near their tolerance cross it by rounding alone: the norms' differences
                # must be beyond what everything before it carries, grown, plus a rounding
                dtype = coarser(child.row.get("golden_dtype"), child.row.get("test_dtype"))
                if error <= explained_bound(max(known), local_bound(dtype)):
                    return None
            own = "its own code or its KV cache" if cache else "its own code"
            norms = (
                f"; their norm is {number(error)} off against {number(max(known))} before it"
                if known and error is not None
                else ""
            )
            said = (
                f"its inputs pass the thresholds and nothing inside it fails before {child.name}, whose "
                f"dumped inputs fail them{norms}: the error appears in {own} (the threshold rule: "
                "a statistics dump holds no data to replay or model)"
            )
            return Reading("threshold", True, child.input_error, None, said)
        if child.failing:
            return None  # an operator inside fails first: its own verdict says where the error is
        carried.append(child.output_error)
    return None
