"""``npu_dequant_swiglu_quant`` replayed (replay/npu_swiglu_quant.py), against the doc's computation
written again here in torch at float32, group by group (op-plugin
``docs/zh/custom_APIs/torch_npu/torch_npu-npu_dequant_swiglu_quant.md``: dequant by weight_scale and
activation_scale, swiglu by mode and side, smooth quant_scale, static or dynamic int8), with the
static step as the kernel divides (hicann/ops-nn ``dequant_swiglu_quant.h``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_swiglu_quant
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.sampling import Sample
from tui_acc.verdicts.replay_check import _judged

T, H2 = 16, 128  # tokens, x's width (2H)


def _golden(x, keyword: dict, counts: list[int] | None = None) -> torch.Tensor:
    """The doc's steps per group, float32; rows past the groups' sum stay 0 (undefined)."""
    left = keyword.get("activate_left", False)
    mode = keyword.get("swiglu_mode", 0)
    dynamic = keyword.get("quant_mode", 0) == 1
    limit, alpha, glu_bias = (
        keyword.get(k, d) for k, d in (("clamp_limit", 7.0), ("glu_alpha", 1.702), ("glu_bias", 1.0))
    )
    counts = counts or [x.shape[0]]
    y = torch.zeros(x.shape[0], x.shape[1] // 2)
    start = 0
    for g, count in enumerate(counts):
        part = x[start : start + count]
        if part.dtype == torch.int32:
            if "bias" in keyword and keyword["bias"].dtype == torch.int32:
                part = part + keyword["bias"].reshape(-1, x.shape[1])[g]
            part = part.float() * keyword["weight_scale"].reshape(-1, x.shape[1])[g]
            if "activation_scale" in keyword:
                part = part * keyword["activation_scale"].reshape(-1, 1)[start : start + count]
            if "bias" in keyword and keyword["bias"].dtype != torch.int32:
                part = part + keyword["bias"].reshape(-1, x.shape[1])[g]
        else:
            part = part.float()
        if mode == 1:
            a, b = part[:, 0::2], part[:, 1::2]
        else:
            first, second = part.chunk(2, dim=1)
            a, b = (first, second) if left else (second, first)
        if mode == 0:
            out = torch.nn.functional.silu(a) * b
        else:
            a = a.clamp(max=limit)
            out = a * torch.sigmoid(alpha * a) * (b.clamp(-limit, limit) + glu_bias)
        scale = keyword.get("quant_scale")
        if dynamic:
            if scale is not None:
                out = out * scale.reshape(len(counts), -1)[g]
            out = out / (out.abs().amax(dim=1, keepdim=True) / 127)
        elif scale is not None:
            table = scale.reshape(len(counts), -1)
            out = out / table[g] + keyword["quant_offset"].reshape(len(counts), -1)[g]
        y[start : start + count] = out
        start += count
    return torch.round(y).clamp(-128, 127).to(torch.int8)  # half to even


def _call(x: torch.Tensor, keyword: dict, sample: Sample | None = None) -> Call:
    kw = {k: from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v for k, v in keyword.items()}
    shape = (*x.shape[:-1], x.shape[-1] // 2)
    return Call(
        "NPU.npu_dequant_swiglu_quant.0.forward",
        "npu_dequant_swiglu_quant",
        "msprobe",
        {0: from_torch(x)},
        kw,
        output_dtype="int8",
        output_shape=shape,
        sample=sample,
    )


def _replay(x: torch.Tensor, keyword: dict, sample: Sample | None = None) -> Replayed:
    return npu_swiglu_quant.REFERENCES["NPU.npu_dequant_swiglu_quant"](_call(x, keyword, sample))


def _judge(replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _inputs(seed: int, groups: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": torch.from_numpy(rng.integers(-300, 300, (T, H2))).to(torch.int32),
        "weight_scale": torch.from_numpy(rng.uniform(0.5, 1.5, (groups, H2)) * 0.1).float(),
        "activation_scale": torch.from_numpy(rng.uniform(0.5, 1.5, (T, 1)) * 0.1).float(),
        "quant_scale": torch.from_numpy(rng.uniform(0.5, 1.5, (groups, H2 // 2))).float(),
    }


def test_the_default_side_is_swish_of_the_second_half_dynamic() -> None:
    data = _inputs(1)
    x = data.pop("x")
    keyword = data | {"quant_mode": 1}
    replayed = _replay(x, keyword)
    assert _judge(replayed, _golden(x, keyword)) == "consistent"
    assert replayed.notes == ("not recorded, torch_npu's defaults: activate_left False, swiglu_mode 0",)
    # swish of the first half (npu_swiglu's side) is another operator
    assert _judge(replayed, _golden(x, keyword | {"activate_left": True})) == "disagrees"
    # weight_scale 3 % off on every other channel (a uniform error would cancel in the row's scale)
    off = keyword["weight_scale"].clone()
    off[:, ::2] *= 1.03
    assert _judge(replayed, _golden(x, keyword | {"weight_scale": off})) == "disagrees"
    # the smooth scale left out
    assert (
        _judge(replayed, _golden(x, {k: v for k, v in keyword.items() if k != "quant_scale"})) == "disagrees"
    )


def test_the_docs_example_call_variant_swiglu_on_even_and_odd_elements() -> None:
    # as the doc calls it, smaller: activate_left True, quant_mode 1, swiglu_mode 1, group_index [T]
    data = _inputs(2)
    x = data.pop("x")
    keyword = data | {"group_index": torch.tensor([T]), "activate_left": True, "quant_mode": 1}
    keyword |= {"swiglu_mode": 1, "clamp_limit": 7.0, "glu_alpha": 1.702, "glu_bias": 1.0}
    replayed = _replay(x, keyword)
    assert replayed.notes == () and replayed.rows is None
    assert _judge(replayed, _golden(x, keyword)) == "consistent"
    # mode 2's split (the halves) instead of even/odd elements
    assert _judge(replayed, _golden(x, keyword | {"swiglu_mode": 2})) == "disagrees"
    assert _judge(replayed, _golden(x, keyword | {"clamp_limit": 1.0})) == "disagrees"
    # mode 2, from the right half, with its clamp doing work
    keyword |= {"swiglu_mode": 2, "activate_left": False, "clamp_limit": 2.0, "glu_bias": 0.5}
    assert _judge(_replay(x, keyword), _golden(x, keyword)) == "consistent"
    assert _judge(_replay(x, keyword), _golden(x, keyword | {"activate_left": True})) == "disagrees"


def test_the_static_quantisation_divides_by_its_scale_and_adds_its_offset() -> None:
    data = _inputs(3)
    x = data.pop("x")
    data["quant_scale"] = data["quant_scale"] * 0.02
    offset = torch.from_numpy(np.random.default_rng(4).integers(-5, 6, (1, H2 // 2))).float()
    keyword = data | {"quant_offset": offset}
    replayed = _replay(x, keyword)
    assert replayed.notes == (
        "not recorded, torch_npu's defaults: activate_left False, quant_mode 0, swiglu_mode 0",
    )
    dumped = _golden(x, keyword)
    assert dumped.abs().max() > 30  # a wide int8 range: steps are fine relative to the values
    assert _judge(replayed, dumped) == "consistent"
    assert _judge(replayed, _golden(x, keyword | {"quant_scale": data["quant_scale"] * 1.03})) == "disagrees"
    assert _judge(replayed, _golden(x, keyword | {"quant_offset": offset * 0})) == "disagrees"
    # one scale for the group, one offset: as a per-column table of that value
    one = {"quant_scale": torch.tensor([0.05]), "quant_offset": torch.tensor([2.0])}
    wide = {"quant_scale": torch.full((1, H2 // 2), 0.05), "quant_offset": torch.full((1, H2 // 2), 2.0)}
    assert _judge(_replay(x, data | one), _golden(x, data | wide)) == "consistent"


def test_int32_and_float_biases_and_a_bfloat16_x() -> None:
    data = _inputs(5)
    x = data.pop("x")
    keyword = data | {"quant_mode": 1}
    int_bias = torch.from_numpy(np.random.default_rng(6).integers(-200, 200, H2)).to(torch.int32)
    with_int = keyword | {"bias": int_bias}
    assert _judge(_replay(x, with_int), _golden(x, with_int)) == "consistent"
    assert _judge(_replay(x, with_int), _golden(x, keyword)) == "disagrees"
    float_bias = torch.from_numpy(np.random.default_rng(7).uniform(-2, 2, H2)).float()
    with_float = keyword | {"bias": float_bias}
    assert _judge(_replay(x, with_float), _golden(x, with_float)) == "consistent"
    # the float bias is added after the scales: before them it is far off
    early = (float_bias / data["weight_scale"][0]).round().to(torch.int32)
    assert _judge(_replay(x, with_float), _golden(x, keyword | {"bias": early})) == "disagrees"
    xb = torch.from_numpy(np.random.default_rng(8).standard_normal((T, H2)) * 3).to(torch.bfloat16)
    plain = {"quant_mode": 1, "quant_scale": data["quant_scale"]}
    assert _judge(_replay(xb, plain), _golden(xb, plain)) == "consistent"


def test_groups_and_the_rows_past_their_sum_left_out() -> None:
    counts = [3, 5, 0, 4]  # 12 of 16 rows defined
    data = _inputs(9, groups=len(counts))
    x = data.pop("x")
    keyword = data | {"quant_mode": 1, "group_index": torch.tensor(counts)}
    replayed = _replay(x, keyword)
    assert replayed.rows is not None and replayed.rows.tolist() == list(range(12))
    assert "4 of 16 rows past group_index's sum (12) left out" in replayed.notes[-1]
    dumped = _golden(x, keyword, counts)
    dumped[12:] = 99  # the kernel's garbage there
    assert _judge(replayed, dumped) == "consistent"
    swapped = dict(keyword, weight_scale=keyword["weight_scale"].flip(0))
    assert _judge(replayed, _golden(x, swapped, counts)) == "disagrees"
    # a sample: only the defined rows among the sampled ones
    sampled = _replay(x, keyword, Sample(np.array([1, 7, 12, 15]), T))
    assert sampled.rows is not None and sampled.rows.tolist() == [1, 7]
    assert _judge(sampled, _golden(x, keyword, counts)) == "consistent"
    with pytest.raises(ReplayImpossible, match="none of the rows replayed"):
        _replay(x, keyword, Sample(np.array([13, 14]), T))


def test_a_tie_may_round_either_way_and_nothing_else() -> None:
    data = _inputs(10)
    x = data.pop("x")
    out = _golden(x, data | {"quant_mode": 0, "quant_scale": torch.ones(1), "quant_offset": torch.zeros(1)})
    assert out.abs().max() > 0
    # per-column scales that put row 0 at exactly ...+0.5 in float64 terms of the float32 result
    plain = _replay(x, {k: v for k, v in data.items() if k != "quant_scale"})
    assert plain.unrounded is not None
    row = torch.from_numpy(plain.unrounded[0]).float()
    scale = (row / 10.5).reshape(1, -1)
    keyword = data | {"quant_scale": scale, "quant_offset": torch.zeros(1, H2 // 2)}
    replayed = _replay(x, keyword)
    assert replayed.unrounded is not None and np.allclose(replayed.unrounded[0], 10.5, atol=1e-5)
    dumped = _golden(x, keyword)
    for tie in (10, 11):
        dumped[0] = tie
        assert _judge(replayed, dumped) == "consistent"
    dumped[0, 3] = 12
    assert _judge(replayed, dumped) == "disagrees"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"round_mode": 2}, "round_mode 2 \\(floor\\)"),
        ({"dst_type": 291}, "dst_type 291"),
        ({"activate_dim": 0}, "activate_dim 0"),
        ({"swiglu_mode": 3}, "swiglu_mode 3"),
        ({"quant_mode": 2}, "quant_mode 2"),
        ({"quant_offset": torch.zeros(1)}, "quant_offset without quant_scale"),
        (
            {"quant_mode": 1, "group_index": torch.tensor([T]), "bias": torch.zeros(H2, dtype=torch.int32)},
            "no effect",
        ),
        ({"group_index": torch.tensor([T, 1])}, "past x's 16 rows"),
    ],
)
def test_what_the_doc_does_not_settle_is_refused_by_name(extra: dict, reason: str) -> None:
    data = _inputs(11)
    x = data.pop("x")
    data.pop("quant_scale")
    with pytest.raises(ReplayImpossible, match=reason):
        _replay(x, data | extra)


def test_round_mode_round_and_int8_dst_type_are_accepted() -> None:
    data = _inputs(12)
    x = data.pop("x")
    keyword = data | {"quant_mode": 1, "round_mode": 1, "dst_type": 1, "activate_dim": -1}
    assert _judge(_replay(x, keyword), _golden(x, keyword)) == "consistent"
