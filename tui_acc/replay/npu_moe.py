"""torch_npu's MoE gating replayed, from op-plugin's API docs and the equivalent computation they give
(``docs/context/torch_npu-npu_moe_gating_top_k.md``, ``torch_npu-npu_moe_gating_top_k_softmax.md``).

- ``npu_moe_gating_top_k(x, k, *, bias, k_group, group_count, group_select_mode, renorm,
  norm_type, out_flag, routed_scaling_factor, eps)``: scores ``softmax(x)`` (``norm_type`` 0) or
  ``sigmoid(x)`` (1); experts chosen on ``scores + bias``, within the ``k_group`` best of
  ``group_count`` groups (a group's worth: its largest, ``group_select_mode`` 0, or its two largest
  summed, 1); the first output ``y`` is the chosen experts' scores without the bias, divided by
  their sum plus ``eps`` with sigmoid scores, times ``routed_scaling_factor``;
- ``npu_moe_gating_top_k_softmax(x, finished, k)``: the ``k`` largest of ``softmax(x)``.

The choice is discrete: where the k-th and the next candidate's selection scores are within the
kernel's float32 arithmetic of each other, either may be kept, and that token's row is left out of
the comparison (said); the kept experts themselves are compared by the routing check.
"""

from __future__ import annotations

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, Replayed, ReplayImpossible

# two selection scores closer than this (relative) are a tie the kernel's float32 may break either way
TIE = 2.0**-16


def npu_moe_gating_top_k(call: Call) -> Replayed:
    """``npu_moe_gating_top_k``'s first output, ``y``."""
    x = call.tensor(0, "x", "x")
    if x.ndim != 2:
        raise ReplayImpossible(f"x {list(x.shape)} is not [tokens, experts]")
    k = call.option("k", 1)
    if not isinstance(k, int) or not 1 <= k <= x.shape[1]:
        raise ReplayImpossible(f"k {k!r} not recorded or out of range for {x.shape[1]} experts")
    if call.raw(-1, "input_ids") is not None or call.raw(-1, "tid2eid") is not None:
        raise ReplayImpossible("input_ids / tid2eid given: hash routing is not replayed here")
    norm_type = int(call.option("norm_type", None, 0) or 0)
    if norm_type not in (0, 1):
        raise ReplayImpossible(f"norm_type {norm_type}: not one the docs define (0 softmax, 1 sigmoid)")
    scores = maths.softmax(x, axis=1) if norm_type == 0 else maths.sigmoid(x)
    bias = call.raw(-1, "bias")
    chosen_on = scores + call.wide(bias).reshape(1, -1) if bias is not None else scores
    groups = int(call.option("group_count", None, 1) or 1)
    if groups > 1:
        chosen_on = _best_groups(call, chosen_on, groups)
    indices, ties = _top(chosen_on, k)
    y = np.take_along_axis(scores, indices, axis=1)
    if norm_type == 1:
        y = y / (y.sum(axis=1, keepdims=True) + float(call.option("eps", None, 1e-20) or 1e-20))
    y = y * float(call.option("routed_scaling_factor", None, 1.0) or 1.0)
    return _without_ties(y, ties, x.shape[1])


def _best_groups(call: Call, chosen_on: np.ndarray, groups: int) -> np.ndarray:
    """The selection scores with every group outside each token's ``k_group`` best at -inf."""
    tokens, experts = chosen_on.shape
    if experts % groups:
        raise ReplayImpossible(f"{experts} experts do not split into {groups} groups")
    keep = int(call.option("k_group", None, 1) or 1)
    grouped = chosen_on.reshape(tokens, groups, -1)
    mode = int(call.option("group_select_mode", None, 0) or 0)
    worth = grouped.max(axis=2) if mode == 0 else np.sort(grouped, axis=2)[..., -2:].sum(axis=2)
    best = np.argsort(-worth, axis=1, kind="stable")[:, :keep]
    outside = np.ones((tokens, groups), dtype=bool)
    outside[np.arange(tokens)[:, None], best] = False
    return np.where(outside[..., None], -np.inf, grouped).reshape(tokens, experts)


def _top(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest per row (stable: the lower index first among equals), and which rows hold a
    near-tie at the edge of the choice (or within it, where the order decides the output)."""
    order = np.argsort(-values, axis=1, kind="stable")
    ranked = np.take_along_axis(values, order, axis=1)
    finite = np.where(np.isfinite(ranked), ranked, np.nan)
    gaps = np.abs(np.diff(finite[:, : k + 1], axis=1))
    scale = np.nanmax(np.abs(finite[:, : k + 1]), axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        ties = np.any(gaps <= TIE * np.maximum(scale, 1e-30), axis=1)
    return order[:, :k], ties


def _without_ties(y: np.ndarray, ties: np.ndarray, experts: int) -> Replayed:
    if not ties.any():
        return Replayed(y, reduction=experts, roundings=2)
    rows = np.flatnonzero(~ties)
    note = f"{int(ties.sum())} of {len(ties)} tokens at a near-tie between experts: left out"
    return Replayed(y[rows], reduction=experts, notes=(note,), rows=rows, roundings=2)


def npu_moe_gating_top_k_softmax(call: Call) -> Replayed:
    """``npu_moe_gating_top_k_softmax``'s first output: the ``k`` largest softmax scores per token,
    in decreasing order."""
    x = call.tensor(0, "x", "x")
    finished = call.raw(1, "finished")
    if finished is not None and np.any(finished):
        raise ReplayImpossible("finished tokens given: what the kernel writes for them is not documented")
    k = call.option("k", 2, 1)
    if not isinstance(k, int) or not 1 <= k <= x.shape[-1]:
        raise ReplayImpossible(f"k {k!r} out of range for {x.shape[-1]} experts")
    scores = maths.softmax(x.reshape(-1, x.shape[-1]), axis=1)
    top = -np.sort(-scores, axis=1)[:, :k]  # values only: a near-tie's order does not change them
    return Replayed(top.reshape(*x.shape[:-1], k), reduction=x.shape[-1], roundings=2)


REFERENCES = {
    "NPU.npu_moe_gating_top_k": npu_moe_gating_top_k,
    "NPU.npu_moe_gating_top_k_softmax": npu_moe_gating_top_k_softmax,
}
