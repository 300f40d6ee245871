"""``torch_npu.npu_trans_quant_param(scale, offset=None, round_mode=0) -> int64``, replayed from
op-plugin's API doc (``docs/zh/custom_APIs/torch_npu/torch_npu-npu_trans_quant_param.md``):

- the float32 ``scale`` cut to FP19, its upper 19 bits (``& 0xFFFFE000``), in bits 0-31, bit 46 set;
  ``round_mode`` 1 rounds it to the nearest FP19 first (R_INT) instead of cutting;
- an ``offset``, where given, ``clamp(int(round(offset)), -256, 255)``, its 9 bits in bits 37-45;
  scale and offset broadcast against each other (a 1-d pair: to the longer of the two).

The int64 is not a number to measure distances in (the flag and the offset dwarf the scale's bits):
what it packs is decoded (``npu_quant.quant_param``, which every quantised matmul's replay also
uses) and compared, the scale, the offset and the flag bit, as float32.
"""

from __future__ import annotations

import numpy as np

from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_quant import quant_param

FP19_KEPT = 0xFFFFE000
FP19_HALF = 0x1000  # half the last kept bit: the rounding point of R_INT
OFFSET_RANGE = (-256, 255)
FLAG_BIT = 46


def npu_trans_quant_param(call: Call) -> Replayed:
    """What the int64 output packs, against what the doc says it packs."""
    raw_scale = call.raw(0, "scale")
    if raw_scale is None:
        raise ReplayImpossible("inputs missing: scale (argument 0) was not dumped")
    dumped = call.outputs.get(0)
    if dumped is None or dumped.dtype.kind not in "iu":
        raise ReplayImpossible("its int64 output was not dumped: nothing to decode")
    round_mode = call.option("round_mode", 2, 0)
    if round_mode not in (0, 1):
        raise ReplayImpossible(f"round_mode {round_mode!r}: the doc defines 0 (cut) and 1 (R_INT)")
    raw_offset = call.raw(1, "offset")
    scale_bits = np.asarray(raw_scale, dtype=np.float32).view(np.uint32).astype(np.int64)
    offset = None if raw_offset is None else np.asarray(raw_offset, dtype=np.float64)
    if offset is not None:
        try:
            scale_bits, offset = np.broadcast_arrays(scale_bits, offset)
        except ValueError as exc:
            raise ReplayImpossible(f"scale {list(scale_bits.shape)} and offset {list(offset.shape)}") from exc
    if scale_bits.size != dumped.size:
        raise ReplayImpossible(f"scale of {scale_bits.size} values, output of {dumped.size}")
    found_scale, found_offset = quant_param(dumped.reshape(scale_bits.shape))
    cut = scale_bits & FP19_KEPT
    if round_mode == 0:
        kept = cut
    else:
        kept = (scale_bits + FP19_HALF) & FP19_KEPT
        # exactly half way: which way R_INT breaks the tie is not documented; either is right
        tie = (scale_bits & ~FP19_KEPT & 0xFFFFFFFF) == FP19_HALF
        found_bits = np.asarray(found_scale, dtype=np.float32).view(np.uint32).astype(np.int64)
        kept = np.where(tie & (found_bits == cut), cut, kept)
    expected = [(kept & 0xFFFFFFFF).astype(np.uint32).view(np.float32).reshape(-1)]
    observed = [found_scale.astype(np.float32).reshape(-1)]
    # bit 46 tells the kernel the word packs a scale: each must have it (1), compared with the rest
    flags = (np.asarray(dumped, dtype=np.int64).reshape(-1) >> FLAG_BIT) & 1
    expected.append(np.ones(flags.size, dtype=np.float32))
    observed.append(flags.astype(np.float32))
    notes: tuple[str, ...] = ()
    if offset is not None:
        expected.append(np.clip(np.round(offset), *OFFSET_RANGE).astype(np.float32).reshape(-1))
        packed = found_offset if found_offset is not None else np.zeros(dumped.size)
        observed.append(packed.astype(np.float32).reshape(-1))
        notes = ("the packed scale and offset, decoded",)
    # every part is exact (FP19 scales, integer offsets, a bit): compared exactly, so that one scale
    # a step off is not lost beside offsets a hundred thousand times its size
    return Replayed(
        np.concatenate(expected).astype(np.float64),
        notes=notes,
        observed=np.concatenate(observed),
        exact=True,
    )


REFERENCES = {"NPU.npu_trans_quant_param": npu_trans_quant_param}
