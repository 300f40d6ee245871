"""The float64 formulas the references share (numpy only; erf element by element, numpy has none)."""

from __future__ import annotations

import math

import numpy as np

_ERF = np.frompyfunc(math.erf, 1, 1)


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``, element by element in ``x``'s dtype (float64 in the references)."""
    # x * sigmoid(x), sigmoid written with tanh: no overflow for large |x|
    return x * sigmoid(x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))``, written with tanh so that a large ``|x|`` does not overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def gelu(x: np.ndarray, tanh: bool = False) -> np.ndarray:
    """torch's gelu: exact (erf) by default, the tanh approximation with ``approximate='tanh'``."""
    if tanh:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + np.asarray(_ERF(x / math.sqrt(2.0)), dtype=np.float64))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``exp(x - max) / sum`` along ``axis``; the shift keeps exp from overflowing."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def swiglu(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """torch_npu.npu_swiglu / ATB ACTIVATION_SWIGLU_FORWARD: silu(first half) * second half."""
    if x.shape[axis] % 2:
        raise ValueError(f"swiglu needs an even size along dim {axis}, got shape {list(x.shape)}")
    a, b = np.split(x, 2, axis=axis)
    return silu(a) * b


def rms_norm(x: np.ndarray, width: int, weight: np.ndarray | None, eps: float) -> np.ndarray:
    """x / sqrt(mean(x**2) + eps) over the last ``width`` elements, times ``weight``."""
    shape = x.shape
    rows = x.reshape(-1, width)
    normed = rows / np.sqrt(np.mean(rows * rows, axis=1, keepdims=True) + eps)
    out = normed.reshape(shape)
    return out * weight if weight is not None else out


def layer_norm(
    x: np.ndarray, width: int, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` over the last ``width`` elements, times ``weight`` plus ``bias``
    where given."""
    shape = x.shape
    rows = x.reshape(-1, width)
    centred = rows - np.mean(rows, axis=1, keepdims=True)
    normed = centred / np.sqrt(np.mean(centred * centred, axis=1, keepdims=True) + eps)
    out = normed.reshape(shape)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out
