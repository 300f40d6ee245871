"""torch_npu's MoE gating replayed (replay/npu_moe.py), against the doc's equivalent computation
written again here in torch (op-plugin ``torch_npu-npu_moe_gating_top_k.md``: norm, bias for the
choice only, the best groups, a stable top k, the chosen scores renormalised for sigmoid and
scaled)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_moe
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.verdicts.replay_check import _judged


def _gating(x, k, bias, k_group, group_count, mode, norm_type, factor, eps=1e-20):
    scores = torch.softmax(x, -1) if norm_type == 0 else torch.sigmoid(x)
    chosen_on = scores + bias
    if group_count > 1:
        grouped = chosen_on.view(x.shape[0], group_count, -1)
        worth = grouped.max(-1).values if mode == 0 else grouped.topk(2, -1).values.sum(-1)
        keep = worth.topk(k_group, -1).indices
        mask = torch.ones_like(worth, dtype=torch.bool).scatter(1, keep, False)
        chosen_on = grouped.masked_fill(mask.unsqueeze(-1), float("-inf")).view(x.shape[0], -1)
    y = scores.gather(1, chosen_on.topk(k, -1).indices)
    if norm_type == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    return y * factor


def _call(x, k, keyword) -> Call:
    kw = {key: from_torch(v) if isinstance(v, torch.Tensor) else v for key, v in keyword.items()}
    return Call("NPU.npu_moe_gating_top_k.0.forward", "x", "msprobe", {0: from_torch(x), 1: k}, kw)


def _judge(replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


@pytest.mark.parametrize(("norm_type", "groups", "mode"), [(1, 8, 1), (1, 8, 0), (0, 1, 0)])
def test_the_gating_agrees_with_the_docs_computation(norm_type: int, groups: int, mode: int) -> None:
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.uniform(-2, 2, (16, 64))).to(torch.float64)
    bias = torch.from_numpy(rng.uniform(-0.5, 0.5, 64)).to(torch.float64)
    keyword = {"bias": bias, "k_group": 4, "group_count": groups, "group_select_mode": mode}
    keyword |= {"norm_type": norm_type, "routed_scaling_factor": 2.5}
    expected = _gating(x, 6, bias, 4, groups, mode, norm_type, 2.5).to(torch.float32)
    replayed = npu_moe.npu_moe_gating_top_k(_call(x, 6, keyword))
    assert _judge(replayed, expected) == "consistent"
    assert (
        _judge(replayed, _gating(x, 6, bias, 4, groups, mode, norm_type, 2.5 * 1.03).to(torch.float32))
        == "disagrees"
    )
    no_bias = _gating(x, 6, torch.zeros(64, dtype=torch.float64), 4, groups, mode, norm_type, 2.5).to(
        torch.float32
    )
    assert _judge(replayed, no_bias) == "disagrees"  # chosen without the bias: other experts


def test_a_near_tie_at_the_edge_of_the_choice_is_left_out_not_blamed() -> None:
    x = torch.tensor([[3.0, 1.0, 1.0, -1.0], [4.0, 2.0, 0.0, -2.0]], dtype=torch.float64)
    replayed = npu_moe.npu_moe_gating_top_k(_call(x, 2, {"norm_type": 1}))
    assert replayed.notes == ("1 of 2 tokens at a near-tie between experts: left out",)
    # the kernel kept expert 2 where the replay keeps expert 1: the same score, either is right
    dumped = _gating(x, 2, torch.zeros(4, dtype=torch.float64), 1, 1, 0, 1, 1.0).to(torch.float32)
    assert _judge(replayed, dumped) == "consistent"


def test_the_softmax_gating_keeps_the_k_largest_scores() -> None:
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((5, 8))).to(torch.float32)
    call = Call("NPU.npu_moe_gating_top_k_softmax.0.forward", "x", "msprobe", {0: from_torch(x)}, {"k": 3})
    expected = torch.softmax(x.double(), -1).topk(3, -1).values.to(torch.float32)
    replayed = npu_moe.npu_moe_gating_top_k_softmax(call)
    assert _judge(replayed, expected) == "consistent"
    assert (
        _judge(replayed, torch.softmax(x.double(), -1).topk(4, -1).values[:, 1:].to(torch.float32))
        == "disagrees"
    )


def _gmm_call(positional: dict, keyword: dict) -> Call:
    def plain(v):
        if isinstance(v, torch.Tensor):
            return from_torch(v.contiguous())
        if isinstance(v, list) and v and isinstance(v[0], torch.Tensor):
            return [from_torch(t.contiguous()) for t in v]
        return v

    args = {k: plain(v) for k, v in positional.items()}
    return Call(
        "NPU.npu_grouped_matmul.0.forward", "x", "msprobe", args, {k: plain(v) for k, v in keyword.items()}
    )


def test_a_grouped_matmul_multiplies_each_experts_rows_by_its_weight() -> None:
    # vllm-ascend's expert FFN: one x [M, K], one stacked weight [E, K, N], group sizes, one output
    rng = np.random.default_rng(6)
    sizes = [3, 0, 5, 2]
    x = torch.from_numpy(rng.standard_normal((10, 16))).to(torch.bfloat16)
    w = torch.from_numpy(rng.standard_normal((4, 16, 8))).to(torch.bfloat16)
    parts, start = [], 0
    for e, n in enumerate(sizes):
        parts.append(x[start : start + n].double() @ w[e].double())
        start += n
    expected = torch.cat(parts).to(torch.bfloat16)
    keyword = {"group_list": torch.tensor(sizes), "group_list_type": 1, "group_type": 0, "split_item": 2}
    replayed = npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, keyword))
    assert _judge(replayed, expected) == "consistent"
    cumulative = {**keyword, "group_list": torch.tensor(np.cumsum(sizes)), "group_list_type": 0}
    assert (
        _judge(npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, cumulative)), expected) == "consistent"
    )
    # cumulative values taken for sizes: more rows than x has, said
    misread = {**keyword, "group_list": torch.tensor([3, 3, 8, 10]), "group_list_type": 1}
    with pytest.raises(ReplayImpossible, match="covers 24 rows, x has 10"):
        npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, misread))
    # an expert's rows multiplied by its neighbour's weight: far from it
    shifted = {**keyword, "group_list": torch.tensor([3, 5, 0, 2])}
    assert _judge(npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, shifted)), expected) == "disagrees"


def test_a_w8a8_grouped_matmul_dequantises_per_expert_and_token_and_activates() -> None:
    rng = np.random.default_rng(7)
    sizes = [4, 2]
    x = torch.from_numpy(rng.integers(-127, 128, (6, 32))).to(torch.int8)
    w = torch.from_numpy(rng.integers(-127, 128, (2, 32, 8))).to(torch.int8)
    scales = [torch.from_numpy(rng.uniform(1e-3, 2e-3, 8)).float() for _ in sizes]
    per_token = torch.from_numpy(rng.uniform(1e-2, 2e-2, 6)).float()
    parts, start = [], 0
    for e, n in enumerate(sizes):
        total = x[start : start + n].long() @ w[e].long()
        parts.append(
            torch.nn.functional.silu(
                total.double() * scales[e].double() * per_token[start : start + n, None].double()
            )
        )
        start += n
    expected = torch.cat(parts).to(torch.bfloat16)
    keyword = {"scale": scales, "per_token_scale": [per_token], "group_list": torch.tensor(sizes)}
    keyword |= {"group_list_type": 1, "group_type": 0, "split_item": 2, "act_type": 5}
    replayed = npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, keyword))
    assert _judge(replayed, expected) == "consistent"
    swapped = {**keyword, "scale": scales[::-1]}  # each expert dequantised with the other's scale
    assert _judge(npu_moe.npu_grouped_matmul(_gmm_call({0: [x], 1: [w]}, swapped)), expected) == "disagrees"


def _finalize(rows, skip1, skip2, bias, scales, src_to_dst, experts, by_rows: bool):
    """The doc's formula, element by element: out[i] = skip1[i] + skip2[i] + sum_k scales[i, k] *
    (rows[src_to_dst[i + k * N]] + bias[experts[i, k]]) (``i * K + k`` with drop_pad_mode 2)."""
    tokens, k = scales.shape
    out = skip1.clone() + skip2
    for i in range(tokens):
        for j in range(k):
            row = int(src_to_dst[i * k + j] if by_rows else src_to_dst[i + j * tokens])
            out[i] += scales[i, j] * (rows[row] + bias[int(experts[i, j])])
    return out


@pytest.mark.parametrize("mode", [0, 2])
def test_finalize_routing_sums_each_tokens_routes_by_its_weights(mode: int) -> None:
    tokens, k, hidden, experts = 6, 3, 8, 5
    rng = np.random.default_rng(11)

    def randn(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(shape)).to(torch.float32)

    rows, skip1, skip2 = randn(tokens * k, hidden), randn(tokens, hidden), randn(tokens, hidden)
    bias, scales = randn(experts, hidden), randn(tokens, k)
    src_to_dst = torch.from_numpy(rng.permutation(tokens * k)).to(torch.int32)
    chosen = torch.from_numpy(rng.integers(0, experts, (tokens, k))).to(torch.int32)
    expected = _finalize(rows, skip1, skip2, bias, scales, src_to_dst, chosen, by_rows=mode == 2)
    arguments = [rows, skip1, skip2, bias, scales, src_to_dst, chosen, mode]
    call = Call(
        "NPU.npu_moe_finalize_routing.0.forward",
        "expanded_permuted_rows",
        "msprobe",
        {i: from_torch(a) if isinstance(a, torch.Tensor) else a for i, a in enumerate(arguments)},
    )
    replayed = npu_moe.npu_moe_finalize_routing(call)
    assert _judge(replayed, expected) == "consistent"
    # the other layout of the index table reads other rows
    other = _finalize(rows, skip1, skip2, bias, scales, src_to_dst, chosen, by_rows=mode != 2)
    assert _judge(replayed, other) == "disagrees"
    dropping = replace(call, positional={**call.positional, 7: 1})
    with pytest.raises(ReplayImpossible, match="drop_pad_mode 1"):
        npu_moe.npu_moe_finalize_routing(dropping)


def test_finalize_routing_says_why_when_its_tables_do_not_fit() -> None:
    rows = torch.zeros(6, 4)
    scales = torch.ones(3, 2)
    table = torch.arange(6, dtype=torch.int32)
    bias = torch.zeros(2, 4)
    experts = torch.full((3, 2), 7, dtype=torch.int32)  # no such expert: the bias has 2
    arguments = [rows, None, None, bias, scales, table, experts, 0]
    call = Call(
        "NPU.npu_moe_finalize_routing.0.forward",
        "expanded_permuted_rows",
        "msprobe",
        {i: from_torch(a) if isinstance(a, torch.Tensor) else a for i, a in enumerate(arguments)},
    )
    with pytest.raises(ReplayImpossible, match="outside the bias"):
        npu_moe.npu_moe_finalize_routing(call)
    flat = replace(call, positional={**call.positional, 4: from_torch(torch.ones(6))})
    with pytest.raises(ReplayImpossible, match=r"scales \[6\]"):
        npu_moe.npu_moe_finalize_routing(flat)
