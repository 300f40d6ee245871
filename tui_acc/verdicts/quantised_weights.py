"""A quantised weight held against the golden's float weight, through its own scale.

A W8A8 port's linear holds ``weight`` in int8 and ``weight_scale`` per output channel (vllm-ascend's
``w8a8_dynamic``: ``weight = round(W / weight_scale)``, symmetric). Its replay cannot see a wrong
scale or a wrongly converted weight (the kernel computes correctly from what it was given), and a
cast's rule does not apply to an integer. What can be checked is the conversion itself: every
int8 element must be one of the integers next to ``W / weight_scale`` for the golden's float
``W`` (either of the two only at a tie, within the rounding of a bf16 checkpoint the port may have
quantised from). A 2 % error in the scale moves every element above 25 by more than a step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tui_acc.dumps.loading import load_side
from tui_acc.dumps.model import DumpError, DumpIndex, TensorRef
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.replay.distance import within_steps

# the golden's weight may be a bf16 checkpoint's values widened, the port's quantised from the bf16
CHECKPOINT_SLACK = 2.0**-8
SCALE_SLOTS = ("parameters.weight_scale", "parameters.deq_scale", "parameters.scale")


@dataclass(frozen=True)
class QuantisedWeight:
    """The check's outcome: whether the int8 weight is the golden's quantised with its scale, why,
    the relative error of the dequantised weight against the golden's, and what rounding explains."""

    consistent: bool
    reason: str
    error: float
    expected: float


def _ref(refs: list[TensorRef], *slots: str) -> TensorRef | None:
    return next((r for slot in slots for r in refs if r.slot == slot and r.has_data), None)


def check(
    golden: DumpIndex, test: DumpIndex, token: int, golden_node: str, test_node: str
) -> QuantisedWeight | None:
    """None where the node holds no int8 weight with a per-channel scale beside a float golden weight
    of one shape (nothing to check), or a tensor cannot be read."""
    test_refs = test.tensors(token, test_node)
    weight_ref, scale_ref = _ref(test_refs, "parameters.weight"), _ref(test_refs, *SCALE_SLOTS)
    golden_ref = _ref(golden.tensors(token, golden_node), "parameters.weight")
    if weight_ref is None or scale_ref is None or golden_ref is None:
        return None
    try:
        weight = load_side(weight_ref, None, test.load_policy)
        if weight.dtype.kind not in "iu" or weight.ndim != 2:
            return None
        scale = np.asarray(load_side(scale_ref, None, test.load_policy), dtype=np.float64).reshape(-1)
        reference = np.asarray(load_side(golden_ref, None, golden.load_policy), dtype=np.float64)
    except (TensorLoadError, DumpError, OSError, ValueError):
        return None
    # stored [out, in], or [in, out] as vllm-ascend transposes its W8A8 weights after loading: a
    # square weight is read both ways, and either that holds the golden's values will do
    readings = [w for w in (weight, weight.T) if w.shape == reference.shape]
    if not readings or scale.size not in (1, reference.shape[0]) or not np.all(scale > 0):
        return None
    unrounded = np.clip(reference / scale.reshape(-1, 1), -128, 127)
    checked = [(within_steps(unrounded, w, CHECKPOINT_SLACK), w) for w in readings]
    (consistent, reason, expected), weight = next(
        ((found, w) for found, w in checked if found[0]), checked[0]
    )
    dequantised = weight.astype(np.float64) * scale.reshape(-1, 1)
    size = float(np.linalg.norm(reference))
    error = float(np.linalg.norm(dequantised - reference)) / size if size > 0 else 0.0
    return QuantisedWeight(consistent, reason, error, expected)
