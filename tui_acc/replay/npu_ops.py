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


def npu_apply_rotary_pos_emb(call: Call) -> Replayed:
    """``torch_npu.npu_apply_rotary_pos_emb(query, key, cos, sin, layout='BSND', rotary_mode='half')
    -> (query, key)``, rotated in place: each ``x * cos + rotate(x) * sin`` with cos and sin broadcast
    over the heads (op-plugin ``docs/context/torch_npu-npu_apply_rotary_pos_emb.md``); both outputs
    compared."""
    if call.sample is not None:
        raise NotSampleable("its cosines and sines broadcast over the heads")
    query, key = call.tensor(0, "query", "query"), call.tensor(1, "key", "key")
    cos, sin = call.tensor(2, "cos", "cos"), call.tensor(3, "sin", "sin")
    mode = call.option("rotary_mode", 5)
    notes: tuple[str, ...] = ()
    if mode is None:
        mode, notes = "half", ("rotary_mode not recorded: torch_npu's default 'half'",)
    if mode not in ROTARY_MODES:
        raise ReplayImpossible(f"rotary_mode {mode!r}: no documented formula for it here")
    try:
        turned = [x * cos + rotated(x, str(mode)) * sin for x in (query, key)]
    except ValueError as exc:
        raise ReplayImpossible(
            f"shape mismatch: cos {cos.shape} for query {query.shape}, key {key.shape}"
        ) from exc
    return _with_second_output(call, turned[0], turned[1], 2, notes)


def npu_mrope(call: Call) -> Replayed:
    """``torch_npu.npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section,
    rotary_mode='half') -> (query, key)``: row ``positions[t]`` of ``cos_sin_cache`` holds the rotary
    width's cosines then sines (half each); each head's first ``rotary_dim`` values rotated (``half``:
    ``x1 * c - x2 * s, x2 * c + x1 * s`` of its halves; ``interleaved``: of its even and odd
    values), the rest passed through (op-plugin ``docs/context/torch_npu-npu_mrope.md``)."""
    positions = call.raw(0, "positions")
    if positions is None or positions.dtype.kind not in "iu":
        raise ReplayImpossible("inputs missing: positions (argument 0) was not dumped")
    section = call.option("mrope_section")
    if section and any(int(v) for v in section):
        raise ReplayImpossible(f"mrope_section {section}: multimodal sections are not replayed here")
    if positions.ndim != 1:
        raise ReplayImpossible(
            f"positions {list(positions.shape)}: multimodal positions are not replayed here"
        )
    query, key = call.tensor(1, "query", "query"), call.tensor(2, "key", "key")
    table = call.tensor(3, "cos_sin_cache", "cos_sin_cache")
    head = call.option("head_size", 4)
    if not isinstance(head, int) or head <= 0:
        raise ReplayImpossible("head_size not recorded")
    mode = call.option("rotary_mode")
    notes: tuple[str, ...] = ()
    if mode is None:
        mode, notes = "half", ("rotary_mode not recorded: torch_npu's default 'half'",)
    if mode not in ("half", "interleaved", "interleave"):  # the doc's names: half, interleaved
        raise ReplayImpossible(f"rotary_mode {mode!r}: no documented formula for it here")
    if positions.max(initial=0) >= table.shape[0]:
        raise ReplayImpossible(f"a position past the cache's {table.shape[0]} rows")
    rows = table[positions.astype(np.int64)]
    half = rows.shape[-1] // 2
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    interleaved = mode != "half"
    turned = [_mrope_rotate(x, cos, sin, head, interleaved) for x in (query, key)]
    return _with_second_output(call, turned[0], turned[1], 2, notes)


def _mrope_rotate(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, head: int, interleaved: bool
) -> np.ndarray:
    if x.shape[-1] % head:
        raise ReplayImpossible(f"a row of {x.shape[-1]} is not heads of {head}")
    heads = x.reshape(x.shape[0], -1, head).copy()
    width = 2 * cos.shape[-1]
    if width > head:
        raise ReplayImpossible(f"a rotary width of {width} for heads of {head}")
    part = heads[..., :width]
    first, second = (
        (part[..., 0::2], part[..., 1::2])
        if interleaved
        else (part[..., : width // 2], part[..., width // 2 :])
    )
    one, two = first * cos - second * sin, second * cos + first * sin
    if interleaved:
        part[..., 0::2], part[..., 1::2] = one, two
    else:
        part[..., : width // 2], part[..., width // 2 :] = one, two
    heads[..., :width] = part
    return heads.reshape(x.shape)


def npu_interleave_rope(call: Call) -> Replayed:
    """``torch_npu.npu_interleave_rope(x, cos, sin)`` (DeepSeek's MLA rope): each head's 64 values
    de-interleaved (``x.reshape(..., 32, 2).transpose(-1, -2)``), then ``q * cos + rotate_half(q) *
    sin``; the output stays de-interleaved (op-plugin ``docs/context/torch_npu-npu_interleave_rope.md``)."""
    if call.sample is not None:
        raise NotSampleable("its cosines and sines broadcast over the heads")
    x = call.tensor(0, "x", "x")
    cos, sin = call.tensor(1, "cos", "cos"), call.tensor(2, "sin", "sin")
    if x.shape[-1] % 2:
        raise ReplayImpossible(f"its last dimension ({x.shape[-1]}) is odd")
    q = x.reshape(*x.shape[:-1], -1, 2).swapaxes(-1, -2).reshape(x.shape)
    try:
        out = q * cos + rotated(q, "half") * sin
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: cos {cos.shape} for x {x.shape}") from exc
    return Replayed(out, reduction=2)


REFERENCES: dict[str, Reference] = {
    "NPU.npu_rms_norm": npu_rms_norm,
    "NPU.npu_rotary_mul": npu_rotary_mul,
    "NPU.npu_add_rms_norm": npu_add_rms_norm,
    "NPU.npu_apply_rotary_pos_emb": npu_apply_rotary_pos_emb,
    "NPU.npu_mrope": npu_mrope,
    "NPU.npu_interleave_rope": npu_interleave_rope,
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
    "NPU.npu_moe_token_unpermute": _cannot(
        "the public goldens disagree on which way sorted_indices maps (MindSpeed-MM's eager_unpermute "
        "scatters by it in one version and gathers by it in the next; MindSpore's kernel test "
        "scatters): no reference to hold it against until a device settles it"
    ),
    "NPU.npu_kv_rmsnorm_rope_cache": _cannot(
        "its doc gives its formulas only as images (a norm, a rope and a cache write fused): no "
        "reference to hold it against"
    ),
    **{
        f"NPU.npu_moe_distribute_{step}{version}": _cannot(
            "an all-to-all across the expert-parallel ranks: the other ranks' tensors are not in this dump"
        )
        for step in ("dispatch", "combine")
        for version in ("", "_v2")
    },
}
REFERENCES.update(KNOWN_IMPOSSIBLE)


def _with_second_output(
    call: Call, first: np.ndarray, second: np.ndarray, reduction: int, notes: tuple[str, ...]
) -> Replayed:
    """Both outputs of a call that returns two (the rotated query and key), compared as one against
    ``call.outputs`` 0 and 1; where the second was not dumped, the first alone (said)."""
    dumped_first, dumped_second = call.outputs.get(0), call.outputs.get(1)
    if dumped_first is None or dumped_second is None or dumped_second.size != second.size:
        said = (*notes, "its second output (the key) not dumped: the first alone")
        return Replayed(first, reduction=reduction, notes=said)
    # the wider dtype of the two judges both (one rounding each, at their own dtypes)
    observed = np.concatenate((call.wide(dumped_first).reshape(-1), call.wide(dumped_second).reshape(-1)))
    return Replayed(
        np.concatenate((first.reshape(-1), second.reshape(-1))),
        reduction=reduction,
        notes=notes,
        observed=observed.astype(dumped_first.dtype),
    )
