"""References for ATB operations (msit ATB dumps, msprobe's ATB probe): the intensors are the
operation's inputs, weights included where the graph feeds them as intensors; the parameters are
those of ``op_param.json`` beside ``before/`` (``Probe::SaveParam``), read by ``gather.py``.

Enumerations are ATB's ``include/atb/infer_op_params.h``: ActivationType (0 undefined, 1 relu,
2 gelu, 3 fast gelu, 4 swish, 5 log, 6 swiglu forward, 7 swiglu backward, 8 sigmoid) and
ElewiseType (2 muls, 8 add, 9 mul, 10 realdiv, 15 sub); either as the number or as its name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, Replayed, ReplayImpossible

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
    x = call.tensor(0, "x")
    if 1 not in call.positional:
        raise ReplayImpossible("weights not dumped: LinearOperation has no intensor1 (its weight)")
    weight = call.tensor(1, "weight")
    notes: list[str] = []
    transpose_a = bool(_param(call, "transposeA") or False)
    transpose_b = _param(call, "transposeB")
    if transpose_b is None:
        transpose_b = DEFAULT_TRANSPOSE_B
        if weight.ndim == 2 and x.shape[-1] == weight.shape[0] != weight.shape[1]:
            transpose_b = False  # the only reading the shapes allow
        notes.append(f"transposeB not in op_param.json: {str(bool(transpose_b)).lower()} (from the shapes)")
    if transpose_a:
        x = np.swapaxes(x, -1, -2)
    w = np.swapaxes(weight, -1, -2) if transpose_b else weight
    if x.shape[-1] != w.shape[-2]:
        raise ReplayImpossible(
            f"shape mismatch: x {list(x.shape)} and weight {list(weight.shape)} "
            f"(transposeB {str(bool(transpose_b)).lower()})"
        )
    out = np.matmul(x, w)
    has_bias = _param(call, "hasBias")
    if has_bias is not False and 2 in call.positional:
        out = out + call.tensor(2, "bias")
    return Replayed(out, reduction=x.shape[-1], notes=tuple(notes))


def rms_norm(call: Call) -> Replayed:
    """``RmsNormOperation``: intensor0 x, intensor1 gamma; epsilon from normParam."""
    x = call.tensor(0, "x")
    if 1 not in call.positional:
        raise ReplayImpossible("weights not dumped: RmsNormOperation has no intensor1 (gamma)")
    gamma = call.tensor(1, "gamma")
    eps = _param(call, "normParam", "epsilon")
    if eps is None:
        eps = _param(call, "epsilon")
    notes: tuple[str, ...] = ()
    if eps is None:
        eps = DEFAULT_RMS_EPS
        notes = (f"epsilon not in op_param.json: ATB's default {DEFAULT_RMS_EPS:g} assumed",)
    width = int(gamma.size)
    return Replayed(maths.rms_norm(x, width, gamma.reshape(-1), float(eps)), reduction=width, notes=notes)


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
    x = call.tensor(0, "x")
    if name == "swish":
        scale = float(_param(call, "scale") or 1.0)
        return Replayed(x * maths.sigmoid(scale * x))
    if name == "gelu":
        mode = _param(call, "geluMode")
        return Replayed(maths.gelu(x, tanh=mode in (None, 0, "TANH_MODE")))
    if name == "relu":
        return Replayed(np.maximum(x, 0.0))
    if name == "sigmoid":
        return Replayed(maths.sigmoid(x))
    if name in ("swiglu", "swiglu_forward"):
        dim = int(_param(call, "dim") or -1)
        try:
            return Replayed(maths.swiglu(x, dim))
        except ValueError as exc:
            raise ReplayImpossible(f"shape mismatch: {exc}") from exc
    raise ReplayImpossible(f"type unknown: activationType {kind} has no reference")


def elewise(call: Call) -> Replayed:
    """``ElewiseOperation``: add, sub, mul, realdiv of two intensors, muls by ``mulsParam.varAttr``."""
    kind = _param(call, "elewiseType")
    if kind is None:
        raise ReplayImpossible("type unknown: ElewiseOperation without elewiseType in op_param.json")
    name = (
        {2: "muls", 8: "add", 9: "mul", 10: "realdiv", 15: "sub"}.get(kind)
        if isinstance(kind, int)
        else str(kind).lower().removeprefix("elewise_")
    )
    a = call.tensor(0, "x")
    if name == "muls":
        return Replayed(a * float(_param(call, "mulsParam", "varAttr") or 0.0))
    operations = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "realdiv": np.divide}
    if name not in operations:
        raise ReplayImpossible(f"type unknown: elewiseType {kind} has no reference")
    b = call.tensor(1, "y")
    try:
        return Replayed(operations[name](a, b))
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: {list(a.shape)} and {list(b.shape)}") from exc


def gather(call: Call) -> Replayed:
    """``GatherOperation`` (an embedding): intensor0 the table, intensor1 the indices, along ``axis``."""
    if 1 not in call.positional:
        raise ReplayImpossible("inputs missing: GatherOperation has no intensor1 (the indices)")
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
