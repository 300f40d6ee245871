"""References for aten operators, a TorchAir FX dump's nodes (``{node}-aten.mm.default``).

TorchAir's FX dumper saves every positional argument of an aten call, numbers and number lists as
``np.array(x)`` (docs/formats.md §7.3): a softmax's ``dim`` is a 0-d array, a mean's ``dim`` a 1-d
one. Where the schema takes a number or a list there, it is given back as one before the torch
reference (``torch_ops.py``) reads it; keyword arguments are not dumped, and torch's defaults hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from tui_acc.replay import ge_ops, torch_ops
from tui_acc.replay.call import Call, Replayed


def _numbers(reference: Callable[[Call], Replayed], *positions: int) -> Callable[[Call], Replayed]:
    """``reference`` with the arguments at ``positions`` as the numbers (or lists) the schema takes."""

    def replayed(call: Call) -> Replayed:
        positional = dict(call.positional)
        for index in positions:
            value = positional.get(index)
            if isinstance(value, np.ndarray) and value.ndim <= 1 and value.dtype.kind in "iufb":
                positional[index] = value.item() if value.ndim == 0 else value.tolist()
        return reference(replace(call, positional=positional))

    replayed.__doc__ = reference.__doc__
    return replayed


def _alpha_assumed(reference: Callable[[Call], Replayed]) -> Callable[[Call], Replayed]:
    """``add.Tensor`` / ``sub.Tensor``: their keyword-only ``alpha`` is not dumped; 1 is assumed, said."""

    def replayed(call: Call) -> Replayed:
        result = reference(call)
        return replace(result, notes=(*result.notes, "alpha not dumped (a keyword argument): 1 assumed"))

    replayed.__doc__ = reference.__doc__
    return replayed


def addmm(call: Call) -> Replayed:
    """``aten.addmm(bias, mat1, mat2)``: ``bias + mat1 @ mat2`` (beta and alpha, keyword arguments no
    FX dump holds, are torch's 1)."""
    operands = {0: call.positional.get(1), 1: call.positional.get(2)}
    product = torch_ops.matmul(replace(call, positional=operands))
    bias = call.tensor(0, "self")
    return replace(product, values=product.values + bias, notes=("beta and alpha not dumped: 1 assumed",))


REFERENCES = {
    "aten.mm.default": torch_ops.matmul,
    "aten.bmm.default": torch_ops.matmul,
    "aten.matmul.default": torch_ops.matmul,
    "aten.addmm.default": addmm,
    "aten.add.Tensor": _alpha_assumed(torch_ops.add),
    "aten.sub.Tensor": _alpha_assumed(torch_ops.sub),
    "aten.mul.Tensor": torch_ops.mul,
    "aten.div.Tensor": ge_ops.real_div,
    "aten.pow.Tensor_Scalar": torch_ops.power,
    "aten.pow.Tensor_Tensor": torch_ops.power,
    "aten.rsqrt.default": torch_ops.rsqrt,
    "aten.neg.default": ge_ops.REFERENCES["GE.Neg"],
    "aten.exp.default": ge_ops.REFERENCES["GE.Exp"],
    "aten.sqrt.default": ge_ops.REFERENCES["GE.Sqrt"],
    "aten.sigmoid.default": ge_ops.REFERENCES["GE.Sigmoid"],
    "aten.cos.default": torch_ops.cos,
    "aten.sin.default": torch_ops.sin,
    "aten.silu.default": torch_ops.silu,
    "aten._softmax.default": _numbers(torch_ops.softmax, 1),
    "aten.softmax.int": _numbers(torch_ops.softmax, 1),
    "aten.mean.dim": _numbers(torch_ops.mean, 1, 2),
    "aten.rms_norm.default": _numbers(torch_ops.rms_norm, 1, 3),
}
