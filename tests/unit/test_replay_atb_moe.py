"""ATB's FusedAddTopkDivOperation replayed (replay/atb_moe.py), against the documented computation
written again here in torch, in float32 as the kernel works (ATB ``infer_op_params.h``
FusedAddTopkDivParam and the operation's test goldens: sigmoid, the bias for the choice only, a
group's worth the sum of its n largest, the groupTopk best groups kept and the others set to 0, a
stable top k, the chosen sigmoid scores, with isNorm divided by their sum and scaled)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import atb_moe
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.sampling import Sample
from tui_acc.verdicts.replay_check import _judged

OP = "FusedAddTopkDivOperation"


def _golden(x, add_num, groups, keep, n, k, norm, scale, outside=0.0) -> torch.Tensor:
    """The weights as the docs describe them; ``outside``: what the discarded groups' experts become."""
    s = torch.sigmoid(x.float())
    chosen = s + add_num.float()
    tokens, experts = chosen.shape
    grouped = chosen.view(tokens, groups, experts // groups)
    worth = grouped.topk(n, dim=-1).values.sum(-1)
    best = torch.sort(worth, dim=-1, descending=True, stable=True).indices[:, :keep]
    kept = torch.zeros(tokens, groups).scatter(1, best, 1.0).bool()
    chosen = grouped.masked_fill(~kept.unsqueeze(-1), outside).view(tokens, experts)
    picked = torch.sort(chosen, dim=-1, descending=True, stable=True).indices[:, :k]
    y = s.gather(1, picked)
    if norm:
        y = y / y.sum(-1, keepdim=True) * torch.tensor(scale, dtype=torch.float32)
    return y


def _params(groups, keep, n, k, norm=True, scale=1.0, mapping=False) -> dict:
    return {
        "groupNum": groups,
        "groupTopk": keep,
        "n": n,
        "k": k,
        "activationType": 8,
        "isNorm": norm,
        "scale": scale,
        "enableExpertMapping": mapping,
    }


def _call(intensors: list, params: dict, k: int, sample: Sample | None = None) -> Call:
    positional = {i: from_torch(t.contiguous()) for i, t in enumerate(intensors)}
    shape = (intensors[0].shape[0], k)
    return Call(
        OP, OP, "msit-atb", positional, params, output_dtype="float32", output_shape=shape, sample=sample
    )


def _judge(replayed: Replayed, dumped: torch.Tensor, call: Call | None = None) -> str:
    gathered = Gathered(call or Call(OP, OP, "msit-atb"), from_torch(dumped.contiguous()), "outtensor0")
    return _judged("test", OP, OP, gathered, replayed, "built-in").verdict


def _inputs(tokens: int, experts: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.uniform(-4, 4, (tokens, experts))).to(dtype)
    add_num = torch.from_numpy(rng.uniform(-0.5, 0.5, experts)).to(dtype)
    return x, add_num


@pytest.mark.parametrize(
    ("dtype", "groups", "keep", "n", "k", "norm", "scale"),
    [
        (torch.bfloat16, 8, 4, 2, 8, True, 2.5),  # DeepSeek-V3's routing
        (torch.float16, 8, 3, 1, 6, False, 1.0),
        (torch.float32, 4, 2, 2, 5, True, 0.3),
    ],
)
def test_the_weights_agree_with_the_documented_computation(dtype, groups, keep, n, k, norm, scale) -> None:
    x, add_num = _inputs(32, 64, dtype, seed=3)
    call = _call([x, add_num], _params(groups, keep, n, k, norm, scale), k)
    replayed = atb_moe.fused_add_topk_div(call)
    assert _judge(replayed, _golden(x, add_num, groups, keep, n, k, norm, scale)) == "consistent"
    off = _golden(x, add_num, groups, keep, n, k, norm, scale) * 1.03
    assert _judge(replayed, off) == "disagrees"
    unbiased = _golden(x, torch.zeros_like(add_num), groups, keep, n, k, norm, scale)
    assert _judge(replayed, unbiased) == "disagrees"  # chosen without the bias: other experts


def test_a_wrong_scale_disagrees() -> None:
    x, add_num = _inputs(16, 256, torch.bfloat16, seed=5)
    replayed = atb_moe.fused_add_topk_div(_call([x, add_num], _params(8, 4, 2, 8, True, 2.5), 8))
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 2.5)) == "consistent"
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 1.0)) == "disagrees"  # scale left out
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, False, 1.0)) == "disagrees"  # not normalised


def test_discarded_groups_become_zero_not_minus_infinity() -> None:
    # one expert per group, the worst (expert 3's) discarded: the first token's kept expert 2 has a
    # negative score plus bias and the discarded expert 3, at 0, outranks it; the second's do not differ
    x = torch.tensor([[2.0, 1.0, -1.0, -3.0], [2.0, 1.0, 0.5, -3.0]])
    add_num = torch.tensor([0.0, 0.0, -0.5, -0.8])
    replayed = atb_moe.fused_add_topk_div(_call([x, add_num], _params(4, 3, 1, 3, True, 1.0), 3))
    assert replayed.notes == ()
    assert _judge(replayed, _golden(x, add_num, 4, 3, 1, 3, True, 1.0)) == "consistent"
    minus_inf = _golden(x, add_num, 4, 3, 1, 3, True, 1.0, outside=float("-inf"))
    assert _judge(replayed, minus_inf) == "disagrees"


def test_a_near_tie_at_the_edge_of_the_choice_is_left_out_not_blamed() -> None:
    # the first token's experts 1 and 2 score the same with the bias, not without: the kernel may
    # keep either, and their weights differ
    x = torch.tensor([[3.0, 1.0, 2.0, -1.0], [4.0, 2.0, 0.0, -2.0]])
    add_num = torch.tensor(
        [0.0, float(torch.sigmoid(torch.tensor(2.0)) - torch.sigmoid(torch.tensor(1.0))), 0, 0]
    )
    replayed = atb_moe.fused_add_topk_div(_call([x, add_num], _params(1, 1, 1, 2), 2))
    assert replayed.notes == ("1 of 2 tokens at a near-tie between experts: left out",)
    assert replayed.rows is not None and replayed.rows.tolist() == [1]
    for kept in (1, 2):
        dumped = _golden(x, add_num, 1, 1, 1, 2, True, 1.0)
        dumped[0] = torch.sigmoid(x[0, [0, kept]]) / torch.sigmoid(x[0, [0, kept]]).sum()
        assert _judge(replayed, dumped) == "consistent"


def test_a_near_tie_between_groups_is_left_out() -> None:
    # groups {0, 1} and {2, 3} are worth the same for the first token (n 1: their best, x = 1), and
    # the experts chosen in them differ: either group may be kept
    x = torch.tensor([[1.0, -1.0, 0.0, 1.0], [2.0, 1.0, 0.0, -1.0]])
    replayed = atb_moe.fused_add_topk_div(_call([x, torch.zeros(4)], _params(2, 1, 1, 2), 2))
    assert replayed.rows is not None and replayed.rows.tolist() == [1]
    assert replayed.notes[-1] == "1 of 2 tokens at a near-tie between experts: left out"
    for chosen in ([0, 1], [3, 2]):
        dumped = _golden(x, torch.zeros(4), 2, 1, 1, 2, True, 1.0)
        dumped[0] = torch.sigmoid(x[0, chosen]) / torch.sigmoid(x[0, chosen]).sum()
        assert _judge(replayed, dumped) == "consistent"


def test_expert_mapping_leaves_the_weights_alone() -> None:
    x, add_num = _inputs(16, 32, torch.float16, seed=7)
    mapping_num = torch.full((32,), 2, dtype=torch.int32)
    mapping_table = torch.randint(
        0, 32, (32, 2), dtype=torch.int32, generator=torch.Generator().manual_seed(1)
    )
    call = _call([x, add_num, mapping_num, mapping_table], _params(8, 4, 2, 4, mapping=True), 4)
    replayed = atb_moe.fused_add_topk_div(call)
    assert any(note.startswith("enableExpertMapping") for note in replayed.notes)
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 4, True, 1.0)) == "consistent"


def test_a_sample_of_tokens_is_replayed_by_its_rows() -> None:
    x, add_num = _inputs(40, 64, torch.bfloat16, seed=9)
    sample = Sample(np.array([1, 7, 20, 33]), 40)
    call = _call([x, add_num], _params(8, 4, 2, 8, True, 2.5), 8, sample=sample)
    replayed = atb_moe.fused_add_topk_div(call)
    assert replayed.values.shape == (4, 8)
    assert replayed.rows is not None and replayed.rows.tolist() == [1, 7, 20, 33]
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 2.5), call) == "consistent"
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 2.5) * 0.97, call) == "disagrees"


def test_missing_parameters_take_atbs_defaults_and_say_so() -> None:
    x, add_num = _inputs(8, 16, torch.float16, seed=11)
    replayed = atb_moe.fused_add_topk_div(_call([x, add_num], {"groupNum": 4, "groupTopk": 2, "k": 3}, 3))
    assert "n not in op_param.json: ATB's default 1" in replayed.notes
    assert "isNorm not in op_param.json: ATB's default True" in replayed.notes
    assert _judge(replayed, _golden(x, add_num, 4, 2, 1, 3, True, 1.0)) == "consistent"


@pytest.mark.parametrize(
    ("params", "intensors", "said"),
    [
        ({}, 2, "without op_param.json"),
        ({**_params(8, 4, 2, 8), "activationType": 1}, 2, "only ACTIVATION_SIGMOID"),
        (_params(6, 4, 2, 8), 2, "not 6 groups"),
        (_params(8, 4, 2, 6), 2, "shape mismatch"),  # k 6, the output has 8 columns
        (_params(8, 9, 2, 8), 2, "exceeds groupNum"),
        (_params(8, 4, 2, 8), 1, r"add_num \(argument 1\) was not dumped"),
    ],
)
def test_what_cannot_be_replayed_is_said(params: dict, intensors: int, said: str) -> None:
    x, add_num = _inputs(4, 64, torch.float16, seed=13)
    positional = {i: from_torch(t) for i, t in enumerate([x, add_num][:intensors])}
    call = Call(OP, OP, "msit-atb", positional, params, output_dtype="float32", output_shape=(4, 8))
    with pytest.raises(ReplayImpossible, match=said):
        atb_moe.fused_add_topk_div(call)


def test_the_activation_may_be_named() -> None:
    x, add_num = _inputs(8, 16, torch.float16, seed=15)
    params = {**_params(4, 2, 2, 3), "activationType": "ACTIVATION_SIGMOID"}
    replayed = atb_moe.fused_add_topk_div(_call([x, add_num], params, 3))
    assert _judge(replayed, _golden(x, add_num, 4, 2, 2, 3, True, 1.0)) == "consistent"


def _torch_call(x, add_num, keyword: dict, k: int) -> Call:
    return Call(
        "NPU.npu_fused_add_topk_div.0.forward",
        "npu_fused_add_topk_div",
        "msprobe",
        {0: from_torch(x), 1: from_torch(add_num)},
        keyword,
        output_dtype="float32",
        output_shape=(x.shape[0], k),
    )


def test_msprobes_torch_entry_reads_its_keywords() -> None:
    x, add_num = _inputs(16, 256, torch.bfloat16, seed=17)
    keyword = {"activation_type": "activation_sigmoid", "group_num": 8, "group_topk": 4, "n": 2, "k": 8}
    keyword |= {"is_norm": True, "scale": 2.5, "enable_expert_mapping": False}
    replayed = atb_moe.npu_fused_add_topk_div(_torch_call(x, add_num, keyword, 8))
    assert replayed.notes == ()
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 2.5)) == "consistent"
    assert _judge(replayed, _golden(x, add_num, 8, 4, 2, 8, True, 2.5 * 1.03)) == "disagrees"
    # what the caller left out takes the schema's defaults (is_norm True, scale 1), said
    short = {"group_num": 8, "group_topk": 4, "n": 2, "k": 8}
    defaulted = atb_moe.npu_fused_add_topk_div(_torch_call(x, add_num, short, 8))
    assert "scale not passed: torch_npu's default 1.0" in defaulted.notes
    assert _judge(defaulted, _golden(x, add_num, 8, 4, 2, 8, True, 1.0)) == "consistent"
