"""``npu_trans_quant_param`` replayed (replay/npu_quant_param.py), against op-plugin's doc: its formula
written again here bit by bit, and the int64 values of the doc's own example."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.npu_quant import quant_param
from tui_acc.replay.npu_quant_param import npu_trans_quant_param
from tui_acc.verdicts.replay_check import _judged

# the doc's example (scale and offset randn(16), round_mode 1): what the NPU printed
DOC_EXAMPLE = [70507248869376, 70509369614336, 70507209793536, 140463653937152, 140603250524160]


def _packed(scale: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    """The doc's steps: out = (bits(scale) & 0xFFFFE000) | 1 << 46; then, with an offset,
    out = (out & 0x4000FFFFFFFF) | ((clamp(int(round(offset)), -256, 255) & 0x1FF) << 37)."""
    out = []
    for i, value in enumerate(scale.astype(np.float32).tolist()):
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        word = (bits & 0xFFFFE000) | (1 << 46)
        if offset is not None:
            kept = max(min(round(float(offset[i])), 255), -256)
            word = (word & 0x4000FFFFFFFF) | ((kept & 0x1FF) << 37)
        out.append(word)
    return np.array(out, dtype=np.int64)


def _call(scale: np.ndarray, offset: np.ndarray | None, dumped: np.ndarray, round_mode: int = 0) -> Call:
    keyword = {"round_mode": round_mode} if round_mode else {}
    positional = {0: scale.astype(np.float32)}
    if offset is not None:
        positional[1] = offset.astype(np.float32)
    return Call(
        "NPU.npu_trans_quant_param.0.forward",
        "NPU.npu_trans_quant_param",
        "msprobe",
        positional,
        keyword,
        output_dtype="int64",
        output_shape=dumped.shape,
        outputs={0: dumped},
    )


def _judge(replayed: Replayed, dumped: np.ndarray) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), dumped, "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


@pytest.mark.parametrize("with_offset", [False, True])
def test_the_packed_scale_and_offset_are_what_the_doc_packs(with_offset: bool) -> None:
    rng = np.random.default_rng(3)
    scale = rng.uniform(1e-4, 3e-3, 24).astype(np.float32)
    offset = rng.uniform(-300, 300, 24).astype(np.float32) if with_offset else None
    dumped = _packed(scale, offset)
    assert _judge(npu_trans_quant_param(_call(scale, offset, dumped)), dumped) == "consistent"
    wrong_scale = _packed(scale * np.float32(1.02), offset)
    assert _judge(npu_trans_quant_param(_call(scale, offset, wrong_scale)), wrong_scale) == "disagrees"
    one_step = scale.copy()  # one scale one FP19 step off, beside offsets up to 255
    one_step[0] = np.float32(scale[0]) * np.float32(1 + 2**-9)
    stepped = _packed(one_step, offset)
    assert _judge(npu_trans_quant_param(_call(scale, offset, stepped)), stepped) == "disagrees"
    if offset is not None:
        wrong_offset = _packed(scale, offset + 1)
        assert _judge(npu_trans_quant_param(_call(scale, offset, wrong_offset)), wrong_offset) == "disagrees"


def test_a_word_without_its_flag_bit_is_caught() -> None:
    scale = np.array([0.5, 0.25], dtype=np.float32)
    unflagged = _packed(scale, None) & ~(1 << 46)
    assert _judge(npu_trans_quant_param(_call(scale, None, unflagged)), unflagged) == "disagrees"


def test_round_mode_one_rounds_to_the_nearest_fp19() -> None:
    # 1 + 2^-10 + 2^-11 + 2^-12: FP19 keeps 10 mantissa bits; the cut gives 1 + 2^-10, R_INT 1 + 2^-9
    scale = np.array([1 + 2**-10 + 2**-11 + 2**-12], dtype=np.float32)
    cut = _packed(scale, None)
    rounded = _packed(np.array([1 + 2**-9], dtype=np.float32), None)
    assert _judge(npu_trans_quant_param(_call(scale, None, rounded, round_mode=1)), rounded) == "consistent"
    assert _judge(npu_trans_quant_param(_call(scale, None, cut, round_mode=1)), cut) == "disagrees"
    assert _judge(npu_trans_quant_param(_call(scale, None, cut)), cut) == "consistent"


def test_the_docs_example_decodes_to_fp19_scales_and_small_offsets() -> None:
    """Each printed value: bit 46 set, the scale's low 13 bits clear (FP19), an offset in
    [-256, 255]; the first is 1 << 46 | 1 << 37 | 0x3F85E000 (scale 1.0458984375, offset 1)."""
    packed = np.array(DOC_EXAMPLE, dtype=np.int64)
    assert all(int(v) >> 46 & 1 for v in packed)
    scale, offset = quant_param(packed)
    assert scale[0] == struct.unpack("<f", struct.pack("<I", 0x3F85E000))[0] == 1.0458984375
    assert offset is not None and offset.tolist()[:5] == [1, 1, 1, -2, -1]
    assert all(struct.unpack("<I", struct.pack("<f", float(s)))[0] & 0x1FFF == 0 for s in scale)


def test_without_its_output_it_says_so() -> None:
    call = Call("NPU.npu_trans_quant_param.0.forward", "x", "msprobe", {0: np.ones(2, np.float32)})
    with pytest.raises(ReplayImpossible, match="int64 output was not dumped"):
        npu_trans_quant_param(call)
