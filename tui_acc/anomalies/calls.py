"""An operator call as the jump rule sees it: what it computes (its name in arithmetic's words) and
the ranges of its numeric arguments, from their rows' max and min and the scalars a dump records;
and what its arithmetic expects of its output (``Expected``, filled in by arithmetic.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# msprobe's API records ("Torch.rsqrt.0.forward", graph mode's "Aten.where.0.forward"): torch
# functions, not modules; the rest (msprobe's Module.*, msit's and SGLang's module names, ATB's
# operations) are modules, whose class names are matched by substring ("LlamaRMSNorm")
_API_PREFIXES = ("Torch.", "Tensor.", "Functional.", "Aten.", "NPU.", "VF.", "Distributed.", "Mint.")
_ALIASES = {
    "itruediv": "truediv",
    "div": "truediv",
    "divide": "truediv",
    "true_divide": "truediv",
    "floor_divide": "truediv",  # |floor(a/b)| <= |a/b| + 1: the same bound, within the factor
    "floordiv": "truediv",
    "imul": "mul",
    "rmul": "mul",
    "multiply": "mul",
    "ipow": "pow",
    "float_power": "pow",
    "new_zeros": "zeros",
    "zeros_like": "zeros",
    "zero": "zeros",  # Tensor.zero_
    "new_ones": "ones",
    "ones_like": "ones",
    "full_like": "full",
    "new_full": "full",
    "fill": "full",  # Tensor.fill_
    "masked_fill": "select",
    "where": "select",
    "index_fill": "select",
    "masked_scatter": "select",
    "linspace": "arange",
    "range": "arange",
    "nansum": "sum",
    "iadd": "add",
    "radd": "add",
    "isub": "sub",
    "subtract": "sub",
}
_POSITIONAL = re.compile(r"^(?:input[._]|intensor|argument )(\d+)$")
_KEYWORD = re.compile(r"^input\.([A-Za-z_]\w*)$")


@dataclass(frozen=True)
class Operand:
    """A number or a tensor's range, as its row (max, min) or a recorded scalar says it."""

    high: float
    low: float
    numel: int | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None  # a tensor's; None for a recorded number

    @property
    def largest(self) -> float:
        """max |x|."""
        return max(abs(self.high), abs(self.low))

    @property
    def smallest(self) -> float:
        """min |x| as far as max and min tell: 0 where they straddle 0."""
        return 0.0 if self.low <= 0.0 <= self.high else min(abs(self.low), abs(self.high))

    @property
    def zero(self) -> bool:
        """Whether every element is 0."""
        return self.high == 0.0 and self.low == 0.0


@dataclass(frozen=True)
class Call:
    """One operator call as the jump rule sees it: what it is and its numeric arguments.

    Attributes:
        op: the operator in arithmetic's words (``operator_name``): ``rsqrt``, ``truediv``, ...
        api: a torch function (msprobe's API records) rather than a module or an ATB operation.
        args: numeric arguments by position: tensors (bool masks left out) and recorded numbers.
        kwargs: numeric arguments by keyword (msprobe's ``input_kwargs``, a norm's eps).
        params: a module's dumped parameters (msprobe L0's ``parameters.weight``, ``.bias``).
        output_shape: the output's shape, where known.
        output_dtype: the output's dtype (a recorded fill value is at the limit of this one).
    """

    op: str
    api: bool
    args: Mapping[int, Operand] = field(default_factory=dict)
    kwargs: Mapping[str, Operand] = field(default_factory=dict)
    params: tuple[Operand, ...] = ()
    output_shape: tuple[int, ...] | None = None
    output_dtype: str | None = None

    def operands(self) -> list[Operand]:
        """Every numeric argument, positional first."""
        return [self.args[i] for i in sorted(self.args)] + list(self.kwargs.values())


@dataclass(frozen=True)
class Expected:
    """What a call's output may be, from its arithmetic.

    Attributes:
        magnitude: the largest |y| its arguments allow (``math.inf``: any), or None where the
            operator is not one of the families above (the rule's default: the largest float input).
        basis: the arithmetic behind ``magnitude`` (``1/sqrt(min x)``), for the docs and tests.
        fills: values it writes by design (a mask's fill: -inf, the dtype's minimum).
        zeros: an all-zero output is what it computes (``zeros``, a fill or a product with 0).
    """

    magnitude: float | None = None
    basis: str = ""
    fills: tuple[float, ...] = ()
    zeros: bool = False


def operator_name(node_type: str) -> str:
    """A node's type in arithmetic's words: lower case, Python's dunder and in-place underscores and
    ATB's ``Operation`` dropped, aliases merged (``__truediv__`` -> ``truediv``, ``_softmax`` ->
    ``softmax``, ``masked_fill_`` -> ``select``, ``RmsNormOperation`` -> ``rmsnorm``)."""
    name = node_type.strip("_").lower().removesuffix("operation")
    return _ALIASES.get(name, name)


def is_api(node: str) -> bool:
    """Whether ``node`` names a torch function call (msprobe's API records), not a module."""
    return node.startswith(_API_PREFIXES)


def parse_shape(text: object) -> tuple[int, ...] | None:
    """``"[1, 8, 64]"`` (a row's shape) as a tuple; None where it is not one."""
    if not isinstance(text, str):
        return None
    inner = text.strip().strip("[]()").strip()
    if not inner:
        return ()
    try:
        return tuple(int(part) for part in inner.split(",") if part.strip())
    except ValueError:
        return None


def place(slot: str) -> int | str | None:
    """An input slot's argument: its position (``input.1``, ``input_1``, ``intensor1``, ``argument 1``),
    its keyword (``input.dim``), or None."""
    if (match := _POSITIONAL.match(slot)) is not None:
        return int(match.group(1))
    if (match := _KEYWORD.match(slot)) is not None:
        return match.group(1)
    return None


def number(value: Any) -> Operand | None:
    """A recorded scalar argument as an Operand (bools, strings, lists and None are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return Operand(float(value), float(value), 1, ())


def argument(call: Call, *places: int | str) -> Operand | None:
    """The first of ``places`` (positions, then keywords) that ``call`` has."""
    for at in places:
        found = call.args.get(at) if isinstance(at, int) else call.kwargs.get(at)
        if found is not None:
            return found
    return None
