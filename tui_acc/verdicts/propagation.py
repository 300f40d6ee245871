"""The error model where no replay is possible: how much error an operator's inputs explain.

A tensor's error is its relative Euclidean distance from the golden, ``r = ||t - g|| / ||g||``
(msit's "relative euclidean"); for a statistics-only row, the norms' relative difference, which
is a lower bound of it (``| ||t|| - ||g|| | <= ||t - g||``).

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

from tui_acc.verdicts.masks import masked, saturates
from tui_acc.verdicts.rounding import unit_roundoff

GROWTH = 2.0
# The model judges outputs of at least this many elements per row: the relative error of a handful
# of sums is their condition number's to decide (a gate's single logit that nearly cancels), and the
# condition number is not in the dump.
MIN_WIDTH = 16


def relative_error(row: Mapping[str, Any]) -> float | None:
    """A tensor row's relative error as measured: relative Euclidean distance, or for a
    statistics-only row the norms' relative difference (None when it has neither, or could not be
    read)."""
    if row.get("error"):
        return None
    value = row.get("norm_rel_diff") if row.get("stats_only") else row.get("rel_euclidean")
    return abs(value) if isinstance(value, (int, float)) and not math.isnan(value) else None


def error_of(row: Mapping[str, Any]) -> float | None:
    """A tensor row's relative error as the model reads it: ``relative_error`` of a float tensor,
    None for what it says nothing of: an integer tensor (token ids: a difference is not an error
    that grows), a mask's fill values (their difference between dtypes is no error), a golden of
    zeros (an infinite relative error)."""
    value = relative_error(row)
    floats = (
        unit_roundoff(row.get("golden_dtype")) is not None
        and unit_roundoff(row.get("test_dtype")) is not None
    )
    if value is None or not floats or masked(row) or math.isinf(value):
        return None
    return value


def modelled(row: Mapping[str, Any]) -> bool:
    """Whether the error model can read this tensor: data (statistics are computed in the tensor's
    own dtype, a rounding of their own), and no mask."""
    return not row.get("stats_only") and error_of(row) is not None


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


def amplification(node_type: str | None, inputs: Sequence[Mapping[str, Any]]) -> float | None:
    """How much more than ``GROWTH`` an operator may amplify the relative error its inputs carry.

    A softmax turns an absolute error ``d`` in its input into a relative error of about ``d`` in its
    output (``exp(x + d) = exp(x)(1 + d)``), so an input with relative error ``r`` and scores up to
    ``x`` reaches ``r x``: scores of 20 take 1 % in to 20 % out with nothing wrong. The factor is
    the largest score the dump states (``golden_max``, at least 1): very negative scores (a mask's
    fill) weigh nothing after ``exp``, and a mask at the dtype's limit is no score. None where no
    float input states one. A fused attention (SDPA, flash, paged, MLA) holds such a softmax over
    scores the dump does not hold: None, the error model does not judge it (the thresholds do,
    or a ``[replay]`` plug-in). 1 for every other operator."""
    if not node_type:
        return 1.0
    if _FUSED_ATTENTION.search(node_type):
        return None
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


def explained_bound(input_error: float, rounding_bound: float, growth: float = GROWTH) -> float:
    """The largest output error ``input_error`` and the operator's own rounding explain."""
    return growth * input_error + rounding_bound
