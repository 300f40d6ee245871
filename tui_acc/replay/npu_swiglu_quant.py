"""torch_npu's ``npu_dequant_swiglu_quant`` replayed: its first output ``y`` (int8).

Signature (op-plugin ``op_plugin/config/op_plugin_functions.yaml``; everything after ``x`` is
keyword-only)::

    npu_dequant_swiglu_quant(x, *, weight_scale=None, activation_scale=None, bias=None,
        quant_scale=None, quant_offset=None, group_index=None, activate_left=False, quant_mode=0,
        dst_type=None, round_mode=None, activate_dim=None, swiglu_mode=0, clamp_limit=7.0,
        glu_alpha=1.702, glu_bias=1.0) -> (y, scale)

Semantics, from op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_dequant_swiglu_quant.md``
(``docs/context/`` before 2026-01; that older text gave swiglu_mode 1 another formula, which its
rewrite, op-plugin's own test golden and the kernel all abandon) where it says, and from the
kernel (hicann/ops-nn ``quant/dequant_swiglu_quant/op_kernel/dequant_swiglu_quant.h``,
``dequant_swiglu_quant_static_base.hpp``) and the two goldens that agree with it (op-plugin
``test/test_custom_ops/test_npu_dequant_swiglu_quant.py``, ops-nn
``tests/st/aclnnDequantSwigluQuantV2/executor_aclnnDequantSwigluQuantV2.py``) where the doc is
silent:

- groups: ``group_index`` holds counts (the doc: count mode only); rows
  ``sum(group_index[:g]):sum(group_index[:g+1])`` use row ``g`` of each ``[groupNum, ...]`` scale;
  no ``group_index``: one group of every row. Rows past its sum are left undefined by the kernel
  (doc: "garbage, possibly inf/nan"): they are left out of the comparison, and said;
- dequantisation of an int32 ``x``: ``(x + bias) * weight_scale[g] * activation_scale[row]``, an
  int32 bias added before (kernel: in int32), a float bias after the scales; a float16/bfloat16
  ``x`` is taken as it is (the kernel and both goldens ignore a ``weight_scale`` beside it);
- swiglu, ``swish(z, a) = z * sigmoid(a * z)``: mode 0 ``swish(A, 1) * B``; ``activate_left`` False
  (the default) takes A as the second half of the last dimension and B as the first (True: the
  reverse; the opposite of ``npu_swiglu``); mode 1 takes A = the even elements, B = the odd ones
  (``activate_left`` ignored), mode 2 the halves as mode 0; modes 1 and 2 then compute
  ``swish(min(A, clamp_limit), glu_alpha) * (clamp(B, -clamp_limit, clamp_limit) + glu_bias)``;
- quant_mode 1 (dynamic): times the smooth ``quant_scale[g]`` where given, then each row scaled to
  127 at its largest magnitude and rounded (``quant_offset`` unused); quant_mode 0 (static, the
  default): ``out / quant_scale[g] + quant_offset[g]`` (one value per group, or one per column),
  rounded, saturated to int8. The doc writes the smooth step as a product for both modes; the kernel
  and both goldens divide by ``quant_scale`` in the static mode, as here;
- rounding: half to even (the kernel's ``CAST_RINT``; op-plugin's ``round_mode`` default "rint").
  A correct kernel may round an element at a tie either way (``Replayed.unrounded``).

Refused by name: ``dst_type`` other than int8, ``round_mode`` floor/ceil/trunc, ``activate_dim``
other than the last, ``swiglu_mode`` beyond 2, and what the sources disagree on (a bias with
``group_index`` in the dynamic mode, a static ``quant_offset`` without ``quant_scale``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_quant import RANGES

# the kernel's float32 chain before the rounding (cast, two scales, exp, divide, product, smooth
# scale, row maximum, divide), an error relative to the value: a few dozen units of float32's roundoff
SLACK = 2.0**-18
# torch_npu's documented defaults (msprobe records only what the caller passed)
DEFAULTS: dict[str, Any] = {
    "activate_left": False,
    "quant_mode": 0,
    "swiglu_mode": 0,
    "clamp_limit": 7.0,
    "glu_alpha": 1.702,
    "glu_bias": 1.0,
}
# dst_type as op-plugin's OpApi takes it (a torch ScalarType number: 1 is int8, its default)
INT8_DST_TYPES = (None, 1, "int8", "torch.int8")
# round_mode 0 "rint" (the default) and 1 "round" differ only at a tie, which the comparison allows
ROUND_MODES = {2: "floor", 3: "ceil", 4: "trunc"}
X_DTYPES = ("int32", "float16", "bfloat16")


def npu_dequant_swiglu_quant(call: Call) -> Replayed:
    """``torch_npu.npu_dequant_swiglu_quant``'s first output ``y`` (int8), over the rows that
    ``group_index`` defines (and the sampled ones among them)."""
    raw = call.raw(0, "x")
    if raw is None:
        raise ReplayImpossible("inputs missing: x (argument 0) was not dumped")
    _refuse_undocumented(call, raw)
    settings, notes = _settings(call)
    x = raw.reshape(-1, raw.shape[-1])
    tokens = x.shape[0]
    groups, group_of = _groups(call, tokens)
    defined = group_of < groups
    rows = np.arange(tokens) if call.rows is None else np.asarray(call.rows)
    rows = rows[defined[rows]]
    if not defined.all():
        notes.append(
            f"{int((~defined).sum())} of {tokens} rows past group_index's sum ({int(defined.sum())}) "
            "left out: the kernel leaves them undefined (doc)"
        )
    if not rows.size:
        raise ReplayImpossible(
            f"none of the rows replayed lies within group_index's sum ({int(defined.sum())})"
        )
    group = group_of[rows]
    quant_mode = int(settings["quant_mode"])
    values = _dequantised(call, x[rows], rows, tokens, (group, groups), quant_mode, notes)
    out = _swiglu(values, settings)
    unrounded = _quantised(call, out, group, groups, quant_mode, notes)
    low, high = RANGES["int8"]
    clipped = np.clip(unrounded, low, high)
    return Replayed(
        np.clip(np.rint(unrounded), low, high),
        notes=tuple(notes),
        rows=None if call.rows is None and defined.all() else rows,
        unrounded=clipped,
        step_slack=SLACK,
    )


def _refuse_undocumented(call: Call, x: np.ndarray) -> None:
    """ReplayImpossible naming what the doc does not settle (or x's dtype and shape that it forbids)."""
    if x.ndim < 2:
        raise ReplayImpossible(f"x {list(x.shape)} has fewer than 2 dimensions")
    if x.shape[-1] % 2:
        raise ReplayImpossible(f"x's last dimension ({x.shape[-1]}) is odd: swiglu halves it")
    if x.dtype.name not in X_DTYPES:
        raise ReplayImpossible(f"x of {x.dtype.name}: the doc takes int32, float16 or bfloat16")
    if call.output_dtype not in ("", "int8"):
        raise ReplayImpossible(f"a {call.output_dtype} output: only int8 is documented")
    dst_type = call.option("dst_type")
    if dst_type not in INT8_DST_TYPES:
        raise ReplayImpossible(f"dst_type {dst_type!r}: only int8 (1) is documented; not replayed here")
    round_mode = call.option("round_mode")
    if round_mode not in (None, 0, 1):
        name = ROUND_MODES.get(round_mode, "unknown")
        raise ReplayImpossible(f"round_mode {round_mode!r} ({name}): not documented; not replayed here")
    activate_dim = call.option("activate_dim")
    if activate_dim not in (None, -1, x.ndim - 1):
        raise ReplayImpossible(f"activate_dim {activate_dim!r} is not the last dimension: not replayed here")


def _settings(call: Call) -> tuple[dict[str, Any], list[str]]:
    """The scalar arguments, torch_npu's defaults where not recorded (said where they matter)."""
    settings = {key: call.option(key) for key in DEFAULTS}
    mode = settings["swiglu_mode"] if settings["swiglu_mode"] is not None else DEFAULTS["swiglu_mode"]
    if mode not in (0, 1, 2):
        raise ReplayImpossible(f"swiglu_mode {mode!r}: only 0, 1 and 2 are documented")
    matters = {"quant_mode", "swiglu_mode"}
    if mode in (0, 2):
        matters.add("activate_left")
    if mode in (1, 2):
        matters |= {"clamp_limit", "glu_alpha", "glu_bias"}
    assumed = []
    for key, default in DEFAULTS.items():
        if settings[key] is None:
            settings[key] = default
            if key in matters:
                assumed.append(f"{key} {default}")
    if settings["quant_mode"] not in (0, 1):
        raise ReplayImpossible(f"quant_mode {settings['quant_mode']!r}: only 0 (static) and 1 (dynamic)")
    notes = [f"not recorded, torch_npu's defaults: {', '.join(assumed)}"] if assumed else []
    return settings, notes


def _groups(call: Call, tokens: int) -> tuple[int, np.ndarray]:
    """The number of groups and each row's group (``groups`` for a row past group_index's sum)."""
    counts = call.raw(-1, "group_index")
    if counts is None:
        return 1, np.zeros(tokens, dtype=np.int64)
    counts = np.asarray(counts).reshape(-1).astype(np.int64)
    if not counts.size or np.any(counts < 0):
        raise ReplayImpossible(f"group_index {counts.tolist()}: the doc wants non-negative counts")
    ends = np.cumsum(counts)
    if ends[-1] > tokens:
        raise ReplayImpossible(
            f"group_index sums to {int(ends[-1])}, past x's {tokens} rows (the kernel reads out of bounds)"
        )
    return counts.size, np.searchsorted(ends, np.arange(tokens), side="right")


def _table(values: np.ndarray, groups: int, width: int, what: str, scalar: bool = False) -> np.ndarray:
    """A per-group parameter as a ``[groups, width]`` table (``[groups, 1]``: one value a group,
    where ``scalar``); ReplayImpossible for any other shape."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size == groups * width:
        return flat.reshape(groups, width)
    if scalar and flat.size == groups:
        return flat.reshape(groups, 1)
    raise ReplayImpossible(f"{what} {list(values.shape)} for {groups} group(s) of {width} columns")


def _tensor(call: Call, keyword: str) -> np.ndarray | None:
    """Keyword argument ``keyword`` at float64 (integers as they are), or None where not given."""
    value = call.raw(-1, keyword)
    if value is None:
        return None
    return value if value.dtype.kind in "iu" else np.asarray(call.wide(value), dtype=np.float64)


def _dequantised(
    call: Call,
    x: np.ndarray,
    rows: np.ndarray,
    tokens: int,
    grouping: tuple[np.ndarray, int],
    quant_mode: int,
    notes: list[str],
) -> np.ndarray:
    """The rows of x (``rows`` of ``tokens``; ``grouping``: their groups, and how many groups there
    are) dequantised (int32) or as they are (float), at float64."""
    group, groups = grouping
    width = x.shape[1]
    weight_scale = _tensor(call, "weight_scale")
    activation_scale = _tensor(call, "activation_scale")
    bias = _tensor(call, "bias")
    if x.dtype != np.int32:
        if activation_scale is not None or bias is not None:
            raise ReplayImpossible("activation_scale or bias beside a float x: the doc requires None")
        if weight_scale is not None:
            notes.append("weight_scale beside a float x: unused (the kernel dequantises int32 x only)")
        return np.asarray(call.wide(x), dtype=np.float64)
    if weight_scale is None:
        raise ReplayImpossible("inputs missing: weight_scale (an int32 x without it is not modelled)")
    if bias is not None and quant_mode == 1 and call.raw(-1, "group_index") is not None:
        raise ReplayImpossible(
            "a bias with group_index in the dynamic mode: the doc says it takes no effect, the kernel adds it"
        )
    values = x.astype(np.float64)
    integer_bias = bias is not None and bias.dtype.kind in "iu"
    if bias is not None and integer_bias:
        values = values + _table(bias, groups, width, "bias")[group]
    values = values * _table(weight_scale, groups, width, "weight_scale")[group]
    if activation_scale is not None:
        per_row = activation_scale.reshape(-1)
        if per_row.size != tokens:
            raise ReplayImpossible(f"activation_scale {list(activation_scale.shape)}: not one value a row")
        values = values * per_row[rows][:, None]
    if bias is not None and not integer_bias:
        values = values + _table(bias, groups, width, "bias")[group]
    return values


def _swiglu(values: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """The swiglu of each row (its width halved), in the documented mode."""
    mode = int(settings["swiglu_mode"])
    if mode == 1:
        activated, linear = values[:, 0::2], values[:, 1::2]
    else:
        first, second = np.split(values, 2, axis=1)
        activated, linear = (first, second) if settings["activate_left"] else (second, first)
    if mode == 0:
        return maths.silu(activated) * linear
    limit, alpha = float(settings["clamp_limit"]), float(settings["glu_alpha"])
    activated = np.minimum(activated, limit)
    linear = np.clip(linear, -limit, limit)
    return activated * maths.sigmoid(alpha * activated) * (linear + float(settings["glu_bias"]))


def _quantised(
    call: Call, out: np.ndarray, group: np.ndarray, groups: int, quant_mode: int, notes: list[str]
) -> np.ndarray:
    """The values the int8 rounding takes: static or dynamic per row."""
    width = out.shape[1]
    quant_scale = _tensor(call, "quant_scale")
    quant_offset = _tensor(call, "quant_offset")
    if quant_mode == 1:
        if quant_scale is not None:
            out = out * _table(quant_scale, groups, width, "quant_scale")[group]
        if quant_offset is not None:
            notes.append("quant_offset given: the dynamic quantisation does not use it")
        largest = np.max(np.abs(out), axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(largest > 0, out * (127.0 / largest), 0.0)
    if quant_scale is None:
        if quant_offset is not None:
            raise ReplayImpossible(
                "quant_offset without quant_scale (static): the kernel ignores it, op-plugin's test adds it"
            )
        return out
    scaled = out / _table(quant_scale, groups, width, "quant_scale", scalar=True)[group]
    if quant_offset is None:
        notes.append("quant_offset not given: no offset added")
        return scaled
    return scaled + _table(quant_offset, groups, width, "quant_offset", scalar=True)[group]


REFERENCES = {"NPU.npu_dequant_swiglu_quant": npu_dequant_swiglu_quant}
