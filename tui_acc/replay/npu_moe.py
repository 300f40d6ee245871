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
from tui_acc.replay.call import Call, NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.npu_quant import dequant_scale

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
    indices, ties = top_k(chosen_on, k)
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


def top_k(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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


def npu_grouped_matmul(call: Call) -> Replayed:
    """``torch_npu.npu_grouped_matmul``'s first output (op-plugin
    ``docs/context/torch_npu-npu_grouped_matmul.md``): group i's rows of x (``group_type`` 0, the m
    axis split by ``group_list``: cumulative with ``group_list_type`` 0, sizes with 1, ``[[index,
    size]]`` with 2) times its weight, ``y_i = x_i @ w_i + b_i``; int8 inputs dequantised,
    ``(x_i @ w_i + b_i) * scale_i`` (``* per_token_scale`` per row; a float bias after); the
    activation of ``act_type`` (0 none, 1 relu, 2 gelu tanh, 5 silu). ``split_item`` 2 or 3: one output
    of every group's rows; 0 or 1: a list, the first group's."""
    xs, weights = _listed(call, 0, "x"), _listed(call, 1, "weight")
    if call.raw(-1, "antiquant_scale") is not None or call.keyword.get("antiquant_scale"):
        raise ReplayImpossible("antiquant_scale given: the weight-only quantised form is not replayed here")
    if len(weights) == 1 and weights[0].ndim == 3:
        weights = list(weights[0])  # one [E, K, N] tensor: a weight per group
    act = int(call.option("act_type", None, 0) or 0)
    if act not in _ACTIVATIONS:
        raise ReplayImpossible(f"act_type {act}: not replayed here (0 none, 1 relu, 2 gelu tanh, 5 silu)")
    split = int(call.option("split_item", None, 0) or 0)
    bounds = _groups(call, xs, len(weights))
    scales = _per_group(call, "scale", len(weights))
    biases = _per_group(call, "bias", len(weights))
    per_token = _listed(call, -1, "per_token_scale", required=False)
    rows = np.concatenate([x.reshape(-1, x.shape[-1]) for x in xs]) if len(xs) > 1 else xs[0]
    outputs = []
    for group, (start, end) in enumerate(bounds):
        if split in (0, 1) and group > 0:
            break  # a list of outputs: the first is the one compared
        x, w = rows[start:end].astype(np.float64), weights[group].astype(np.float64)
        if x.shape[-1] != w.shape[0]:
            raise ReplayImpossible(f"group {group}: x {list(x.shape)} @ weight {list(w.shape)}")
        out = x @ w
        bias = biases[group] if biases else None
        integer_bias = bias is not None and bias.dtype.kind in "iu"
        if integer_bias and bias is not None:
            out = out + bias.astype(np.float64)
        if scales:
            out = out * dequant_scale(scales[group])[0].reshape(-1)
        if per_token:
            out = out * per_token[0].astype(np.float64).reshape(-1)[start:end, None]
        if bias is not None and not integer_bias:
            out = out + call.wide(bias)
        outputs.append(_ACTIVATIONS[act](out))
    result = outputs[0] if split in (0, 1) else np.concatenate(outputs)
    quantised = xs[0].dtype.kind in "iu"
    return Replayed(result, reduction=int(rows.shape[-1]), roundings=2 if quantised else 1)


_ACTIVATIONS = {
    0: lambda v: v,
    1: lambda v: np.maximum(v, 0.0),
    2: lambda v: maths.gelu(v, tanh=True),
    5: maths.silu,
}


def _listed(call: Call, index: int, name: str, required: bool = True) -> list[np.ndarray]:
    """A list-of-tensors argument (msprobe records each element), or one tensor as a list."""
    value = call.keyword.get(name)
    if value is None and index >= 0:
        value = call.positional.get(index)
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
        return list(value)
    if required:
        raise ReplayImpossible(f"inputs missing: {name} (argument {index}) was not dumped")
    return []


def _groups(call: Call, xs: list[np.ndarray], groups: int) -> list[tuple[int, int]]:
    """Each group's rows of x, from ``group_list`` (or, without it, one x per group)."""
    raw = call.raw(-1, "group_list")
    listed = raw.reshape(-1).tolist() if raw is not None else call.keyword.get("group_list")
    group_type = call.option("group_type", None, None)
    if group_type not in (None, 0, -1):
        raise ReplayImpossible(f"group_type {group_type}: only the m axis (0) is replayed here")
    if not listed:
        if len(xs) != groups:
            raise ReplayImpossible(f"no group_list, and {len(xs)} x tensors for {groups} weights")
        ends = np.cumsum([x.reshape(-1, x.shape[-1]).shape[0] for x in xs]).tolist()
    else:
        kind = int(call.option("group_list_type", None, 0) or 0)
        values = [int(v) for v in np.asarray(listed).reshape(-1)]
        if kind == 2:
            pairs = np.asarray(values).reshape(-1, 2)
            if not np.array_equal(pairs[:, 0], np.arange(len(pairs))):
                raise ReplayImpossible("group_list_type 2 with groups out of order: not replayed here")
            values = np.cumsum(pairs[:, 1]).tolist()
        elif kind == 1:
            values = np.cumsum(values).tolist()
        ends = values
    if len(ends) != groups:
        raise ReplayImpossible(f"group_list of {len(ends)} groups for {groups} weights")
    total = sum(x.reshape(-1, x.shape[-1]).shape[0] for x in xs)
    if ends and ends[-1] > total:
        raise ReplayImpossible(f"group_list covers {ends[-1]} rows, x has {total}")
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends, strict=True))


def _per_group(call: Call, name: str, groups: int) -> list[np.ndarray]:
    found = _listed(call, -1, name, required=False)
    if len(found) == 1 and groups > 1 and found[0].ndim == 2 and found[0].shape[0] == groups:
        return list(found[0])  # one [E, N] tensor
    if found and len(found) != groups:
        raise ReplayImpossible(f"{name} of {len(found)} tensors for {groups} groups")
    return found


def npu_moe_finalize_routing(call: Call) -> Replayed:
    """``npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales,
    expanded_src_to_dst_row, export_for_source_row, drop_pad_mode)`` (op-plugin
    ``docs/context/torch_npu-npu_moe_finalize_routing.md``): ``out[i] = skip1[i] + skip2[i] +
    sum_k scales[i, k] * (rows[src_to_dst[i + k * N]] + bias[export_for_source_row[i, k]])``; with
    ``drop_pad_mode`` 2 the index table is laid out by rows, ``src_to_dst[i * K + k]``. The drop-pad
    modes (1, 3: ``[E, C, H]`` rows, -1 for a dropped token) are refused: the doc does not say what a
    dropped token adds."""
    if call.sample is not None:
        raise NotSampleable("a combine is replayed whole")
    rows = call.tensor(0, "expanded_permuted_rows", "expanded_permuted_rows")
    mode = int(call.option("drop_pad_mode", 7, 0) or 0)
    if mode not in (0, 2):
        raise ReplayImpossible(f"drop_pad_mode {mode} (drop pad): not replayed here")
    table = call.raw(5, "expanded_src_to_dst_row")
    if table is None:
        raise ReplayImpossible("inputs missing: expanded_src_to_dst_row (argument 5) was not dumped")
    index = np.asarray(table).reshape(-1).astype(np.int64)
    scales = call.optional_tensor(4, "scales")
    if scales is None:
        raise ReplayImpossible("scales not dumped (None): the doc gives no weighting without them")
    if scales.ndim != 2:
        raise ReplayImpossible(f"scales {list(scales.shape)}: the doc's are [tokens, k]")
    tokens, k = scales.shape
    outside = bool(index.size) and (index.min() < 0 or index.max() >= rows.shape[0])
    if index.size != tokens * k or rows.ndim != 2 or outside:
        raise ReplayImpossible(
            f"expanded_src_to_dst_row of {index.size} entries for {tokens} x {k} routes "
            f"and {rows.shape[0]} rows"
        )
    by_route = index.reshape(tokens, k) if mode == 2 else index.reshape(k, tokens).T  # [token, k]
    picked = rows[by_route]  # [token, k, H]
    bias = call.optional_tensor(3, "bias")
    if bias is not None:
        experts = call.raw(6, "export_for_source_row")
        if experts is None:
            raise ReplayImpossible("inputs missing: export_for_source_row, which picks each route's bias")
        chosen = np.asarray(experts).astype(np.int64).reshape(-1)
        if chosen.size != tokens * k or (chosen.size and (chosen.min() < 0 or chosen.max() >= bias.shape[0])):
            raise ReplayImpossible(f"export_for_source_row names experts outside the bias's {bias.shape[0]}")
        picked = picked + bias[chosen.reshape(tokens, k)]
    out = np.einsum("tk,tkh->th", scales, picked)
    for position, name in ((1, "skip1"), (2, "skip2")):
        skip = call.optional_tensor(position, name)
        if skip is not None:
            out = out + skip.reshape(out.shape)
    return Replayed(out, reduction=k + 2)


REFERENCES = {
    "NPU.npu_moe_finalize_routing": npu_moe_finalize_routing,
    "NPU.npu_grouped_matmul": npu_grouped_matmul,
    "NPU.npu_moe_gating_top_k": npu_moe_gating_top_k,
    "NPU.npu_moe_gating_top_k_softmax": npu_moe_gating_top_k_softmax,
}
