"""torch_npu's other ropes (replay/npu_ops.py): ``npu_apply_rotary_pos_emb`` (both outputs),
``npu_mrope`` (a cos/sin cache by position, a partial rotary width) and ``npu_interleave_rope``,
held against rotations written as complex products of the pairs each doc names."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_ops
from tui_acc.replay.call import Call, Replayed
from tui_acc.replay.dumped_call import Gathered
from tui_acc.verdicts.replay_check import _judged


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape)).to(torch.float64)


def _turn(
    first: torch.Tensor, second: torch.Tensor, angles: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs (first, second) rotated by ``angles``, as complex products."""
    turned = torch.complex(first, second) * torch.polar(torch.ones_like(angles), angles)
    return turned.real, turned.imag


def _judge(replayed: Replayed, dumped: torch.Tensor, call: Call) -> str:
    gathered = Gathered(call, from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _call(api: str, positional: dict, keyword: dict, outputs: list[torch.Tensor]) -> Call:
    def plain(v):
        return from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v

    return Call(
        f"NPU.{api}.0.forward",
        api,
        "msprobe",
        {k: plain(v) for k, v in positional.items()},
        {k: plain(v) for k, v in keyword.items()},
        outputs={i: plain(o) for i, o in enumerate(outputs)},
    )


def test_apply_rotary_pos_emb_checks_the_query_and_the_key() -> None:
    q, k = _randn(1, 3, 4, 8, seed=1), _randn(1, 3, 2, 8, seed=2)  # BSND
    angles = _randn(1, 3, 1, 4, seed=3)
    cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)

    def rope(x: torch.Tensor) -> torch.Tensor:
        first, second = _turn(x[..., :4], x[..., 4:], angles)
        return torch.cat((first, second), -1).to(torch.float32)

    outputs = [rope(q), rope(k)]
    call = _call("npu_apply_rotary_pos_emb", {0: q, 1: k, 2: cos, 3: sin}, {}, outputs)
    replayed = npu_ops.npu_apply_rotary_pos_emb(call)
    assert replayed.notes == ("rotary_mode not recorded: torch_npu's default 'half'",)
    assert _judge(replayed, outputs[0], call) == "consistent"
    wrong_key = _call("npu_apply_rotary_pos_emb", {0: q, 1: k, 2: cos, 3: sin}, {}, [outputs[0], -outputs[1]])
    assert _judge(npu_ops.npu_apply_rotary_pos_emb(wrong_key), outputs[0], wrong_key) == "disagrees"


@pytest.mark.parametrize("mode", ["half", "interleaved"])
def test_mrope_rotates_each_heads_rotary_part_by_its_positions_row(mode: str) -> None:
    tokens, heads, head, rotary = 4, 2, 12, 8
    positions = torch.tensor([5, 0, 7, 3])
    theta = _randn(10, rotary // 2, seed=4)
    cache = torch.cat((theta.cos(), theta.sin()), -1)  # a row per position: cosines, then sines
    q, k = _randn(tokens, heads * head, seed=5), _randn(tokens, heads * head, seed=6)

    def rope(x: torch.Tensor) -> torch.Tensor:
        rows = x.view(tokens, heads, head).clone()
        part = rows[..., :rotary]
        angles = theta[positions][:, None, :]
        if mode == "half":
            first, second = _turn(part[..., : rotary // 2], part[..., rotary // 2 :], angles)
            rows[..., :rotary] = torch.cat((first, second), -1)
        else:
            first, second = _turn(part[..., 0::2], part[..., 1::2], angles)
            rows[..., :rotary] = torch.stack((first, second), -1).flatten(-2)
        return rows.view(tokens, -1).to(torch.float32)

    outputs = [rope(q), rope(k)]
    keyword = {"head_size": head, "rotary_mode": mode, "mrope_section": [0, 0, 0]}
    call = _call("npu_mrope", {0: positions, 1: q, 2: k, 3: cache}, keyword, outputs)
    assert _judge(npu_ops.npu_mrope(call), outputs[0], call) == "consistent"
    shifted = _call("npu_mrope", {0: positions + 1, 1: q, 2: k, 3: cache}, keyword, outputs)
    assert _judge(npu_ops.npu_mrope(shifted), outputs[0], shifted) == "disagrees"


def test_interleave_rope_deinterleaves_then_rotates_halves() -> None:
    x = _randn(1, 2, 3, 64, seed=7)  # B, N, S, 64
    angles = _randn(1, 1, 3, 32, seed=8)
    cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)
    first, second = _turn(x[..., 0::2], x[..., 1::2], angles)  # the pairs as stored: (x0, x1), ...
    expected = torch.cat((first, second), -1).to(torch.float32)  # the output stays de-interleaved
    call = _call("npu_interleave_rope", {0: x, 1: cos, 2: sin}, {}, [expected])
    assert _judge(npu_ops.npu_interleave_rope(call), expected, call) == "consistent"
    plain = torch.cat(_turn(x[..., :32], x[..., 32:], angles), -1).to(torch.float32)  # no de-interleave
    assert _judge(npu_ops.npu_interleave_rope(call), plain, call) == "disagrees"
