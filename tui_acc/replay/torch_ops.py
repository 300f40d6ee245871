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
from tui_acc.replay.call import Call, Replayed, ReplayImpossible


def _weight(call: Call, index: int) -> np.ndarray:
    """A weight passed as an argument (msprobe API records), else the module's parameter."""
    found = call.optional_tensor(index, "weight")
    return found if found is not None else call.param("weight")


def linear(call: Call) -> Replayed:
    """``F.linear(input, weight, bias=None)``, and an ``nn.Linear`` module: x @ weight.T + bias."""
    x = call.tensor(0, "input", "input")
    weight = _weight(call, 1)
    bias = call.optional_tensor(2, "bias")
    if bias is None and "bias" in call.params:
        bias = call.param("bias")
    if x.shape[-1] != weight.shape[-1]:
        raise ReplayImpossible(
            f"shape mismatch: input {list(x.shape)} and weight {list(weight.shape)} (in_features differ)"
        )
    out = x @ weight.T
    return Replayed(out + bias if bias is not None else out, reduction=weight.shape[-1])


def matmul(call: Call) -> Replayed:
    """``torch.matmul(a, b)`` (and ``bmm``, ``mm``, ``Tensor.__matmul__``)."""
    a, b = call.tensor(0, "input", "input"), call.tensor(1, "other", "other")
    try:
        return Replayed(np.matmul(a, b), reduction=a.shape[-1])
    except ValueError as exc:
        raise ReplayImpossible(f"shape mismatch: {list(a.shape)} @ {list(b.shape)} ({exc})") from exc


def silu(call: Call) -> Replayed:
    return Replayed(maths.silu(call.tensor(0, "input", "input")))


def gelu(call: Call) -> Replayed:
    """``F.gelu(input, approximate='none')``; a module records no ``approximate``: exact, said so."""
    approximate = call.option("approximate", 1)
    notes: tuple[str, ...] = ()
    if approximate is None:
        approximate = "none"
        if not call.name.startswith("Functional."):
            notes = ("approximate not recorded: exact (erf) GELU assumed, torch's default",)
    return Replayed(maths.gelu(call.tensor(0, "input", "input"), tanh=approximate == "tanh"), notes=notes)


def gelu_tanh(call: Call) -> Replayed:
    """Modules that are the tanh approximation by name (``NewGELUActivation``, ``GELUTanh``)."""
    return Replayed(maths.gelu(call.tensor(0, "input", "input"), tanh=True))


def softmax(call: Call) -> Replayed:
    x = call.tensor(0, "input", "input")
    dim = call.option("dim", 1)
    notes: tuple[str, ...] = ()
    if dim is None:
        dim, notes = -1, ("dim not recorded: the last dimension assumed",)
    return Replayed(maths.softmax(x, int(dim)), reduction=x.shape[int(dim)], notes=notes)


def _width(call: Call, x: np.ndarray, index: int) -> int:
    shape = call.option("normalized_shape", index)
    if shape is None:
        return int(x.shape[-1])
    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    return math.prod(int(d) for d in dims)


def rms_norm(call: Call) -> Replayed:
    """``F.rms_norm(input, normalized_shape, weight=None, eps=None)``: eps None is the input dtype's
    machine epsilon (torch's rule)."""
    x = call.tensor(0, "input", "input")
    width = _width(call, x, 1)
    weight = call.optional_tensor(2, "weight")
    eps = call.option("eps", 3)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps = _machine_epsilon(call.positional.get(0))
        notes = (f"eps not given: the input dtype's machine epsilon ({eps:g}), as torch does",)
    return Replayed(maths.rms_norm(x, width, weight, float(eps)), reduction=width, notes=notes)


def npu_rms_norm(call: Call) -> Replayed:
    """``torch_npu.npu_rms_norm(x, gamma, epsilon=1e-6)`` (its first output; the second is rstd)."""
    x = call.tensor(0, "x", "x")
    gamma = call.tensor(1, "gamma", "gamma")
    eps = call.option("epsilon", 2)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps, notes = 1e-6, ("epsilon not recorded: torch_npu's default 1e-6",)
    width = int(gamma.size)
    return Replayed(maths.rms_norm(x, width, gamma.reshape(-1), float(eps)), reduction=width, notes=notes)


# HF's RMSNorm modules hold eps as an attribute no dump records: the value Llama, Qwen2 and
# Mistral configs use (rms_norm_eps), said in the notes
MODULE_RMS_EPS = 1e-6


def rms_norm_module(call: Call) -> Replayed:
    """``LlamaRMSNorm`` and its kin: x / sqrt(mean(x**2) + eps) * weight, needs the weight."""
    x = call.tensor(0, "hidden_states", "hidden_states")
    weight = call.param("weight")
    note = (
        f"eps is a module attribute no dump records: {MODULE_RMS_EPS:g} assumed (rms_norm_eps of Llama/Qwen2)"
    )
    width = int(weight.size)
    return Replayed(maths.rms_norm(x, width, weight, MODULE_RMS_EPS), reduction=width, notes=(note,))


def layer_norm(call: Call) -> Replayed:
    """``F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)``; a ``LayerNorm``
    module's weight and bias are its parameters."""
    x = call.tensor(0, "input", "input")
    is_module = not call.name.startswith("Functional.")
    weight = call.optional_tensor(2, "weight")
    bias = call.optional_tensor(3, "bias")
    if is_module:
        weight = call.param("weight")
        bias = call.param("bias") if "bias" in call.params else None
        width = int(weight.size)
    else:
        width = _width(call, x, 1)
    eps = call.option("eps", 4)
    notes: tuple[str, ...] = ()
    if eps is None:
        eps, notes = 1e-5, ("eps not recorded: torch's default 1e-5",)
    return Replayed(maths.layer_norm(x, width, weight, bias, float(eps)), reduction=width, notes=notes)


def _operand(call: Call, index: int, keyword: str) -> np.ndarray | float:
    tensor = call.optional_tensor(index, keyword)
    if tensor is not None:
        return tensor
    scalar = call.option(keyword, index)
    if isinstance(scalar, (int, float)) and not isinstance(scalar, bool):
        return float(scalar)
    raise ReplayImpossible(f"inputs missing: operand {index} was neither dumped nor recorded as a number")


def add(call: Call) -> Replayed:
    """``a + alpha * b`` (``Tensor.__add__``, ``torch.add``); b a tensor or a number."""
    alpha = call.option("alpha", None, 1)
    return Replayed(np.add(_operand(call, 0, "input"), float(alpha) * np.asarray(_operand(call, 1, "other"))))


def sub(call: Call) -> Replayed:
    alpha = call.option("alpha", None, 1)
    return Replayed(
        np.subtract(_operand(call, 0, "input"), float(alpha) * np.asarray(_operand(call, 1, "other")))
    )


def mul(call: Call) -> Replayed:
    return Replayed(np.multiply(_operand(call, 0, "input"), _operand(call, 1, "other")))


def rsqrt(call: Call) -> Replayed:
    return Replayed(1.0 / np.sqrt(call.tensor(0, "input", "input")))


def power(call: Call) -> Replayed:
    return Replayed(np.power(_operand(call, 0, "input"), _operand(call, 1, "exponent")))


def mean(call: Call) -> Replayed:
    """``Tensor.mean(dim=None, keepdim=False)``."""
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
    return Replayed(call.tensor(0, "input", "input"))


def cos(call: Call) -> Replayed:
    return Replayed(np.cos(call.tensor(0, "input", "input")))


def sin(call: Call) -> Replayed:
    return Replayed(np.sin(call.tensor(0, "input", "input")))


def embedding(call: Call) -> Replayed:
    """``F.embedding(input, weight, ...)`` and an ``nn.Embedding`` module: rows of the table."""
    ids = call.positional.get(0)
    if not isinstance(ids, np.ndarray):
        raise ReplayImpossible("inputs missing: the token ids were not dumped")
    table = _weight(call, 1)
    if ids.dtype.kind not in "iu":
        raise ReplayImpossible(f"shape mismatch: the ids are {ids.dtype}, not integers")
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ReplayImpossible(f"shape mismatch: ids outside the table's {table.shape[0]} rows")
    return Replayed(table[ids])


def npu_swiglu(call: Call) -> Replayed:
    """``torch_npu.npu_swiglu(x, dim=-1)``: silu(first half) * second half."""
    x = call.tensor(0, "input", "input")
    dim = int(call.option("dim", 1, -1))
    try:
        return Replayed(maths.swiglu(x, dim))
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
    "NPU.npu_rms_norm": npu_rms_norm,
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
    "*RMSNorm": rms_norm_module,
    "*RmsNorm": rms_norm_module,
    "LayerNorm": layer_norm,
    "SiLU": silu,
    "GELU": gelu,
    "NewGELUActivation": gelu_tanh,
    "GELUTanh": gelu_tanh,
    "PytorchGELUTanh": gelu_tanh,
    "Embedding": embedding,
}
