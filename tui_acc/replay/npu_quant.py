"""torch_npu's quantisation operators replayed, from op-plugin's API docs
(``docs/context/torch_npu-<api>.md``; docs/replay.md names each fact's source):

- ``npu_quant_matmul(x1, x2, scale, *, offset, pertoken_scale, bias, output_dtype)``: an int8 matmul,
  its int32 sum exact (``x1 @ x2``, plus an int32 bias), dequantised by ``scale`` (per tensor or per
  output channel; float32, bf16, or the int64 of ``npu_trans_quant_param``) and ``pertoken_scale`` (per
  row), a float bias added after; an int8 output (``output_dtype`` not given) requantised with
  ``offset``, rounded and saturated;
- ``npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset, ...)``: a float matmul
  with the weight dequantised first, ``(weight + antiquant_offset) * antiquant_scale`` (the offset is
  added: it is the negated zero point), per tensor, per channel or per group of rows of k;
- ``npu_dynamic_quant(x, *, smooth_scales, group_index)``: per-token symmetric int8,
  ``round(x * smooth / (rowmax|x * smooth| / 127))``; its first output;
- ``npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True)``: ``input / scales +
  zero_points`` (``div_mode`` False: ``input * scales + zero_points``), rounded and saturated.

An integer output may differ from the replay by one step where the unrounded value is at a tie
(``Replayed.unrounded``): the kernel's float arithmetic decides those.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from tui_acc.replay.call import Call, NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.distance import rounding_noise
from tui_acc.replay.sampling import linear_columns

# the saturation range of each integer output
RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2**31), 2**31 - 1)}
# float32 arithmetic before the rounding to integers: a few units of its roundoff, relative
FLOAT32_SLACK = 2.0**-20
TRANS_FLAG = 1 << 46


def quant_param(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``npu_trans_quant_param``'s int64 undone: the float32 scale in the low 32 bits (already cut to
    its upper 19 bits), and the 9-bit signed offset in bits 37-45 (None where no value carries it)."""
    bits = np.asarray(packed).astype(np.int64, copy=False)
    scale = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    raw = (bits >> 37) & 0x1FF
    offset = np.where(raw >= 256, raw - 512, raw).astype(np.float64)
    return scale, (offset if np.any(offset) else None)


def dequant_scale(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """A dequantisation scale as float64 (float32, bf16, or ``npu_trans_quant_param``'s int64,
    decoded), and the offset an int64 scale packs (None for the others)."""
    if raw.dtype.kind in "iu":
        return quant_param(raw)
    return np.asarray(raw, dtype=np.float64), None


def _scale(call: Call, index: int, keyword: str, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Argument ``index`` (or ``keyword``) as a dequantisation scale (``dequant_scale``)."""
    raw = call.raw(index, keyword)
    if raw is None:
        raise ReplayImpossible(f"inputs missing: {what} (argument {index}) was not dumped")
    return dequant_scale(raw)


def _per_column(values: np.ndarray, n: int, columns: np.ndarray | None, what: str) -> np.ndarray:
    """A per-tensor (1 value) or per-channel (n values) vector, over the computed columns."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if flat.size == 1:
        return flat
    if flat.size != n:
        raise ReplayImpossible(f"{what} of {flat.size} values for {n} output channels")
    return flat if columns is None else flat[columns]


def _integer_output(call: Call, unrounded: np.ndarray, dtype: str, slack: float = FLOAT32_SLACK) -> Replayed:
    low, high = RANGES[dtype]
    clipped = np.clip(unrounded, low, high)
    return Replayed(
        np.clip(np.rint(unrounded), low, high), unrounded=clipped, step_slack=slack, rows=call.rows
    )


def _output_dtype(call: Call, default: str) -> str:
    recorded = call.option("output_dtype")
    return str(recorded).removeprefix("torch.") if recorded else (call.output_dtype or default)


def npu_quant_matmul(call: Call) -> Replayed:
    """``torch_npu.npu_quant_matmul``'s output (op-plugin ``docs/context/torch_npu-npu_quant_matmul.md``)."""
    x1 = call.data(0, "x1", "x1")
    x2 = call.raw(1, "x2")
    if x2 is None:
        raise ReplayImpossible("inputs missing: x2 (argument 1) was not dumped")
    if x1.dtype.kind not in "iu" or x2.dtype.kind not in "iu":
        raise ReplayImpossible(
            f"x1 {x1.dtype} and x2 {x2.dtype}: float8 and float4 inputs are not replayed here"
        )
    if x1.dtype == np.int32 or x2.dtype == np.int32:
        raise ReplayImpossible("int32 x1/x2 pack eight int4 values each: not replayed here")
    if call.raw(-1, "group_sizes") is not None or call.option("group_sizes"):
        raise ReplayImpossible("group_sizes given: group quantisation is not replayed here")
    if x2.ndim != 2:
        if call.sample is not None:
            raise NotSampleable("a batched x2: each row needs its batch's matrix")
        return _batched_quant_matmul(call, x1, x2)
    if x1.shape[-1] != x2.shape[0]:
        raise ReplayImpossible(f"shape mismatch: x1 {list(x1.shape)} @ x2 {list(x2.shape)}")
    n = x2.shape[1]
    rows = x1.reshape(-1, x1.shape[-1]).astype(np.float64)
    columns = linear_columns(n, rows.shape[0], x2.shape[0], call.name, call.focus_column)
    weight = (x2 if columns is None else x2[:, columns]).astype(np.float64)
    # both operands rounded to integers, independently: their relative errors add in quadrature
    noise = math.hypot(rounding_noise(rows), rounding_noise(weight))
    return replace(_dequantised(call, rows @ weight, n, columns), columns=columns, quantisation=noise)


def _batched_quant_matmul(call: Call, x1: np.ndarray, x2: np.ndarray) -> Replayed:
    try:
        product = np.matmul(x1.astype(np.float64), x2.astype(np.float64))
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: x1 {list(x1.shape)} @ x2 {list(x2.shape)}") from exc
    n = product.shape[-1]
    out = _dequantised(call, product.reshape(-1, n), n, None, batched=product.shape)
    unrounded = None if out.unrounded is None else out.unrounded.reshape(product.shape)
    noise = math.hypot(rounding_noise(x1), rounding_noise(x2))
    return replace(
        out, values=out.values.reshape(product.shape), unrounded=unrounded, rows=None, quantisation=noise
    )


def _dequantised(
    call: Call,
    product: np.ndarray,
    n: int,
    columns: np.ndarray | None,
    batched: tuple[int, ...] | None = None,
) -> Replayed:
    """The int32 sums ``product`` ([rows, columns]) through bias, scales and offset, as the doc's
    three formulas (int32 bias before the scale, a float bias after it)."""
    scale, packed_offset = _scale(call, 2, "scale", "scale")
    out_dtype = _output_dtype(call, "int8")
    bias = call.raw(-1, "bias")
    if bias is None:
        bias = call.raw(4, "bias") if 4 in call.positional else None
    integer_bias = bias is not None and bias.dtype.kind in "iu"
    if integer_bias and bias is not None:
        product = product + _bias_rows(bias, n, columns, batched, product.shape[0])
    if out_dtype == "int32":
        return Replayed(product, rows=call.rows)  # the int32 sums themselves (and bias): exact
    out = product * _per_column(scale, n, columns, "scale")
    pertoken = call.raw(-1, "pertoken_scale")
    if pertoken is not None:
        per_row = np.asarray(call.wide(pertoken), dtype=np.float64).reshape(-1)
        if call.rows is not None and per_row.size > 1:
            per_row = per_row[call.rows]
        if per_row.size not in (1, out.shape[0]):
            raise ReplayImpossible(f"pertoken_scale of {per_row.size} values for {out.shape[0]} rows")
        out = out * per_row[:, None]
    if bias is not None and not integer_bias:
        out = out + _bias_rows(bias, n, columns, batched, out.shape[0])
    offset = call.raw(-1, "offset")
    if offset is not None:
        out = out + _per_column(call.wide(offset), n, columns, "offset")
    elif packed_offset is not None and out_dtype in RANGES:
        out = out + _per_column(packed_offset, n, columns, "the offset packed in scale")
    if out_dtype in RANGES:
        return _integer_output(call, out, out_dtype)
    # the integer sum is exact; the dequantisation multiplies in float32, then one rounding out
    return Replayed(out, rows=call.rows, roundings=2)


def _bias_rows(
    bias: np.ndarray, n: int, columns: np.ndarray | None, batched: tuple[int, ...] | None, rows: int
) -> np.ndarray:
    """A bias of ``(n,)``, or ``(batch, 1, n)`` beside a batched x2, as rows to add."""
    values = np.asarray(bias, dtype=np.float64)
    if values.size == n or values.ndim <= 1:
        return _per_column(values, n, columns, "bias")
    if batched is not None and values.ndim == 3:
        per_batch = np.broadcast_to(values, (*batched[:-2], 1, n))
        return np.broadcast_to(per_batch, batched).reshape(rows, n)
    raise ReplayImpossible(f"bias {list(values.shape)} for {n} output channels")


def npu_weight_quant_batchmatmul(call: Call) -> Replayed:
    """``torch_npu.npu_weight_quant_batchmatmul``'s output (W8A16): the weight dequantised per tensor,
    channel or group, then ``x @ weight + bias`` (op-plugin
    ``docs/context/torch_npu-npu_weight_quant_batchmatmul.md``)."""
    x = call.data(0, "x", "x")
    weight = call.raw(1, "weight")
    if weight is None:
        raise ReplayImpossible("inputs missing: weight (argument 1) was not dumped")
    if weight.dtype == np.int32:
        raise ReplayImpossible("an int32 weight packs eight int4 values: not replayed here")
    if (
        call.raw(4, "quant_scale") is not None
    ):  # (x, weight, antiquant_scale, antiquant_offset, quant_scale, ...)
        raise ReplayImpossible("quant_scale given: the output's requantisation is not replayed here")
    if weight.ndim != 2 or x.shape[-1] != weight.shape[0]:
        raise ReplayImpossible(f"shape mismatch: x {list(x.shape)} @ weight {list(weight.shape)} (k, n)")
    k, n = weight.shape
    scale, _offset = _scale(call, 2, "antiquant_scale", "antiquant_scale")
    offset = call.raw(3, "antiquant_offset")
    group = int(call.option("antiquant_group_size", 7, 0) or 0)
    dequantised = weight.astype(np.float64)
    if offset is not None:
        dequantised = dequantised + _antiquant(
            np.asarray(call.wide(offset), np.float64), k, n, group, "antiquant_offset"
        )
    dequantised = dequantised * _antiquant(scale, k, n, group, "antiquant_scale")
    rows = x.reshape(-1, k)
    columns = linear_columns(n, rows.shape[0], k, call.name, call.focus_column)
    used = dequantised if columns is None else dequantised[:, columns]
    out = rows @ used.astype(call.precision)
    bias = call.raw(6, "bias")
    if bias is not None:
        out = out + _per_column(call.wide(bias), n, columns, "bias")
    return Replayed(out, reduction=k, rows=call.rows, columns=columns, roundings=2)


def _antiquant(values: np.ndarray, k: int, n: int, group: int, what: str) -> np.ndarray:
    """A per-tensor, per-channel ((n,), (1, n)) or per-group ((ceil(k / group), n)) parameter as a
    ``[k or 1, n or 1]`` array that broadcasts over the weight."""
    if values.size == 1:
        return values.reshape(1, 1)
    if values.size == n:
        return values.reshape(1, n)
    if group > 0 and values.ndim == 2 and values.shape == (-(-k // group), n):
        return np.repeat(values, group, axis=0)[:k]
    raise ReplayImpossible(
        f"{what} {list(values.shape)} for a weight of ({k}, {n})"
        + ("" if group else " (no antiquant_group_size recorded)")
    )


def npu_dynamic_quant(call: Call) -> Replayed:
    """``torch_npu.npu_dynamic_quant``'s first output: each row scaled to 127 at its largest
    magnitude (after ``smooth_scales``; per group of rows with ``group_index``), rounded (op-plugin
    ``docs/context/torch_npu-npu_dynamic_quant.md``)."""
    x = call.tensor(0, "x", "x")
    if call.output_dtype not in ("int8", ""):
        raise ReplayImpossible(f"a {call.output_dtype} output (quint4x2 packs int4): not replayed here")
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    smooth = call.raw(-1, "smooth_scales")
    if smooth is not None:
        rows = rows * _smoothing(np.asarray(call.wide(smooth), np.float64), call.raw(-1, "group_index"), rows)
    largest = np.max(np.abs(rows), axis=1, keepdims=True)
    scale = largest / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        unrounded = np.where(scale > 0, rows / scale, 0.0)
    if call.rows is not None:
        unrounded = unrounded[call.rows]
    return _integer_output(call, unrounded, "int8")


def _smoothing(smooth: np.ndarray, group_index: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """The smooth vector of each row: one for every row, or ``smooth[g]`` for rows
    ``group_index[g-1]:group_index[g]`` (MoE)."""
    width = rows.shape[1]
    if group_index is None:
        if smooth.size != width:
            raise ReplayImpossible(f"smooth_scales of {smooth.size} for rows of {width}")
        return smooth.reshape(1, width)
    ends = np.asarray(group_index).reshape(-1).astype(np.int64)
    table = smooth.reshape(-1, width)
    if table.shape[0] != ends.size or (ends.size and ends[-1] != rows.shape[0]):
        raise ReplayImpossible(f"group_index {ends.tolist()} does not cover {rows.shape[0]} rows")
    return table[np.searchsorted(ends, np.arange(rows.shape[0]), side="right")]


QUANTIZE_DTYPES = {
    "qint8": "int8",
    "int8": "int8",
    "quint8": "uint8",
    "uint8": "uint8",
    "int32": "int32",
    "qint32": "int32",
}


def npu_quantize(call: Call) -> Replayed:
    """``torch_npu.npu_quantize``'s output (op-plugin ``docs/context/torch_npu-npu_quantize.md``)."""
    x = call.tensor(0, "input", "input")
    scales = call.raw(1, "scales")
    if scales is None:
        raise ReplayImpossible("inputs missing: scales (argument 1) was not dumped")
    zero_points = call.raw(2, "zero_points")
    notes: list[str] = []
    div_mode = call.option("div_mode", 5)
    if div_mode is None:
        div_mode, notes = True, ["div_mode not recorded: torch_npu's default True"]
    out_dtype = QUANTIZE_DTYPES.get(
        str(call.option("dtype", 3) or "").removeprefix("torch."), call.output_dtype
    )
    if out_dtype not in RANGES:
        raise ReplayImpossible(
            f"a {call.output_dtype or 'unknown'} output (quint4x2 packs int4): not replayed here"
        )
    axis = call.option("axis", 4)
    if axis is None:
        axis = 1
        notes.append("axis not recorded: torch_npu's default 1")
    along = _along(np.asarray(call.wide(scales), np.float64), x, int(axis), bool(div_mode))
    unrounded = x / along if div_mode else x * along
    if zero_points is not None:
        unrounded = unrounded + _along(
            np.asarray(call.wide(zero_points), np.float64), x, int(axis), bool(div_mode)
        )
    # a 16-bit scale may be applied at its own precision (bf16's roundoff covers float16's)
    slack = FLOAT32_SLACK if scales.dtype.itemsize >= 4 else 2.0**-8
    result = _integer_output(call.whole(), unrounded, out_dtype, slack)
    return Replayed(
        result.values, unrounded=result.unrounded, step_slack=result.step_slack, notes=tuple(notes)
    )


def _along(values: np.ndarray, x: np.ndarray, axis: int, div_mode: bool) -> np.ndarray:
    """A 1-d parameter broadcast along ``axis`` of ``x`` (div_mode False: the last axis unless -2),
    or one of x's rank as it is."""
    if values.ndim == x.ndim or values.size == 1:
        return values
    if not div_mode:
        axis = -2 if axis == -2 else -1
    axis = axis % x.ndim
    if values.size != x.shape[axis]:
        raise ReplayImpossible(f"{values.size} scales along axis {axis} of an input {list(x.shape)}")
    shape = [1] * x.ndim
    shape[axis] = values.size
    return values.reshape(shape)


REFERENCES = {
    "NPU.npu_quant_matmul": npu_quant_matmul,
    "NPU.npu_weight_quant_batchmatmul": npu_weight_quant_batchmatmul,
    "NPU.npu_dynamic_quant": npu_dynamic_quant,
    "NPU.npu_quantize": npu_quantize,
}
