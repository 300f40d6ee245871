"""References for torch_npu's fused operators as msprobe records them (``NPU.<api>``), float64, from
each API's documented semantics (Ascend/op-plugin ``docs/context/torch_npu-<api>.md``; docs/replay.md
names the source of each). An argument the caller left to its default is not in the dump (msprobe
records only what was passed): the documented default is used, and said in the notes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, NotSampleable, Replayed, ReplayImpossible

Reference = Callable[[Call], Replayed]

ROTARY_MODES = ("half", "interleave")


def rotated(x: np.ndarray, mode: str) -> np.ndarray:
    """``rotate(x)`` of torch_npu's rope: ``half``: the last dimension's halves x1, x2 as
    ``cat(-x2, x1)``; ``interleave``: each pair (x[2i], x[2i+1]) as (-x[2i+1], x[2i])."""
    if mode == "half":
        first, second = np.split(x, 2, axis=-1)
        return np.concatenate((-second, first), axis=-1)
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    return np.stack((-pairs[..., 1], pairs[..., 0]), axis=-1).reshape(x.shape)


def npu_rotary_mul(call: Call) -> Replayed:
    """``torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half')``: ``input * r1 + rotate(input) * r2``
    (r1 the cosines, r2 the sines, broadcast to the input; op-plugin
    ``docs/context/torch_npu-npu_rotary_mul.md``). Computed whole: the cosines and sines broadcast
    over the input's rows in their own pattern (one row a position, the heads between)."""
    if call.sample is not None:
        raise NotSampleable("its cosines and sines broadcast over the rows in a pattern of their own")
    x = call.tensor(0, "input", "input")
    cos = call.tensor(1, "r1", "r1")
    sin = call.tensor(2, "r2", "r2")
    mode = call.option("rotary_mode", 3)
    notes: tuple[str, ...] = ()
    if mode is None:
        mode, notes = "half", ("rotary_mode not recorded: torch_npu's default 'half'",)
    if mode not in ROTARY_MODES:
        raise ReplayImpossible(f"rotary_mode {mode!r}: no documented formula for it here")
    if x.shape[-1] % 2:
        raise ReplayImpossible(f"its last dimension ({x.shape[-1]}) is odd: no rotation pairs it")
    try:
        out = x * cos + rotated(x, str(mode)) * sin
    except ValueError as exc:  # numpy's broadcast error
        raise ReplayImpossible(
            f"shape mismatch: cosines {cos.shape} and sines {sin.shape} for {x.shape}"
        ) from exc
    # two products summed per element, rounded once to the output's dtype by the fused kernel
    return Replayed(out, reduction=2, notes=notes)


def _rms_normed(call: Call, x: np.ndarray, gamma: np.ndarray, eps_index: int, roundings: int = 1) -> Replayed:
    """``x`` normalised by its root mean square over gamma's (trailing) dimensions, times gamma, as
    torch_npu's RMSNorms compute it; ``epsilon`` (keyword, or argument ``eps_index``) 1e-6 where the
    call did not record it, said."""
    width = int(gamma.size)
    if x.size % width:
        raise ReplayImpossible(f"shape mismatch: gamma of {width} elements for an input of shape {x.shape}")
    eps = call.option("epsilon", eps_index)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps, notes = 1e-6, ("epsilon not recorded: torch_npu's default 1e-6",)
    normed = maths.rms_norm(x, width, None, float(eps)).reshape(-1, width) * gamma.reshape(-1)
    return Replayed(
        normed.reshape(x.shape), rows=call.rows, reduction=width, notes=notes, roundings=roundings
    )


def _trailing_only(call: Call, keyword: str, gamma: np.ndarray) -> None:
    """A sample is of rows: NotSampleable where gamma spans more than the last dimension."""
    raw = call.raw(0, keyword)
    if call.sample is not None and raw is not None and int(gamma.size) != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")


def npu_rms_norm(call: Call) -> Replayed:
    """``torch_npu.npu_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd)``, its first output (op-plugin
    ``docs/context/torch_npu-npu_rms_norm.md``)."""
    gamma = call.tensor(1, "gamma", "gamma")
    _trailing_only(call, "x", gamma)
    return _rms_normed(call, call.data(0, "x", "x"), gamma, 2)


def npu_add_rms_norm(call: Call) -> Replayed:
    """``torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x)``, its first output:
    ``x = x1 + x2`` normalised by its root mean square over gamma's dimensions (the trailing ones),
    times gamma (op-plugin ``docs/context/torch_npu-npu_add_rms_norm.md``). The sum is its third
    output, rounded to the inputs' dtype; whether the kernel normalises that rounded sum or its
    float32 one, the doc does not say: both roundings are allowed."""
    gamma = call.tensor(2, "gamma", "gamma")
    _trailing_only(call, "x1", gamma)
    x = call.data(0, "x1", "x1") + call.data(1, "x2", "x2")
    return _rms_normed(call, x, gamma, 3, roundings=2)


REFERENCES: dict[str, Reference] = {
    "NPU.npu_rms_norm": npu_rms_norm,
    "NPU.npu_rotary_mul": npu_rotary_mul,
    "NPU.npu_add_rms_norm": npu_add_rms_norm,
}


def _cannot(reason: str) -> Reference:
    """A torch_npu operator known to msprobe's hooks whose replay cannot be right from its record:
    the replay says why, by name, rather than "type unknown"."""

    def refuse(_call: Call) -> Replayed:
        raise ReplayImpossible(reason)

    return refuse


# (op-plugin's sources and docs; docs/replay.md's "Impossible by design")
KNOWN_IMPOSSIBLE = {
    "NPU._npu_rotary_embedding": _cannot(
        "its cos/sin cache is built once per process from the first call's cos_sin_cache "
        "(op-plugin ops/atb/RopeAtb.cpp): the dumped one need not be the one it used; and it rotates "
        "in place, returning nothing"
    ),
    "NPU.npu_kv_rmsnorm_rope_cache": _cannot(
        "its doc gives its formulas only as images (a norm, a rope and a cache write fused): no "
        "reference to hold it against"
    ),
    "NPU.npu_moe_distribute_dispatch": _cannot(
        "an all-to-all across the expert-parallel ranks: the other ranks' tensors are not in this dump"
    ),
    "NPU.npu_moe_distribute_combine": _cannot(
        "an all-to-all across the expert-parallel ranks: the other ranks' tensors are not in this dump"
    ),
    "NPU.npu_moe_distribute_dispatch_v2": _cannot(
        "an all-to-all across the expert-parallel ranks: the other ranks' tensors are not in this dump"
    ),
    "NPU.npu_moe_distribute_combine_v2": _cannot(
        "an all-to-all across the expert-parallel ranks: the other ranks' tensors are not in this dump"
    ),
}
REFERENCES.update(KNOWN_IMPOSSIBLE)
