"""torch_npu's quantisation operators replayed (replay/npu_quant.py): against the examples op-plugin's
API docs print (inputs and outputs), against torch computing each doc formula in int32 and float32,
and against ``npu_trans_quant_param``'s encoding written here from its doc's bit formula."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_quant
from tui_acc.replay.call import Call, Replayed
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.registry import Registry
from tui_acc.verdicts.replay_check import _judged


def _call(
    api: str, positional: dict, keyword: dict | None = None, output: torch.Tensor | None = None
) -> Call:
    def plain(v):
        return from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v

    dtype = str(output.dtype).removeprefix("torch.") if output is not None else ""
    shape = tuple(output.shape) if output is not None else ()
    return Call(
        f"NPU.{api}.0.forward",
        api,
        "msprobe",
        {k: plain(v) for k, v in positional.items()},
        {k: plain(v) for k, v in (keyword or {}).items()},
        output_dtype=dtype,
        output_shape=shape,
    )


def _judge(replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _replay(call: Call) -> Replayed:
    entry = Registry().find(f"NPU.{call.type}", None)
    assert entry is not None and entry.origin == "built-in"
    return entry.load()(call)


# --- npu_trans_quant_param's int64, from its doc's formula -----------------------------------------------


def _encoded(scale: float, offset: float | None) -> int:
    """``out = (bits(scale) & 0xFFFFE000) | (1 << 46)``, then ``offset`` rounded, clamped to
    [-256, 255], its low 9 bits at 37-45 (op-plugin ``torch_npu-npu_trans_quant_param.md``)."""
    out = (struct.unpack("<I", struct.pack("<f", scale))[0] & 0xFFFFE000) | (1 << 46)
    if offset is not None:
        out = (out & 0x4000FFFFFFFF) | ((max(min(round(offset), 255), -256) & 0x1FF) << 37)
    return out


def test_the_int64_scale_decodes_to_its_truncated_float_and_its_offset() -> None:
    scales, offsets = [0.0123, -3.5, 1e-4, 7.0], [3.2, -2.0, -256.0, 255.0]
    packed = np.array([_encoded(s, o) for s, o in zip(scales, offsets, strict=True)], dtype=np.int64)
    scale, offset = npu_quant.quant_param(packed)
    truncated = [
        struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", s))[0] & 0xFFFFE000))[0]
        for s in scales
    ]
    assert scale.tolist() == truncated
    assert offset is not None and offset.tolist() == [3.0, -2.0, -256.0, 255.0]
    plain, none = npu_quant.quant_param(np.array([_encoded(0.5, None)], dtype=np.int64))
    assert plain.tolist() == [0.5] and none is None


def test_the_docs_printed_int64_scales_decode_as_the_doc_says_they_were_built() -> None:
    # the single-operator example's output: scales from randn, offsets from randn, round_mode 1
    printed = [
        70507248869376,
        70509369614336,
        70507209793536,
        140463653937152,
        140603250524160,
        140603257561088,
        140603230814208,
        70369813069824,
        70369794605056,
        140463675252736,
        70784266256384,
        70507233009664,
        140601114345472,
        70371966238720,
        140603258257408,
        140603254505472,
    ]
    packed = np.array(printed, dtype=np.int64)
    assert np.all(packed & (1 << 46))  # bit 46 set
    assert np.all(packed & 0x1FFF == 0)  # the float's low 13 bits cut
    scale, offset = npu_quant.quant_param(packed)
    assert np.all(np.abs(scale) < 5) and np.all(scale != 0)  # randn's range
    assert offset is not None and set(offset.tolist()) <= {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0}


# --- the examples the docs print ---------------------------------------------------------------------------


def test_npu_dynamic_quant_reproduces_its_docs_examples() -> None:
    x = torch.tensor(
        [[0.7261, 0.3726, 0.9126], [0.9023, 0.9990, 0.1279], [0.8628, 0.6240, 0.9028]], dtype=torch.float16
    )
    printed = torch.tensor([[101, 52, 127], [115, 127, 16], [121, 88, 127]], dtype=torch.int8)
    replayed = _replay(_call("npu_dynamic_quant", {0: x}, output=printed))
    assert _judge(replayed, printed) == "consistent"
    wrong = printed.clone()
    wrong[0, 1] += 2
    assert _judge(replayed, wrong) == "disagrees"
    # with smooth_scales
    x = torch.tensor(
        [[0.6680, 0.9492, 0.0845], [0.1924, 0.5278, 0.1484], [0.6631, 0.9497, 0.0957]], dtype=torch.float16
    )
    smooth = torch.tensor([0.8042, 0.0884, 0.8901], dtype=torch.float16)
    printed = torch.tensor([[127, 20, 18], [127, 38, 108], [127, 20, 20]], dtype=torch.int8)
    replayed = _replay(_call("npu_dynamic_quant", {0: x}, {"smooth_scales": smooth}, output=printed))
    assert _judge(replayed, printed) == "consistent"
    assert _judge(_replay(_call("npu_dynamic_quant", {0: x}, output=printed)), printed) == "disagrees"


def test_npu_quantize_reproduces_its_docs_example() -> None:
    # Atlas inference products' example: x * 3 (div_mode False), qint8, axis -1
    x = torch.tensor(
        [
            [
                [
                    -7.7834e-01,
                    -1.0473e00,
                    -1.1155e00,
                    1.2233e00,
                    -1.2271e00,
                    -2.5612e00,
                    -1.8274e-01,
                    2.8293e00,
                    1.9029e-01,
                    -1.9333e00,
                    -4.9270e-01,
                    -1.0650e00,
                ],
                [
                    -8.9416e-01,
                    3.1869e-02,
                    -5.8144e-01,
                    -4.9477e-01,
                    9.7323e-02,
                    -3.8681e-01,
                    2.1969e-03,
                    -6.3244e-01,
                    7.1591e-01,
                    -1.8587e-01,
                    -1.3381e00,
                    -2.6253e-01,
                ],
                [
                    1.8462e-02,
                    1.2397e-01,
                    -9.0656e-01,
                    -9.9280e-01,
                    -4.4235e-02,
                    1.0623e00,
                    -9.8437e-02,
                    1.2941e00,
                    1.0805e00,
                    -1.7269e-01,
                    -9.9205e-02,
                    -6.1429e-01,
                ],
            ],
            [
                [
                    1.3678e00,
                    -2.7348e-01,
                    -4.1354e-01,
                    -9.4638e-01,
                    4.2792e-01,
                    8.0462e-01,
                    9.3584e-01,
                    6.3704e-01,
                    1.1269e00,
                    -1.5329e00,
                    5.8572e-01,
                    -1.3966e00,
                ],
                [
                    3.5882e-01,
                    8.7029e-01,
                    -1.3176e00,
                    1.1601e00,
                    -3.6984e-01,
                    7.3642e-01,
                    -1.0755e00,
                    6.6557e-01,
                    3.1149e00,
                    -6.8776e-01,
                    -1.0913e00,
                    4.4962e-01,
                ],
                [
                    -1.2505e00,
                    1.5474e00,
                    -7.4332e-02,
                    -1.6657e00,
                    1.3275e00,
                    5.8914e-02,
                    8.4287e-01,
                    -1.7109e00,
                    1.8256e-01,
                    3.2937e-01,
                    2.4875e00,
                    1.3921e00,
                ],
            ],
        ]
    )
    printed = torch.tensor(
        [
            [
                [-2, -3, -3, 4, -4, -8, -1, 8, 1, -6, -1, -3],
                [-3, 0, -2, -1, 0, -1, 0, -2, 2, -1, -4, -1],
                [0, 0, -3, -3, 0, 3, 0, 4, 3, -1, 0, -2],
            ],
            [
                [4, -1, -1, -3, 1, 2, 3, 2, 3, -5, 2, -4],
                [1, 3, -4, 3, -1, 2, -3, 2, 9, -2, -3, 1],
                [-4, 5, 0, -5, 4, 0, 3, -5, 1, 1, 7, 4],
            ],
        ],
        dtype=torch.int8,
    )
    scale = torch.full((12,), 3.0)
    # as the doc calls it: npu_quantize(x, scale, None, torch.qint8, -1, False)
    call = _call("npu_quantize", {0: x, 1: scale, 3: "qint8", 4: -1, 5: False}, output=printed)
    replayed = _replay(call)
    assert _judge(replayed, printed) == "consistent"
    # the same scale taken as a divisor (div_mode's default) is far from it
    divided = _replay(_call("npu_quantize", {0: x, 1: scale, 3: "qint8", 4: -1}, output=printed))
    assert divided.notes == ("div_mode not recorded: torch_npu's default True",)
    assert _judge(divided, printed) == "disagrees"


# --- the quantised matmul, from its doc's formulas ---------------------------------------------------------

M, K, N = 6, 64, 48


def _int8(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(-127, 128, shape)).to(torch.int8)


def _positive(*shape: int, seed: int, size: float = 1e-3) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(0.5, 1.5, shape) * size).to(torch.float32)


def _int_sum(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return (x1.to(torch.int64) @ x2.to(torch.int64)).to(torch.float64)


def test_a_w8a8_dynamic_matmul_is_consistent_and_a_wrong_scale_is_caught() -> None:
    # vllm-ascend's W8A8 dynamic linear: per-token activation scales, per-channel weight scales, bf16
    x1, x2 = _int8(M, K, seed=1), _int8(K, N, seed=2)
    scale, pertoken = _positive(N, seed=3), _positive(M, seed=4, size=1e-2)
    exact = _int_sum(x1, x2) * scale.double() * pertoken.double()[:, None]
    dumped = exact.to(torch.bfloat16)
    keyword = {"pertoken_scale": pertoken, "output_dtype": "torch.bfloat16"}
    replayed = _replay(_call("npu_quant_matmul", {0: x1, 1: x2, 2: scale}, keyword, dumped))
    assert _judge(replayed, dumped) == "consistent"
    wrong_scale = scale * 1.02  # the dequant scale 2 % off
    assert (
        _judge(
            replayed,
            (_int_sum(x1, x2) * wrong_scale.double() * pertoken.double()[:, None]).to(torch.bfloat16),
        )
        == "disagrees"
    )
    # the per-token scales applied per channel instead (a mix-up): far from it
    mixed = _int_sum(x1, x2) * scale.double() * pertoken.double().mean()
    assert _judge(replayed, mixed.to(torch.bfloat16)) == "disagrees"
    # a transposed weight of the same shape: far from it
    square = _int8(K, K, seed=5)
    ok = _replay(
        _call(
            "npu_quant_matmul",
            {0: _int8(M, K, seed=1), 1: square, 2: torch.ones(1)},
            {"output_dtype": "torch.float32"},
        )
    )
    assert _judge(ok, _int_sum(x1, square.T).float()) == "disagrees"
    assert _judge(ok, _int_sum(x1, square).float()) == "consistent"


def test_a_batched_quantised_matmul_is_judged_and_says_its_quantisation() -> None:
    # x2 [batch, k, n]: each batch its own int8 matrix; the operands' rounding to integers, one step
    # of rms 1/sqrt(12) per element against their size, in quadrature
    x1 = torch.stack([_int8(M, K, seed=s) for s in (1, 2)])
    x2 = torch.stack([_int8(K, N, seed=s) for s in (3, 4)])
    scale = _positive(N, seed=5)
    exact = torch.stack([_int_sum(x1[b], x2[b]) for b in range(2)]) * scale.double()
    dumped = exact.to(torch.bfloat16)
    replayed = _replay(
        _call("npu_quant_matmul", {0: x1, 1: x2, 2: scale}, {"output_dtype": "torch.bfloat16"}, dumped)
    )
    assert _judge(replayed, dumped) == "consistent"
    assert _judge(replayed, (exact * 1.02).to(torch.bfloat16)) == "disagrees"

    def rounding(a: torch.Tensor) -> float:
        return (a.numel() / 12) ** 0.5 / a.double().norm().item()

    assert replayed.quantisation == pytest.approx(np.hypot(rounding(x1), rounding(x2)), rel=1e-9)


def test_an_int8_output_with_an_int64_scale_and_its_packed_offset() -> None:
    # the doc's method 2: npu_trans_quant_param(scale, offset) then no offset argument, an int32 bias
    x1, x2 = _int8(M, K, seed=1), _int8(K, N, seed=2)
    scale, offset = (
        _positive(N, seed=3, size=2e-3),
        torch.from_numpy(np.random.default_rng(6).integers(-5, 6, N)).float(),
    )
    bias = torch.from_numpy(np.random.default_rng(7).integers(-50, 50, N)).to(torch.int32)
    packed = torch.tensor(
        [_encoded(float(s), float(o)) for s, o in zip(scale, offset, strict=True)], dtype=torch.int64
    )
    truncated = torch.from_numpy(npu_quant.quant_param(from_torch(packed))[0])
    unrounded = (_int_sum(x1, x2) + bias.double()) * truncated + offset.double()
    dumped = unrounded.round().clamp(-128, 127).to(torch.int8)
    replayed = _replay(_call("npu_quant_matmul", {0: x1, 1: x2, 2: packed}, {"bias": bias}, dumped))
    assert replayed.unrounded is not None
    assert _judge(replayed, dumped) == "consistent"
    assert (
        _judge(replayed, (unrounded - offset.double()).round().clamp(-128, 127).to(torch.int8)) == "disagrees"
    )


def test_an_integer_output_one_step_off_is_allowed_at_a_tie_only() -> None:
    x = torch.tensor([[0.5, 1.5, 2.25, -3.5]])
    exact = _replay(
        _call(
            "npu_quantize",
            {0: x, 1: torch.ones(4), 3: "qint8", 4: -1, 5: False},
            output=torch.zeros(1, 4, dtype=torch.int8),
        )
    )
    assert _judge(exact, torch.tensor([[0, 2, 2, -4]], dtype=torch.int8)) == "consistent"  # ties to even
    assert _judge(exact, torch.tensor([[1, 1, 2, -3]], dtype=torch.int8)) == "consistent"  # ties away
    assert _judge(exact, torch.tensor([[0, 2, 3, -4]], dtype=torch.int8)) == "disagrees"  # 2.25 -> 3: no tie


def test_a_w8a16_matmul_dequantises_its_weight_per_channel_and_per_group() -> None:
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((M, K))).to(torch.bfloat16)
    weight = _int8(K, N, seed=2)
    channel_scale, channel_offset = _positive(N, seed=3, size=1e-2), torch.full((N,), -1.0)
    dequantised = (weight.double() + channel_offset.double()) * channel_scale.double()
    dumped = (x.double() @ dequantised).to(torch.bfloat16)
    call = _call(
        "npu_weight_quant_batchmatmul", {0: x, 1: weight, 2: channel_scale, 3: channel_offset}, output=dumped
    )
    assert _judge(_replay(call), dumped) == "consistent"
    minus = (x.double() @ ((weight.double() - channel_offset.double()) * channel_scale.double())).to(
        torch.bfloat16
    )
    assert _judge(_replay(call), minus) == "disagrees"  # the offset subtracted: not the operator
    group = 16
    group_scale = _positive(K // group, N, seed=4, size=1e-2)
    per_group = weight.double() * group_scale.double().repeat_interleave(group, 0)
    dumped = (x.double() @ per_group).to(torch.bfloat16)
    call = _call(
        "npu_weight_quant_batchmatmul",
        {0: x, 1: weight, 2: group_scale},
        {"antiquant_group_size": group},
        dumped,
    )
    assert _judge(_replay(call), dumped) == "consistent"
