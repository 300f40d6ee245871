"""References for GE's operators, a TorchAir GE dump's ops (docs/formats.md §7.5).

A GE op's inputs are dumped in the order its IR declares them (``REG_OP``: MatMulV2's ``x1, x2,
bias``; an absent optional input is not dumped), a Const input (a reduction's axes, an exponent)
included; its attributes (``transpose_x2``, ``axes``, ``epsilon``) come from the graph text
(``Call.keyword``), and an attribute the text does not give takes the IR's default, said in a note.
Keyed ``GE.{type}`` (``registry.py``): GE's ``Add`` is not a torch module of that name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import numpy_dtype
from tui_acc.replay import maths
from tui_acc.replay.call import CONSTITUENTS, Call, NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.names import FUSED
from tui_acc.replay.sampling import linear_columns
from tui_acc.replay.torch_ops import add, matmul, mul, power, reduce_rows, rsqrt, sub


def _flag(call: Call, name: str, notes: list[str], default: Any = False) -> Any:
    """Attribute ``name``; the IR's default where the graph text gives none, said in ``notes``."""
    value = call.keyword.get(name)
    if value is None or isinstance(value, np.ndarray):
        notes.append(f"{name} not in the graph text: {default!r} assumed (the IR's default)")
        return default
    return value


def _number(call: Call, name: str, notes: list[str], default: float) -> float:
    """A numeric attribute (``epsilon``, ``scale``); ReplayImpossible naming it where the graph text
    gives something else."""
    value = _flag(call, name, notes, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReplayImpossible(f"attribute {name} = {str(value)[:40]!r} in the graph text is not a number")
    return float(value)


def _float_output(call: Call, op: str) -> None:
    """Integer and bool outputs round their own way (a Cast truncates or rounds by its mode): not
    replayed rather than judged by a float formula."""
    dtype = numpy_dtype(call.output_dtype) if call.output_dtype else None
    if dtype is not None and dtype.kind in "iub":
        raise ReplayImpossible(
            f"a {op} with a {call.output_dtype} output: its rounding to integers is not replayed"
        )


def _float_operands(call: Call, op: str) -> None:
    for index in (0, 1):
        value = call.raw(index)
        if value is not None and value.dtype.kind in "iub":
            raise ReplayImpossible(
                f"a quantised {op} ({value.dtype} input {index}): its scales are not among its inputs"
            )


def mat_mul(call: Call) -> Replayed:
    """``MatMul`` / ``MatMulV2(x1, x2, bias)``: ``op(x1) @ op(x2) + bias``, ``op`` the transpose where
    ``transpose_x1`` / ``transpose_x2`` say. The sampled rows and, for a large ``x2``, a sample of its
    columns, as a linear's."""
    notes: list[str] = []
    _float_operands(call, "MatMul")
    left, right = _flag(call, "transpose_x1", notes), _flag(call, "transpose_x2", notes)
    raw = call.raw(0)
    weight = call.raw(1)
    if raw is None or weight is None:
        raise ReplayImpossible("inputs missing: x1 and x2 (inputs 0 and 1) were not both dumped")
    if raw.ndim != 2 or weight.ndim != 2:
        raise ReplayImpossible(f"MatMul of 2-d matrices; x1 {list(raw.shape)}, x2 {list(weight.shape)}")
    if left:
        if call.sample is not None:
            raise NotSampleable("x1 transposed: its rows are not the output's")
        x = call.wide(raw.T)
    else:
        x = call.data(0, "x1")
    weight_rows = weight if right else weight.T  # (N, K): one row per output column
    if x.shape[-1] != weight_rows.shape[-1]:
        raise ReplayImpossible(f"shape mismatch: x1 {list(raw.shape)} and x2 {list(weight.shape)}")
    bias = call.raw(2)
    if bias is not None and bias.size != weight_rows.shape[0]:
        raise ReplayImpossible(
            f"bias {list(bias.shape)} is not one value per output column ({weight_rows.shape[0]})"
        )
    rows = int(np.prod(x.shape[:-1]))
    columns = linear_columns(weight_rows.shape[0], rows, weight_rows.shape[1], call.name, call.focus_column)
    chosen = weight_rows if columns is None else weight_rows[columns]
    return replace(reduce_rows(call, x, chosen, bias, columns), notes=tuple(notes))


def batch_mat_mul(call: Call) -> Replayed:
    """``BatchMatMul`` / ``BatchMatMulV2(x1, x2, bias)``: batched ``op(x1) @ op(x2) + bias``, ``op`` the
    transpose of the last two dimensions where ``adj_x1`` / ``adj_x2`` say. Computed whole."""
    notes: list[str] = []
    _float_operands(call, "BatchMatMul")
    a, b = call.tensor(0, "x1"), call.tensor(1, "x2")
    if a.ndim < 2 or b.ndim < 2:
        raise ReplayImpossible(f"BatchMatMul of matrices; x1 {list(a.shape)}, x2 {list(b.shape)}")
    if _flag(call, "adj_x1", notes):
        a = np.swapaxes(a, -1, -2)
    if _flag(call, "adj_x2", notes):
        b = np.swapaxes(b, -1, -2)
    product = matmul(replace(call, positional={0: a, 1: b}, keyword={}))
    bias = call.optional_tensor(2)
    if bias is not None:
        product = replace(product, values=product.values + bias)
    return replace(product, notes=tuple(notes))


def real_div(call: Call) -> Replayed:
    """``RealDiv`` / ``Div(x1, x2)``: ``x1 / x2``, element by element (broadcast)."""
    _float_output(call, "RealDiv")
    return call.elementwise(np.divide(call.operand(0, "x1"), call.operand(1, "x2")))


def _unary(function: Callable[[np.ndarray], np.ndarray], name: str) -> Callable[[Call], Replayed]:
    def reference(call: Call) -> Replayed:
        return Replayed(function(call.data(0, "x")), rows=call.rows)

    reference.__doc__ = f"``{name}(x)``, element by element."
    return reference


def swish(call: Call) -> Replayed:
    """``Swish(x; scale=1.0)``: ``x * sigmoid(scale * x)`` (aten's silu converts to it)."""
    notes: list[str] = []
    scale = _number(call, "scale", notes, 1.0)
    x = call.data(0, "x")
    return Replayed(x * maths.sigmoid(scale * x), rows=call.rows, notes=tuple(notes))


def _axes(call: Call, value: Any, ndim: int) -> tuple[int, ...]:
    try:
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
    except (TypeError, ValueError, OverflowError):
        raise ReplayImpossible(f"axes {str(value)[:40]!r} are not integers") from None
    if any(not -ndim <= a < ndim for a in axes):
        raise ReplayImpossible(f"axes {axes} out of range for a {ndim}-d input")
    return tuple(sorted({a % ndim for a in axes}))


def _reduce(how: Callable[..., np.ndarray], name: str, noop_attr: bool) -> Callable[[Call], Replayed]:
    """``ReduceMean`` / ``ReduceSum``: over ``axes`` (input 1, or an ``axes`` attribute where no input
    was dumped). No axes: ReduceMean's ``noop_with_empty_axes`` (default true) makes it the input
    itself; ReduceSum's IR has no such attribute and says nothing of it: refused."""

    def reference(call: Call) -> Replayed:
        if call.sample is not None:
            raise NotSampleable("a reduction's output rows are not its input's")
        notes: list[str] = []
        x = call.tensor(0, "x")
        axes_input = call.raw(1)
        axes = call.keyword.get("axes") if axes_input is None else axes_input
        if axes is None:
            raise ReplayImpossible("inputs missing: axes (input 1) was not dumped")
        dims = _axes(call, axes, x.ndim)
        keep = bool(_flag(call, "keep_dims", notes))
        if not dims:
            if not noop_attr:
                raise ReplayImpossible(f"{name} over no axes: what its IR does then is not documented")
            if _flag(call, "noop_with_empty_axes", notes, True):
                return Replayed(x, notes=tuple(notes))
        out = np.asarray(how(x, axis=dims or None, keepdims=keep))
        return Replayed(out, reduction=max(1, x.size // max(1, out.size)), notes=tuple(notes))

    reference.__doc__ = f"``{name}(x, axes; keep_dims=False)``: computed whole."
    return reference


def softmax_v2(call: Call) -> Replayed:
    """``SoftmaxV2(x; axes=[-1])``: over one axis; sampled rows where it is the last."""
    notes: list[str] = []
    raw = call.raw(0)
    if raw is None:
        raise ReplayImpossible("inputs missing: x (input 0) was not dumped")
    axes = _axes(call, _flag(call, "axes", notes, [-1]), raw.ndim)
    if len(axes) != 1:
        raise ReplayImpossible(f"a softmax over several axes {list(axes)}")
    last = axes[0] == raw.ndim - 1
    if call.sample is not None and not last:
        raise NotSampleable(f"softmax over axis {axes[0]}, not the last")
    x = call.data(0, "x") if last else call.tensor(0, "x")
    out = maths.softmax(x, -1 if last else axes[0])
    return Replayed(out, rows=call.rows if last else None, reduction=raw.shape[axes[0]], notes=tuple(notes))


def rms_norm(call: Call) -> Replayed:
    """``RmsNorm(x, gamma; epsilon=1e-6)`` (outputs y, rstd): ``x / sqrt(mean(x**2) + eps) * gamma``
    over gamma's dimensions, rounded once (the kernel works in float32)."""
    notes: list[str] = []
    gamma = call.tensor(1, "gamma")
    raw = call.raw(0)
    if raw is None:
        raise ReplayImpossible("inputs missing: x (input 0) was not dumped")
    width = int(gamma.size)
    if width == 0 or raw.size % width or raw.shape[raw.ndim - gamma.ndim :] != gamma.shape:
        raise ReplayImpossible(f"gamma {list(gamma.shape)} is not x's last dimensions {list(raw.shape)}")
    if call.sample is not None and width != raw.shape[-1]:
        raise NotSampleable("normalised over more than the last dimension")
    eps = _number(call, "epsilon", notes, 1e-6)
    x = call.data(0, "x")
    out = maths.rms_norm(x, width, gamma, eps)  # gamma broadcast over x's last dimensions
    return Replayed(out, rows=call.rows, reduction=width, notes=tuple(notes))


def cast(call: Call) -> Replayed:
    """``Cast(x; dst_type)`` to a float type: the values themselves, rounded once to the output's dtype
    (to an integer or bool type: not replayed, ``_float_output``)."""
    _float_output(call, "Cast")
    return Replayed(call.data(0, "x"), rows=call.rows)


def fused(call: Call) -> Replayed:
    """A fused GE op (``AutomaticBufferFusionOp.{a}{b}``, its constituents' names run together) as its
    constituents one after another (``Call.keyword[CONSTITUENTS]``, graph_texts.Fused): each fed,
    input by input, what an earlier constituent made or the fused op's dumped input for that outside
    edge (its inputs are those edges, each once, in order); the last one's first output. Refused
    where the counts disagree, or where an earlier constituent also feeds an op outside it (its
    output 0 may then be that one's). The intermediates stay at the call's precision (a fused kernel
    keeps them on chip); each constituent may round once."""
    parts = call.keyword.get(CONSTITUENTS)
    if parts is None:
        raise ReplayImpossible("a fused op whose constituents no graph text names")
    if parts.several_outputs:
        raise ReplayImpossible(
            "a fused op whose inner results also leave it: which output is which is not known"
        )
    dumped = sorted(i for i, value in call.positional.items() if isinstance(value, np.ndarray))
    if len(dumped) != len(parts.inputs):
        raise ReplayImpossible(
            f"{len(dumped)} inputs dumped, its constituents take {len(parts.inputs)} from outside it"
        )
    made: dict[str, np.ndarray] = {
        edge: call.positional[slot] for edge, slot in zip(parts.inputs, dumped, strict=True)
    }
    reduction, notes = 1, []
    for op in parts.ops:
        reference = REFERENCES.get(f"GE.{op.type}")
        if reference is None:
            raise ReplayImpossible(f"type unknown: its constituent {op.name} is a {op.type or '?'}")
        missing = [edge for edge in op.inputs if edge not in made]
        if missing:
            raise ReplayImpossible(f"{op.name} takes {missing[0]}, which no constituent before it made")
        step = replace(
            call,
            name=op.name,
            type=op.type,
            positional=dict(enumerate(made[edge] for edge in op.inputs)),
            keyword=dict(op.attrs),
            sample=None,
        )
        result = reference(step)
        made[f"{op.name}:0"] = np.asarray(result.values)
        reduction = max(reduction, result.reduction)
        notes += [f"{op.name}: {note}" for note in result.notes]
    last = made[f"{parts.ops[-1].name}:0"]
    return Replayed(last, reduction=reduction, roundings=len(parts.ops), notes=tuple(notes))


REFERENCES = {
    "GE.MatMul": mat_mul,
    "GE.MatMulV2": mat_mul,
    "GE.BatchMatMul": batch_mat_mul,
    "GE.BatchMatMulV2": batch_mat_mul,
    "GE.Add": add,
    "GE.AddV2": add,
    "GE.Sub": sub,
    "GE.Mul": mul,
    "GE.RealDiv": real_div,
    "GE.Div": real_div,
    "GE.Pow": power,
    "GE.Neg": _unary(np.negative, "Neg"),
    "GE.Rsqrt": rsqrt,
    "GE.Sqrt": _unary(np.sqrt, "Sqrt"),
    "GE.Exp": _unary(np.exp, "Exp"),
    "GE.Cos": _unary(np.cos, "Cos"),
    "GE.Sin": _unary(np.sin, "Sin"),
    "GE.Sigmoid": _unary(maths.sigmoid, "Sigmoid"),
    "GE.Swish": swish,
    "GE.ReduceMean": _reduce(np.mean, "ReduceMean", noop_attr=True),
    "GE.ReduceSum": _reduce(np.sum, "ReduceSum", noop_attr=False),
    "GE.SoftmaxV2": softmax_v2,
    "GE.RmsNorm": rms_norm,
    "GE.Cast": cast,
}
# a fused op: its constituents' references in turn (after REFERENCES: it runs them)
REFERENCES[FUSED] = fused
