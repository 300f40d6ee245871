"""References for torch's operators: msprobe's API records (``Functional.linear.3.forward``: the call's
arguments, weights included) and torch modules (msit's torch hook, msprobe's ``Module.*`` records:
positional inputs, with parameters where the dump holds them).

Each takes a ``Call`` and returns a ``Replayed`` in float64; the defaults they assume where an argument
was not recorded are torch's own, and each is said in the result's notes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.sampling import linear_columns


def _raw_weight(call: Call, index: int, name: str = "weight") -> np.ndarray:
    """A weight as dumped: passed as an argument (msprobe API records), else the module's parameter."""
    found = call.raw(index, name)
    return found if found is not None else call.raw_param(name)


def _weight(call: Call, index: int) -> np.ndarray:
    return call.wide(_raw_weight(call, index))


def linear(call: Call) -> Replayed:
    """``F.linear(input, weight, bias=None)``, and an ``nn.Linear`` module: x @ weight.T + bias.

    Computes the sampled rows, and of a large weight a sample of its output columns (its rows)."""
    x = call.data(0, "input", "input")
    weight = _raw_weight(call, 1)
    if weight.dtype.kind in "iu":  # a quantised module (W8A8): its scales and kernel are elsewhere
        raise ReplayImpossible(
            f"a quantised weight ({weight.dtype}): the operators inside it (its quantised matmul) are "
            "replayed, not the float formula"
        )
    if weight.ndim != 2 or x.shape[-1] != weight.shape[-1]:
        raise ReplayImpossible(
            f"shape mismatch: input {list(x.shape)} and weight {list(weight.shape)} (in_features differ)"
        )
    bias = call.raw(2, "bias")
    if bias is None and "bias" in call.params:
        bias = call.raw_param("bias")
    rows = int(np.prod(x.shape[:-1]))
    columns = linear_columns(weight.shape[0], rows, weight.shape[1], call.name, call.focus_column)
    return reduce_rows(call, x, weight if columns is None else weight[columns], bias, columns)


def reduce_rows(
    call: Call, x: np.ndarray, weight_rows: np.ndarray, bias: np.ndarray | None, columns: np.ndarray | None
) -> Replayed:
    """``x @ weight_rows.T (+ bias)`` with how much the sums cancel (``Replayed.condition``)."""
    w = call.wide(weight_rows)
    out = x @ w.T
    b = call.wide(bias if columns is None else bias.reshape(-1)[columns]) if bias is not None else None
    if b is not None:
        out = out + b
    condition = 1.0
    if call.precision is np.float64:  # a float32 output: its accumulation's rounding matters, and grows
        magnitude = np.abs(x) @ np.abs(w).T + (np.abs(b) if b is not None else 0.0)
        condition = _condition(magnitude, out)  # with the sum's cancellation (bf16's rounding hides it)
    return Replayed(out, reduction=int(w.shape[-1]), rows=call.rows, columns=columns, condition=condition)


def _condition(magnitude: np.ndarray, out: np.ndarray) -> float:
    size = float(np.linalg.norm(out))
    return float(np.linalg.norm(magnitude)) / size if size > 0 else 1.0


def matmul(call: Call) -> Replayed:
    """``torch.matmul(a, b)`` (and ``bmm``, ``mm``, ``Tensor.__matmul__``): computed whole (each
    output row needs all of ``b``)."""
    a, b = call.tensor(0, "input", "input"), call.tensor(1, "other", "other")
    try:
        out = np.matmul(a, b)
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: {list(a.shape)} @ {list(b.shape)} ({exc})") from exc
    condition = 1.0
    if call.precision is np.float64:  # as reduce_rows: only a float32 output's accumulation shows
        condition = _condition(np.matmul(np.abs(a), np.abs(b)), out)
    return Replayed(out, reduction=a.shape[-1], condition=condition)


def _rowwise(call: Call, values: np.ndarray, **extra: Any) -> Replayed:
    """A result computed from ``call.data`` rows: the sampled rows, when there is a sample."""
    return Replayed(values, rows=call.rows, **extra)


def silu(call: Call) -> Replayed:
    """``F.silu`` / ``nn.SiLU``: ``x * sigmoid(x)``, row by row (sampled rows where there is a sample)."""
    return _rowwise(call, maths.silu(call.data(0, "input", "input")))


def gelu(call: Call) -> Replayed:
    """``F.gelu(input, approximate='none')``; a module records no ``approximate``: exact, said so."""
    approximate = call.option("approximate", 1)
    notes: tuple[str, ...] = ()
    if approximate is None:
        approximate = "none"
        if not call.name.startswith("Functional."):
            notes = ("approximate not recorded: exact (erf) GELU assumed, torch's default",)
    x = call.data(0, "input", "input")
    return _rowwise(call, maths.gelu(x, tanh=approximate == "tanh"), notes=notes)


def gelu_tanh(call: Call) -> Replayed:
    """Modules that are the tanh approximation by name (``NewGELUActivation``, ``GELUTanh``)."""
    return _rowwise(call, maths.gelu(call.data(0, "input", "input"), tanh=True))


def softmax(call: Call) -> Replayed:
    """``F.softmax(input, dim)``; an unrecorded ``dim`` is the last, said in a note. Sampled only over the
    last dimension: NotSampleable otherwise."""
    raw = call.raw(0, "input")
    dim = call.option("dim", 1)
    notes: tuple[str, ...] = ()
    if dim is None:
        dim, notes = -1, ("dim not recorded: the last dimension assumed",)
    last = raw is not None and int(dim) in (-1, raw.ndim - 1)
    if call.sample is not None and not last:
        raise NotSampleable(f"softmax over dim {dim}, not the last")
    x = call.data(0, "input", "input")
    return _rowwise(call, maths.softmax(x, int(dim) if not last else -1), reduction=x.shape[-1], notes=notes)


def _width(call: Call, x: np.ndarray, index: int) -> int:
    shape = call.option("normalized_shape", index)
    if shape is None:
        return int(x.shape[-1])
    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    return math.prod(int(d) for d in dims)


def rms_norm(call: Call) -> Replayed:
    """``F.rms_norm(input, normalized_shape, weight=None, eps=None)``: eps None is the input dtype's
    machine epsilon (torch's rule)."""
    x = _normalised_rows(call, 1)
    width = _width(call, x, 1)
    weight = call.optional_tensor(2, "weight")
    eps = call.option("eps", 3)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps = _machine_epsilon(call.positional.get(0))
        notes = (f"eps not given: the input dtype's machine epsilon ({eps:g}), as torch does",)
    return _rowwise(call, maths.rms_norm(x, width, weight, float(eps)), reduction=width, notes=notes)


def _normalised_rows(call: Call, shape_index: int | None, keyword: str = "input") -> np.ndarray:
    """The input of a normalisation, its sampled rows where it normalises the last dimension only."""
    raw = call.raw(0, keyword)
    if raw is None:
        raise ReplayImpossible(f"inputs missing: {keyword} (argument 0) was not dumped")
    if (
        call.sample is not None
        and shape_index is not None
        and _width(call, raw, shape_index) != raw.shape[-1]
    ):
        raise NotSampleable("normalised over more than the last dimension")
    return call.data(0, keyword, keyword)


# HF's RMSNorm modules hold eps as an attribute no dump records: the value Llama, Qwen2 and
# Mistral configs use (rms_norm_eps), said in the notes
MODULE_RMS_EPS = 1e-6


def rms_norm_module(call: Call) -> Replayed:
    """``LlamaRMSNorm`` and its kin: x / sqrt(mean(x**2) + eps) * weight, needs the weight."""
    weight = call.param("weight")
    raw = call.raw(0, "hidden_states")
    if call.sample is not None and raw is not None and int(weight.size) != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")
    x = call.data(0, "hidden_states", "hidden_states")
    note = (
        f"eps is a module attribute no dump records: {MODULE_RMS_EPS:g} assumed (rms_norm_eps of Llama/Qwen2)"
    )
    width = int(weight.size)
    out = maths.rms_norm(x, width, weight.reshape(-1), MODULE_RMS_EPS)
    # HF rounds the normalised value to the input's dtype, then the product with the weight
    return _rowwise(call, out, reduction=width, notes=(note,), roundings=2)


def gemma_rms_norm_module(call: Call) -> Replayed:
    """Gemma's RMSNorm (``GemmaRMSNorm``, ``Gemma2RMSNorm``, ``Gemma3RMSNorm``): the weight is stored as
    an offset from one, ``x / sqrt(mean(x**2) + eps) * (1 + weight)``, computed in float32 and rounded
    once to the input's dtype (transformers' modeling_gemma*.py)."""
    weight = call.param("weight")
    raw = call.raw(0, "hidden_states")
    if call.sample is not None and raw is not None and int(weight.size) != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")
    x = call.data(0, "hidden_states", "hidden_states")
    note = f"eps is a module attribute no dump records: {MODULE_RMS_EPS:g} assumed (rms_norm_eps of Gemma)"
    width = int(weight.size)
    out = maths.rms_norm(x, width, 1.0 + weight.reshape(-1), MODULE_RMS_EPS)
    return _rowwise(call, out, reduction=width, notes=(note,))


def layer_norm(call: Call) -> Replayed:
    """``F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)``; a ``LayerNorm``
    module's weight and bias are its parameters."""
    is_module = not call.name.startswith("Functional.")
    weight = call.optional_tensor(2, "weight")
    bias = call.optional_tensor(3, "bias")
    raw = call.raw(0, "input")
    if raw is None:
        raise ReplayImpossible("inputs missing: input (argument 0) was not dumped")
    if is_module:
        weight = call.param("weight")
        bias = call.param("bias") if "bias" in call.params else None
        width = int(weight.size)
    else:
        width = _width(call, raw, 1)
    if call.sample is not None and width != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")
    x = call.data(0, "input", "input")
    eps = call.option("eps", 4)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps, notes = 1e-5, ("eps not recorded: torch's default 1e-5",)
    out = maths.layer_norm(x, width, weight, bias, float(eps))
    return _rowwise(call, out, reduction=width, notes=notes)


def _operand(call: Call, index: int, keyword: str) -> np.ndarray | float:
    if call.raw(index, keyword) is not None:
        return call.operand(index, keyword, keyword)
    scalar = call.option(keyword, index)
    if isinstance(scalar, (int, float)) and not isinstance(scalar, bool):
        return float(scalar)
    raise ReplayImpossible(f"inputs missing: operand {index} was neither dumped nor recorded as a number")


def add(call: Call) -> Replayed:
    """``a + alpha * b`` (``Tensor.__add__``, ``torch.add``); b a tensor or a number."""
    alpha = call.option("alpha", None, 1)
    return call.elementwise(
        np.add(_operand(call, 0, "input"), float(alpha) * np.asarray(_operand(call, 1, "other")))
    )


def sub(call: Call) -> Replayed:
    """``a - alpha * b`` (``Tensor.__sub__``, ``torch.sub``); b a tensor or a number."""
    alpha = call.option("alpha", None, 1)
    return call.elementwise(
        np.subtract(_operand(call, 0, "input"), float(alpha) * np.asarray(_operand(call, 1, "other")))
    )


def mul(call: Call) -> Replayed:
    """``a * b`` (``Tensor.__mul__``, ``torch.mul``); b a tensor or a number."""
    return call.elementwise(np.multiply(_operand(call, 0, "input"), _operand(call, 1, "other")))


def rsqrt(call: Call) -> Replayed:
    """``torch.rsqrt``: ``1 / sqrt(x)``, element by element."""
    return _rowwise(call, 1.0 / np.sqrt(call.data(0, "input", "input")))


def power(call: Call) -> Replayed:
    """``torch.pow(input, exponent)``; the exponent a tensor or a number."""
    return call.elementwise(np.power(_operand(call, 0, "input"), _operand(call, 1, "exponent")))


def mean(call: Call) -> Replayed:
    """``Tensor.mean(dim=None, keepdim=False)``: computed whole (its output rows are not its input's)."""
    if call.sample is not None:
        raise NotSampleable("a reduction's output rows are not its input's")
    x = call.tensor(0, "input", "input")
    dim = call.option("dim", 1)
    keep = bool(call.option("keepdim", 2, False))
    axis: Any = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    out = np.mean(x, axis=axis, keepdims=keep)
    return Replayed(np.asarray(out), reduction=max(1, x.size // max(1, np.asarray(out).size)))


def dropout(call: Call) -> Replayed:
    """``F.dropout`` at inference (``training=False`` or ``p=0``): the input itself."""
    p, training = call.option("p", 1, 0.5), call.option("training", 2, True)
    if training and p:
        raise ReplayImpossible(f"dropout in training mode (p={p}) is random: it cannot be replayed")
    return _rowwise(call, call.data(0, "input", "input"))


def cos(call: Call) -> Replayed:
    """``torch.cos``, element by element."""
    return _rowwise(call, np.cos(call.data(0, "input", "input")))


def sin(call: Call) -> Replayed:
    """``torch.sin``, element by element."""
    return _rowwise(call, np.sin(call.data(0, "input", "input")))


def embedding(call: Call) -> Replayed:
    """``F.embedding(input, weight, ...)`` and an ``nn.Embedding`` module: rows of the table."""
    ids = call.positional.get(0)
    if not isinstance(ids, np.ndarray):
        raise ReplayImpossible("inputs missing: the token ids were not dumped")
    table = _raw_weight(call, 1)
    if ids.dtype.kind not in "iu":
        raise ReplayImpossible(f"shape mismatch: the ids are {ids.dtype}, not integers")
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ReplayImpossible(f"shape mismatch: ids outside the table's {table.shape[0]} rows")
    if call.sample is not None:  # one output row per id
        return _rowwise(call, call.wide(table[ids.reshape(-1)[call.sample.rows]]))
    return Replayed(call.wide(table[ids]))


def npu_swiglu(call: Call) -> Replayed:
    """``torch_npu.npu_swiglu(x, dim=-1)``: silu(first half) * second half."""
    dim = int(call.option("dim", 1, -1))
    raw = call.raw(0, "input")
    if call.sample is not None and raw is not None and dim not in (-1, raw.ndim - 1):
        raise NotSampleable(f"swiglu along dim {dim}, not the last")
    x = call.data(0, "input", "input") if call.sample is not None else call.tensor(0, "input", "input")
    try:
        return _rowwise(call, maths.swiglu(x, dim if call.sample is None else -1))
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: {exc}") from exc


def _machine_epsilon(dumped: Any) -> float:
    from tui_acc.dumps.dtypes import dtype_name

    name = dtype_name(dumped) if isinstance(dumped, np.ndarray) else "float32"
    return {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float64": 2.0**-52}.get(name, 2.0**-23)


# msprobe's API records by name (without the call counter), and modules by class name. Globs allowed.
API_REFERENCES = {
    "Functional.linear": linear,
    "Torch.matmul": matmul,
    "Tensor.matmul": matmul,
    "Tensor.__matmul__": matmul,
    "Torch.bmm": matmul,
    "Torch.mm": matmul,
    "Functional.silu": silu,
    "Functional.gelu": gelu,
    "Functional.softmax": softmax,
    "Torch.softmax": softmax,
    "Tensor.softmax": softmax,
    "Functional.rms_norm": rms_norm,
    "Functional.layer_norm": layer_norm,
    "Tensor.__add__": add,
    "Tensor.__radd__": add,
    "Tensor.add": add,
    "Torch.add": add,
    "Tensor.__sub__": sub,
    "Tensor.sub": sub,
    "Torch.sub": sub,
    "Tensor.__mul__": mul,
    "Tensor.__rmul__": mul,
    "Tensor.mul": mul,
    "Torch.mul": mul,
    "Torch.rsqrt": rsqrt,
    "Tensor.rsqrt": rsqrt,
    "Tensor.pow": power,
    "Torch.pow": power,
    "Tensor.mean": mean,
    "Torch.mean": mean,
    "Functional.embedding": embedding,
    "Functional.dropout": dropout,
    "Tensor.cos": cos,
    "Torch.cos": cos,
    "Tensor.sin": sin,
    "Torch.sin": sin,
    "NPU.npu_swiglu": npu_swiglu,
}
MODULE_REFERENCES = {
    "Linear": linear,
    "Gemma*RMSNorm": gemma_rms_norm_module,  # before *RMSNorm: the first match replays
    "*RMSNorm": rms_norm_module,
    "SiLUActivation": silu,
    "*RmsNorm": rms_norm_module,
    "LayerNorm": layer_norm,
    "SiLU": silu,
    "GELU": gelu,
    "NewGELUActivation": gelu_tanh,
    "GELUTanh": gelu_tanh,
    "PytorchGELUTanh": gelu_tanh,
    "Embedding": embedding,
}
