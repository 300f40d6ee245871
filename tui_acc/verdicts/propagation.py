"""The error model where no replay is possible: how much error an operator's inputs explain.

A tensor's error is read as ``tolerances/errors.py`` says (its relative Euclidean distance from the
golden).

An operator ``y = f(x)`` passes on the error its inputs carry, scaled by how sensitive ``f`` is:
relative error passes through a linear map, a norm and an activation about unchanged (a norm
keeps the relative error along ``x``; a square doubles it by arithmetic: ``Tensor.pow`` failing
after a noisy input is transmission, not a fault). So the output's error is explained when

    r_out <= GROWTH * r_in + local_bound(dtype)

with ``r_in`` the largest error among its inputs (or, where its inputs were not dumped, of what fed
it) and ``local_bound`` the rounding the operator adds itself (``rounding.py``). ``GROWTH`` = 2
covers the square and leaves room for the mild growth of a reduction that partly cancels; an
operator above that band adds error of its own. A module's "inputs" here are its own inputs and
every output inside it: a module adds error only where its own glue code does (a residual add, a
reshape) beyond what everything before it carries.

The model is conservative by design: it flags an operator only when its error clearly grows past
what came in. Faults smaller than the incoming drift are for the replay (``local.py``) to see.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tui_acc.tolerances.masks import masked, saturates
from tui_acc.tolerances.rounding import unit_roundoff

GROWTH = 2.0
# The model judges outputs of at least this many elements per row: the relative error of a handful
# of sums is their condition number's to decide (a gate's single logit that nearly cancels), and the
# condition number is not in the dump.
MIN_WIDTH = 16


def width(row: Mapping[str, Any]) -> int | None:
    """The last dimension of a tensor row's shape (None: unknown; 1 for a 0-dim tensor)."""
    shape = str(row.get("golden_shape") or "").strip("[]")
    if not shape:
        return 1 if row.get("golden_shape") == "[]" else None
    last = shape.split(",")[-1].strip()
    return int(last) if last.isdigit() else None


def narrow(row: Mapping[str, Any]) -> bool:
    """Fewer than MIN_WIDTH elements per row: each a handful of sums whose cancellation, which the
    dump does not hold, may amplify any error that came in."""
    found = width(row)
    return found is not None and found < MIN_WIDTH


def angle_condition(node_type: str | None, inputs: Sequence[Mapping[str, Any]]) -> float | None:
    """How much a rotary position embedding amplifies its own rounding: its outputs are cos and sin
    of ``position * frequency``, and a frequency rounded by ``d`` moves the angle by ``angle * d``
    (the frequencies are a buffer no dump holds, cast with the model). The largest angle is about the
    largest position (the first frequency is 1): a bf16 rope at position 255 is some 4 % off an fp32
    one with nothing wrong. None for a rotary embedding whose positions were not dumped (msit keeps
    no keyword argument): its condition is unknown, and the error model does not judge it. 1 for
    every other operator."""
    if not node_type or not _ROTARY.search(node_type):
        return 1.0
    positions = [
        abs(float(value))
        for t in inputs
        if unit_roundoff(t.get("golden_dtype")) is None
        and isinstance(value := t.get("golden_max"), (int, float))
    ]
    return max([1.0, *positions]) if positions else None


def rotary(node_type: str | None) -> bool:
    """Whether the operator is a rotary position embedding (its cos and sin from a buffer of
    frequencies the port casts with the model)."""
    return bool(node_type) and _ROTARY.search(str(node_type)) is not None


def amplification(node_type: str | None, inputs: Sequence[Mapping[str, Any]]) -> float | None:
    """How much more than ``GROWTH`` an operator may amplify the relative error its inputs carry.

    A softmax turns an absolute error ``d`` in its input into a relative error of about ``d`` in its
    output (``exp(x + d) = exp(x)(1 + d)``), so an input with relative error ``r`` and scores up to
    ``x`` reaches ``r x``: scores of 20 take 1 % in to 20 % out with nothing wrong. The factor is
    the largest score the dump states (``golden_max``, at least 1): very negative scores (a mask's
    fill) weigh nothing after ``exp``, and a mask at the dtype's limit is no score. None where no
    float input states one. A fused attention (SDPA, flash, paged, MLA) holds such a softmax over
    scores the dump does not hold: None, the error model does not judge it (the thresholds do,
    or a ``[replay]`` plug-in). sin and cos of angles up to ``x`` take a relative error ``r`` in to
    about ``r x`` out the same way (a rotary embedding's, inside it at L1 or mix); a power (a
    norm's square) doubles it. 1 for every other operator."""
    if not node_type:
        return 1.0
    if _FUSED_ATTENTION.search(node_type):
        return None
    if _POWER.search(node_type):
        return 2.0  # a square (a norm's) doubles a relative error, more where it sits on large values
    if _ANGLE.search(node_type):
        angles = [
            max(abs(float(t.get("golden_max") or 0.0)), abs(float(t.get("golden_min") or 0.0)))
            for t in inputs
            if unit_roundoff(t.get("golden_dtype")) is not None
        ]
        return max([1.0, *angles]) if angles else None
    if not _SOFTMAX.search(node_type):
        return 1.0
    scores = [
        abs(float(value))
        for t in inputs
        if unit_roundoff(t.get("golden_dtype")) is not None and not masked(t)
        if isinstance(value := t.get("golden_max"), (int, float))
        and math.isfinite(value)
        and not saturates(value, t.get("golden_dtype"))
    ]
    return max([1.0, *scores]) if scores else None


_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
# sin and cos of angles (a rotary embedding's, inside it at L1 or mix): a relative error r on angles
# up to x moves them by r x, as a softmax's scores move its exponentials; the same factor
_ANGLE = re.compile(r"(?:^|\.)(?:sin|cos)(?:\.|$)")
_POWER = re.compile(r"(?:^|\.)(?:pow|square|__pow__)(?:\.|$)")
# fused attention kernels by their API or ATB operation name (not a module that merely has
# "Attention" in its class name: a module is judged against the operators inside it)
_FUSED_ATTENTION = re.compile(
    r"scaled_dot_product|flash_?attention|fusion_?attention|fused_infer_attention|incre_flash"
    r"|prompt_flash|multi_head_attention_forward|SelfAttentionOperation|PagedAttentionOperation"
    r"|MultiLatentAttention|RingMLA",
    re.IGNORECASE,
)

# LlamaRotaryEmbedding, ATB's RopeOperation, a "rope" module; not LinearOperation's "rOperation"
_ROTARY = re.compile(r"[Rr]otary|Rope|RoPE|ROPE|(?<![A-Za-z])rope(?![a-z])")


def cancellation(
    node_type: str | None,
    inputs: Sequence[Mapping[str, Any]],
    weights: Sequence[Mapping[str, Any]],
    output: Mapping[str, Any],
) -> float | None:
    """How much a linear map amplifies the relative error that comes in, read from the golden's norms.

    For ``y = W x`` an error ``e`` in ``x`` arrives as ``W e``. With no preferred direction, ``W e``
    has a norm of about ``||W||_F ||e|| / sqrt(K)`` (``K`` the length of each sum), so relative to
    ``||y||`` the input's relative error is multiplied by::

        A = ||W||_F ||x|| / (sqrt(K) ||y||)

    About 1 where the sums do not cancel (``||y||`` as large as random rows make it); large where
    they do: a gate's one logit near 0, whose relative error is its inputs' times the condition
    number of its dot product (``sum |w x| / |sum w x|``, which ``A`` bounds by Cauchy-Schwarz up to
    ``sqrt(K)``). Also the factor on the accumulation's rounding: ``u sum |w x| / |y| <= u sqrt(K) A``.
    None where the map is not a linear one with one data input and one dumped weight, or a norm is
    missing (msit's torch dumps keep no weights among a module's tensors)."""
    if not linear_map(node_type) or len(inputs) != 1 or len(weights) != 1:
        return None
    x_norm, w_norm, y_norm = (row.get("golden_norm") for row in (inputs[0], weights[0], output))
    reduction = width(inputs[0])
    numbers = (x_norm, w_norm, y_norm)
    if reduction is None or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers):
        return None
    assert (
        isinstance(x_norm, (int, float))
        and isinstance(w_norm, (int, float))
        and isinstance(y_norm, (int, float))
    )
    if y_norm <= 0:
        return math.inf
    return float(w_norm) * float(x_norm) / (math.sqrt(reduction) * float(y_norm))


def linear_map(node_type: str | None) -> bool:
    """Whether the operator is a linear map (sums of products: a matmul, a linear layer)."""
    return bool(node_type) and _LINEAR.search(str(node_type)) is not None


def spread(elements: int | None) -> float:
    """How far above its expectation a few elements' error may lie: the relative error of an output
    of ``n`` elements is the rms of ``n`` roughly independent terms, whose spread around the rms of
    many is about ``1 / sqrt(n)`` of it; ``1 + 3 / sqrt(n)`` keeps three of those (4 for a single
    value, 1.75 for 16, 1.1 for 1024). 1 where the count is unknown and large outputs are assumed."""
    if elements is None or elements <= 0:
        return 1.0
    return 1.0 + 3.0 / math.sqrt(elements)


# linear maps whose weight is a dumped tensor of the node: torch's Linear and GPT-2's Conv1D modules,
# F.linear and the matmul calls, ATB's LinearOperation, torch_npu's quantised and grouped matmuls
# (an MoE router's scores are its input times its weight)
_LINEAR = re.compile(r"linear|Conv1D|matmul|addmm|LinearOperation|Router", re.IGNORECASE)


def explained_bound(input_error: float, rounding_bound: float, growth: float = GROWTH) -> float:
    """The largest output error ``input_error`` and the operator's own rounding explain.

    ``growth`` is first order; where the incoming error is large its second order shows (a product of
    two inputs each off by ``e`` is off by ``2e + e**2``, more where the errors sit on the same large
    values): ``1 + 2e`` more."""
    return growth * input_error * (1.0 + 2.0 * input_error) + rounding_bound
