"""Weights by the same model: a dumped weight against the error its dtype's cast explains.

A port's bug often lives in a weight, not in the arithmetic: a linear whose weight was quantised
with one per-tensor scale where per-channel was meant computes correctly from its own (wrong)
weight, so its replay is consistent, while the weight itself is off the golden's. Casting a float32
weight to bf16 rounds each element once: the cast's relative error is at most ``one_rounding`` rms
(0.17 % for bf16, measured 0.17 % on a real port), a little more if the port rounds another way
than to nearest. A weight more than ``WEIGHT_MARGIN`` times that off the golden was not just cast:
the int8 per-tensor weight of the real port measures 0.99 %, 2.2 times the bound.

Which tensors are weights: module parameters (msprobe L0 ``parameters.*``, role ``param``), and
the weight arguments of the calls that take them (msprobe L1/mix ``Functional.linear``'s argument 1,
ATB ``LinearOperation``'s ``intensor1``, ...). A quantised weight (int8) has no float golden to
compare with here: it is not judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tui_acc.dumps.msprobe.passes import api_of
from tui_acc.tolerances.errors import error_of
from tui_acc.tolerances.rounding import coarser, one_rounding, unit_roundoff

WEIGHT_MARGIN = 2.0

# the argument slots that hold weights, by msprobe API (call counter dropped) or ATB operation type
_WEIGHT_SLOTS = {
    "Functional.linear": {"input.1", "input.2", "input.weight", "input.bias"},
    "Functional.embedding": {"input.1", "input.weight"},
    "Functional.rms_norm": {"input.2", "input.weight"},
    "Functional.layer_norm": {"input.2", "input.3", "input.weight", "input.bias"},
    "Functional.group_norm": {"input.2", "input.3", "input.weight", "input.bias"},
    "NPU.npu_rms_norm": {"input.1", "input.gamma"},
    "LinearOperation": {"intensor1", "intensor2"},
    "RmsNormOperation": {"intensor1"},
}
# ATB's GatherOperation is left out: MindIE gathers hidden states with it too, not only the embedding
# table; a LinearOperation's intensor1 is a weight only when 2-d (a batched matmul's is an activation)
_MSPROBE_RECORD = re.compile(r"^(Functional|Tensor|Torch|NPU|Distributed|Aten|Module)\.")


def is_weight(row: Mapping[str, Any], node_type: str | None = None) -> bool:
    """Whether a tensor row is a weight (see the module docstring)."""
    if row.get("role") == "param":
        return True
    if row.get("role") != "input":
        return False
    node = str(row.get("golden_node") or "")
    key = (api_of(node) if _MSPROBE_RECORD.match(node) else None) or node_type or ""
    if key == "LinearOperation" and row.get("slot") == "intensor1":
        return str(row.get("golden_shape") or "").count(",") == 1
    return str(row.get("slot")) in _WEIGHT_SLOTS.get(key, ())


def cast_bound(golden_dtype: object, test_dtype: object) -> float | None:
    """The largest relative error a cast between the two dtypes explains; None where it is no cast
    (an integer weight: a quantisation, with scales this does not read)."""
    if unit_roundoff(golden_dtype) is None or unit_roundoff(test_dtype) is None:
        return None
    return WEIGHT_MARGIN * one_rounding(coarser(golden_dtype, test_dtype))


def weight_error(row: Mapping[str, Any], node_type: str | None = None) -> tuple[float, float] | None:
    """(relative error, the bound its cast explains) of a weight the weights rule judges; None for any
    other tensor: not a weight, statistics only, a quantised weight, no error measured.

    A weight is off where the error exceeds the bound (``rules.by_weights``); the screens draw it so,
    not by the thresholds, which know nothing of a cast's rounding."""
    if row.get("stats_only") or not is_weight(row, node_type):
        return None
    bound = cast_bound(row.get("golden_dtype"), row.get("test_dtype"))
    error = error_of(row)
    if bound is None or error is None:
        return None
    return error, bound
