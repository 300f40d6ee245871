"""References for ATB operations (msit ATB dumps, msprobe's ATB probe): the intensors are the
operation's inputs, weights included where the graph feeds them as intensors; the parameters are
those of ``op_param.json`` beside ``before/`` (``Probe::SaveParam``), read by ``dumped_call.py``.

Enumerations are ATB's ``include/atb/infer_op_params.h``: ActivationType (0 undefined, 1 relu,
2 gelu, 3 fast gelu, 4 swish, 5 log, 6 swiglu forward, 7 swiglu backward, 8 sigmoid) and
ElewiseType (2 muls, 8 add, 9 mul, 10 realdiv, 15 sub, 17 quant per channel, 19 dynamic quant);
either as the number or as its name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.sampling import linear_columns
from tui_acc.replay.torch_ops import reduce_rows

# ATB's defaults (infer_op_params.h): LinearParam.transposeB = true; NormParam.epsilon = 1e-5
DEFAULT_TRANSPOSE_B = True
DEFAULT_RMS_EPS = 1e-5


def _param(call: Call, *path: str) -> Any:
    value: Any = call.keyword
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def linear(call: Call) -> Replayed:
    """``LinearOperation``: intensor0 x, intensor1 the weight, intensor2 the bias (hasBias)."""
    raw_x = call.raw(0)
    if raw_x is None:
        raise ReplayImpossible("inputs missing: x (argument 0) was not dumped")
    weight = call.raw(1)
    if weight is None:
        raise ReplayImpossible("weights not dumped: LinearOperation has no intensor1 (its weight)")
    weight = _logical_weight(call, raw_x, weight)
    if raw_x.dtype.kind in "iu":
        return _quant_linear(call, raw_x, weight)
    notes: list[str] = []
    transpose_a = bool(_param(call, "transposeA") or False)
    transpose_b = _param(call, "transposeB")
    if transpose_b is None:
        transpose_b = DEFAULT_TRANSPOSE_B
        if weight.ndim == 2 and raw_x.shape[-1] == weight.shape[0] != weight.shape[1]:
            transpose_b = False  # the only reading the shapes allow
        notes.append(f"transposeB not in op_param.json: {str(bool(transpose_b)).lower()} (from the shapes)")
    if transpose_a or weight.ndim != 2:
        if call.sample is not None:
            raise NotSampleable("a transposed input or a batched weight")
        x = call.tensor(0, "x")
        if transpose_a:
            x = np.swapaxes(x, -1, -2)
        w = call.wide(np.swapaxes(weight, -1, -2) if transpose_b else weight)
        if x.shape[-1] != w.shape[-2]:
            raise _mismatch(x, weight, bool(transpose_b))
        out = np.matmul(x, w)
        if _param(call, "hasBias") is not False and 2 in call.positional:
            out = out + call.tensor(2, "bias")
        return Replayed(out, reduction=x.shape[-1], notes=tuple(notes))
    by_row = weight if transpose_b else weight.T  # [out features, in features]
    x = call.data(0, "x")
    if x.shape[-1] != by_row.shape[1]:
        raise _mismatch(x, weight, bool(transpose_b))
    columns = linear_columns(
        by_row.shape[0], int(np.prod(x.shape[:-1])), by_row.shape[1], call.name, call.focus_column
    )
    bias = call.raw(2) if _param(call, "hasBias") is not False else None
    replayed = reduce_rows(call, x, by_row if columns is None else by_row[columns], bias, columns)
    return Replayed(
        replayed.values,
        replayed.reduction,
        tuple(notes),
        replayed.rows,
        replayed.columns,
        replayed.condition,
    )


def _logical_weight(call: Call, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """A FRACTAL_NZ weight as the operation reads it: the reader gives a four-dim NZ weight back as
    ``[1, H', W]`` (dumps/atb/tiled.py), which a linear without a batch views as ``[H', W]``
    (ATB's ``linear_dequant_aclnn_runner.cpp``), its rows padded to 16 and its columns to a tile;
    the zero padding past what x and the output use is cut off. Anything else is left as dumped."""
    if weight.ndim == 3 and weight.shape[0] == 1 and x.ndim >= 2:
        weight = weight[0]
    if weight.ndim != 2 or not call.output_shape:
        return weight
    transpose_b = _param(call, "transposeB") is not False
    k = x.shape[-2] if _param(call, "transposeA") else x.shape[-1]
    n = call.output_shape[-1]
    want = (n, k) if transpose_b else (k, n)
    if weight.shape == want or weight.shape[0] < want[0] or weight.shape[1] < want[1]:
        return weight
    cut = weight[: want[0], : want[1]]
    padding = weight.size - cut.size
    if padding and np.count_nonzero(weight) != np.count_nonzero(cut):
        return weight  # not zero padding: left for the shape check to name
    return cut


def _quant_linear(call: Call, x: np.ndarray, weight: np.ndarray) -> Replayed:
    """A quantised ``LinearOperation`` (int8 x and weight, ``outDataType`` set): intensors x, weight
    (``[n, k]`` with transposeB), an int32 bias where there is one, the dequant scale (int64 or
    float), and with ``quantMode`` PER_TOKEN the per-token scale; the arithmetic of
    ``npu_quant_matmul`` (npu_quant.py). Which intensor is the bias is read from its dtype (int32),
    not from the count: a call without a bias has its scale at index 2."""
    from tui_acc.replay import npu_quant

    if _param(call, "transposeA"):
        raise ReplayImpossible("transposeA with quantised inputs: not replayed here")
    transpose_b = _param(call, "transposeB")
    notes = [] if transpose_b is not None else ["transposeB not in op_param.json: ATB's default true"]
    if weight.ndim != 2:
        raise ReplayImpossible(f"a quantised weight {list(weight.shape)}: only 2-d weights are replayed here")
    at = 2
    bias = call.raw(at)
    if bias is not None and bias.dtype == np.int32:
        at += 1
    else:
        bias = None
    scale = call.raw(at)
    if scale is None:
        raise ReplayImpossible(f"inputs missing: the dequant scale (intensor{at}) was not dumped")
    per_token = _param(call, "quantMode") in (2, "PER_TOKEN")
    pertoken = call.raw(at + 1) if per_token else None
    if per_token and pertoken is None:
        raise ReplayImpossible(f"inputs missing: quantMode PER_TOKEN without its scale (intensor{at + 1})")
    keyword: dict[str, Any] = {"bias": bias, "pertoken_scale": pertoken}
    positional = {0: x, 1: weight.T if transpose_b in (None, True) else weight, 2: scale}
    translated = replace(
        call, positional=positional, keyword={k: v for k, v in keyword.items() if v is not None}
    )
    result = npu_quant.npu_quant_matmul(translated)
    return replace(result, notes=(*result.notes, *notes))


def _mismatch(x: np.ndarray, weight: np.ndarray, transpose_b: bool) -> ReplayImpossible:
    return ReplayImpossible(
        f"shape mismatch: x {list(x.shape)} and weight {list(weight.shape)} "
        f"(transposeB {str(transpose_b).lower()})"
    )


def rms_norm(call: Call) -> Replayed:
    """``RmsNormOperation``: intensor0 x, intensor1 gamma; epsilon from normParam."""
    if 1 not in call.positional:
        raise ReplayImpossible("weights not dumped: RmsNormOperation has no intensor1 (gamma)")
    gamma = call.tensor(1, "gamma")
    raw = call.raw(0)
    if call.sample is not None and raw is not None and int(gamma.size) != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")
    x = call.data(0, "x")
    eps = _param(call, "normParam", "epsilon")
    if eps is None:
        eps = _param(call, "epsilon")
    notes: tuple[str, ...] = ()
    if eps is None:
        eps = DEFAULT_RMS_EPS
        notes = (f"epsilon not in op_param.json: ATB's default {DEFAULT_RMS_EPS:g} assumed",)
    width = int(gamma.size)
    out = maths.rms_norm(x, width, gamma.reshape(-1), float(eps))
    return Replayed(out, reduction=width, notes=notes, rows=call.rows)


_ACTIVATIONS = {
    1: "relu",
    2: "gelu",
    3: "fast_gelu",
    4: "swish",
    6: "swiglu",
    8: "sigmoid",
}


def activation(call: Call) -> Replayed:
    """``ActivationOperation`` by activationType (swish with ``scale``, gelu by ``geluMode``, swiglu)."""
    kind = _param(call, "activationType")
    if kind is None:
        raise ReplayImpossible("type unknown: ActivationOperation without activationType in op_param.json")
    name = _ACTIVATIONS.get(kind) if isinstance(kind, int) else str(kind).lower().removeprefix("activation_")
    dim = int(_param(call, "dim") or -1)
    raw = call.raw(0)
    if call.sample is not None and raw is not None and dim not in (-1, raw.ndim - 1):
        raise NotSampleable(f"an activation along dim {dim}, not the last")
    x = call.data(0, "x")
    if call.sample is not None:
        dim = -1

    def rows(values: np.ndarray) -> Replayed:
        return Replayed(values, rows=call.rows)

    if name == "swish":
        scale = float(_param(call, "scale") or 1.0)
        return rows(x * maths.sigmoid(scale * x))
    if name == "gelu":
        mode = _param(call, "geluMode")
        return rows(maths.gelu(x, tanh=mode in (None, 0, "TANH_MODE")))
    if name == "relu":
        return rows(np.maximum(x, 0.0))
    if name == "sigmoid":
        return rows(maths.sigmoid(x))
    if name in ("swiglu", "swiglu_forward"):
        try:
            return rows(maths.swiglu(x, dim))
        except ValueError as exc:
            raise ReplayImpossible(f"shape mismatch: {exc}") from exc
    raise ReplayImpossible(f"type unknown: activationType {kind} has no reference")


def elewise(call: Call) -> Replayed:
    """``ElewiseOperation``: add, sub, mul, realdiv of two intensors, muls by ``mulsParam.varAttr``."""
    kind = _param(call, "elewiseType")
    if kind is None:
        raise ReplayImpossible("type unknown: ElewiseOperation without elewiseType in op_param.json")
    name = (
        {
            2: "muls",
            8: "add",
            9: "mul",
            10: "realdiv",
            15: "sub",
            17: "quant_per_channel",
            19: "dynamic_quant",
        }.get(kind)
        if isinstance(kind, int)
        else str(kind).lower().removeprefix("elewise_")
    )
    if name in ("dynamic_quant", "quant_per_channel"):
        return _quantise(call, name)
    a = call.operand(0, "x")
    if name == "muls":
        # ATB's default factor is 0, but a dump that left the parameter out says nothing about the
        # factor the kernel used: replaying with 0 would blame a correct operator
        factor = _param(call, "mulsParam", "varAttr")
        if not isinstance(factor, (int, float)):
            raise ReplayImpossible(
                "parameter unknown: ElewiseOperation muls without mulsParam.varAttr in op_param.json"
            )
        return call.elementwise(a * float(factor))
    operations = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "realdiv": np.divide}
    if name not in operations:
        raise ReplayImpossible(f"type unknown: elewiseType {kind} has no reference")
    b = call.operand(1, "y")
    try:
        return call.elementwise(operations[name](a, b))
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: {list(a.shape)} and {list(b.shape)}") from exc


def _quantise(call: Call, name: str) -> Replayed:
    """ElewiseOperation's quantisations, its first outtensor (int8), as torch_npu's equivalents
    compute them (npu_quant.py): ELEWISE_DYNAMIC_QUANT, symmetric, ``round(x * 127 / rowmax|x|)``
    (``npu_dynamic_quant``); ELEWISE_QUANT_PER_CHANNEL, intensors x, scale, offset (may be empty),
    ``round(x / scale) + offset`` along the last axis (``npu_quantize``). Both as msit's opcheck
    goldens (``elewise.py``) compute them; the asymmetric dynamic quantisation is refused (its offset
    is not documented beyond that golden)."""
    from tui_acc.replay import npu_quant

    x = call.raw(0)
    if x is None:
        raise ReplayImpossible("inputs missing: x (intensor0) was not dumped")
    if name == "dynamic_quant":
        if _param(call, "quantParam", "asymmetric"):
            raise ReplayImpossible("ELEWISE_DYNAMIC_QUANT asymmetric: not replayed here")
        return npu_quant.npu_dynamic_quant(replace(call, positional={0: x}, keyword={}))
    scale, offset = call.raw(1), call.raw(2)
    if scale is None:
        raise ReplayImpossible("inputs missing: the scale (intensor1) was not dumped")
    positional: dict[int, Any] = {0: x, 1: scale}
    if offset is not None and offset.size:
        positional[2] = offset
    return npu_quant.npu_quantize(
        replace(call, positional=positional, keyword={"div_mode": True, "axis": -1})
    )


def gather(call: Call) -> Replayed:
    """``GatherOperation`` (an embedding): intensor0 the table, intensor1 the indices, along ``axis``."""
    if 1 not in call.positional:
        raise ReplayImpossible("inputs missing: GatherOperation has no intensor1 (the indices)")
    if call.sample is not None:
        raise NotSampleable("a gather is replayed whole")
    table = call.tensor(0, "table")
    indices = call.positional[1]
    if not isinstance(indices, np.ndarray) or indices.dtype.kind not in "iu":
        raise ReplayImpossible("inputs missing: intensor1 is not an integer tensor of indices")
    axis = int(_param(call, "axis") or 0)
    if indices.size and (indices.min() < 0 or indices.max() >= table.shape[axis]):
        raise ReplayImpossible(f"shape mismatch: indices outside the table's {table.shape[axis]} rows")
    return Replayed(np.take(table, indices, axis=axis))


REFERENCES = {
    "LinearOperation": linear,
    "RmsNormOperation": rms_norm,
    "ActivationOperation": activation,
    "ElewiseOperation": elewise,
    "GatherOperation": gather,
}
