"""What an operator's output may be, from what it computes and its inputs' statistics.

The jump rule (rules.py) asks whether an output is far larger than its inputs allow. For most
operators (a linear, an add, an activation, an attention) "allow" is their largest float input:
they mix, scale by O(1) weights or select, and 1000 times the largest input is a scale error. A
family of operators makes large values out of small ones *by design*; for them the bound is
predicted from the arithmetic, so a clean model's rsqrt passes and a real jump there still shows:

- **reciprocals** (``rsqrt``, ``reciprocal``, the divisions ``div``/``__truediv__``/``__rtruediv__``):
  |1/sqrt(x)| <= 1/sqrt(min x) for x > 0 (a norm's variance of 1e-6 gives 1000), |1/x| <=
  1/min|x|, |a/b| <= max|a| / min|b|; a divisor whose statistics span 0 bounds nothing (1/x is
  any size near 0: the Inf and NaN rules judge what it gives there);
- **powers** (``pow``, ``__pow__``, ``__rpow__``, ``square``): |b^e| <= the largest of
  (min|b| or max|b|)^(min e or max e): x^-0.5 of a variance is a reciprocal root, x^3 of an outlier
  of 100 is 1e6 (gelu's tanh form), and ``base ** (arange/d)`` a rotary table's frequencies;
- **products** (``mul``, ``__mul__``, ``__rmul__``): |a*b| <= max|a| * max|b|, recorded scalars
  included (a mask times ``finfo.min``, x times rsqrt(variance));
- **exponentials and logarithms**: exp(x) <= exp(max x) (softmax's exp of scores), |ln x| <=
  max(|ln min x|, |ln max x|) for x > 0 (the log of a probability of 1e-5 is -11.5);
  ``log_softmax`` <= (max x - min x) + ln n;
- **bounded functions**: softmax, sigmoid, tanh, cos, sin and ``normalize`` give at most 1 (a
  softmax over one score is exactly 1, however small the score);
- **normalisations** (layer and RMS norms: a module whose class names a norm, msprobe's
  ``layer_norm``/``rms_norm``, ATB's ``RmsNormOperation``): (x - mean)/sqrt(var + eps) has every
  element within sqrt(n) of 0 for n normalised elements, so y <= sqrt(n) * max|w| + max|b| (w, b
  the weight and bias where dumped, else |w| taken as 1, as norm weights are initialised), however
  small x is; a rotary embedding module gives cos and sin (<= 1) or vectors it rotates (<= sqrt(2)
  times their largest);
- **sums and counts** (``sum``, ``cumsum``, ``histc``, ``bincount``, the ``norm`` of a tensor): n
  summed elements give at most n * max|x| (a cumsum of a float attention mask of 4096 ones is 4096);
- **fills and constructors** (``masked_fill``, ``where``, ``full``, ``fill_``, ``arange``, ``zeros``,
  ``ones``): the output's values are the sources' and the recorded fill values, so it is bounded by
  them; a fill of -inf or the dtype's extreme is what a mask is meant to hold (masks.py), and an
  all-zero output of ``zeros``, of a fill with 0 or of a selection from a zero source is what it
  computes, as is the difference of equal constants (``1.0 - mask`` where the mask is all ones).

An embedding lookup, ``arange``'s position ids and any operator fed only integer tensors (token
ids, positions) have no float input: nothing says their scale, and they are not judged (rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tui_acc.anomalies.calls import Call, Expected, Operand, argument
from tui_acc.tolerances.masks import saturates

_BOUNDED_BY_ONE = {"softmax", "sigmoid", "tanh", "cos", "sin", "normalize", "erf", "softsign"}
# a tensor's p-norm (an API, not a norm layer): at most n^(1/p) * max|x| <= n * max|x|
_API_REDUCTIONS = {"norm", "vector_norm", "linalg_vector_norm", "frobenius_norm"}
_API_NORMS = {
    "layer_norm",
    "rms_norm",
    "group_norm",
    "batch_norm",
    "instance_norm",
    "npu_rms_norm",
    "npu_add_rms_norm",
}
# per n normalised elements over the last dimension (layer and RMS norms); these over other ones
_WHOLE_TENSOR_NORMS = ("group", "batch", "instance")
# the operators whose bound needs the scalars a dump records beside the tensors (msprobe's dump.json)
NEEDS_ARGUMENTS = frozenset(
    {
        "truediv",
        "rtruediv",
        "pow",
        "rpow",
        "mul",
        "select",
        "full",
        "arange",
        "sum",
        "cumsum",
        "log_softmax",
        "add",
        "sub",
        "rsub",
    }
)


def reads_parameters(op: str, api: bool) -> bool:
    """Whether the bound of a call of ``op`` reads its module's parameters (a norm's weight)."""
    return not api and "norm" in op


def expected(call: Call, largest_input: float | None) -> Expected:
    """What ``call``'s output may be (see the module's docstring for each family's arithmetic).

    ``largest_input``: its float inputs' largest magnitude, the default bound, which modules with
    several outputs (a norm's residual, a rotary embedding's rotated vectors) keep besides their own.
    """
    op = call.op
    if not call.api and op not in _BOUNDED_BY_ONE:
        return _module(call, largest_input)
    if op in _BOUNDED_BY_ONE:
        return Expected(1.0, "1 (a bounded function)")
    if op in _API_NORMS:
        return _normalisation(call, largest_input)
    if op in _API_REDUCTIONS:
        return _sum(call)
    rule = _RULES.get(op)
    return rule(call) if rule is not None else Expected()


def _module(call: Call, largest_input: float | None) -> Expected:
    op = call.op
    if "rotary" in op:  # cos and sin, or the vectors it rotates: each pair's length kept
        rotated = math.sqrt(2.0) * (largest_input or 0.0)
        return Expected(max(1.0, rotated), "max(1, sqrt(2) * max|x|) (cos, sin, a rotation)")
    if "norm" in op:
        return _normalisation(call, largest_input)
    if op in _RULES:  # an ATB operation or a module named as the function it is
        return _RULES[op](call)
    return Expected()


def _normalisation(call: Call, largest_input: float | None) -> Expected:
    """y = (x - mean) / sqrt(var + eps) * w + b: every normalised element is within sqrt(n) of 0
    (sum of squares n*var), so |y| <= sqrt(n) * max|w| + max|b|; the other arguments (weight, bias,
    a fused residual) and a module's parameters stand for w and b, |w| = 1 where none was dumped."""
    shape = call.output_shape
    whole = any(word in call.op for word in _WHOLE_TENSOR_NORMS)
    n = (math.prod(shape) if whole else shape[-1]) if shape else None
    if not n:
        return Expected()
    others = [operand.largest for position, operand in call.args.items() if position != 0]
    others += [operand.largest for operand in call.params]
    scale = max(others) if others else 1.0
    bound = (math.sqrt(n) + 1.0) * scale
    return Expected(max(bound, largest_input or 0.0), "(sqrt(n) + 1) * max|w, b|")


def _rsqrt(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None:
        return Expected()
    if x.low <= 0.0:  # rsqrt(0) is Inf and of a negative NaN: their rules judge it, no bound here
        return Expected(math.inf, "1/sqrt(min x), min x <= 0")
    return Expected(1.0 / math.sqrt(x.low), "1/sqrt(min x)")


def _reciprocal(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None:
        return Expected()
    return Expected(_ratio(1.0, x.smallest), "1/min|x|")


def _divide(call: Call, numerator: Operand | None, denominator: Operand | None) -> Expected:
    if numerator is None or denominator is None:
        return Expected()
    return Expected(_ratio(numerator.largest, denominator.smallest), "max|a| / min|b|")


def _ratio(top: float, bottom: float) -> float:
    if bottom == 0.0:
        return math.inf
    try:
        return top / bottom
    except OverflowError:  # pragma: no cover - floats divide to inf rather than raise
        return math.inf


def _power(base: Operand | None, exponent: Operand | None) -> Expected:
    """|b^e| is monotonic in |b| and in e: its largest is at a corner of the two ranges."""
    if base is None or exponent is None:
        return Expected()
    corners = []
    for magnitude in (base.smallest, base.largest):
        for e in (exponent.low, exponent.high):
            if magnitude == 0.0 and e < 0:
                return Expected(math.inf, "max|b|^e, 0^-e")
            try:
                corners.append(math.pow(magnitude, e))
            except (OverflowError, ValueError):
                return Expected(math.inf, "max|b|^e beyond float")
    return Expected(max(corners), "max over (min|b|, max|b|)^(min e, max e)")


def _product(call: Call) -> Expected:
    operands = call.operands()
    if not operands:
        return Expected()
    bound = 1.0
    for operand in operands:
        bound *= operand.largest
    return Expected(bound, "max|a| * max|b|", zeros=any(o.zero for o in operands))


def _exp(call: Call, base: float, minus_one: bool = False) -> Expected:
    x = argument(call, 0, "input")
    if x is None:
        return Expected()
    try:
        bound = math.pow(base, x.high)
    except OverflowError:
        return Expected(math.inf, "exp(max x) beyond float")
    return Expected(max(bound, 1.0) if minus_one else bound, "exp(max x)")


def _log(call: Call, divisor: float) -> Expected:
    x = argument(call, 0, "input")
    if x is None:
        return Expected()
    if x.low <= 0.0:  # log(0) is -Inf, of a negative NaN: their rules judge it
        return Expected(math.inf, "|ln x|, min x <= 0")
    return Expected(max(abs(math.log(x.low)), abs(math.log(x.high))) / divisor, "max |ln x|")


def _log_softmax(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None or not x.shape:
        return Expected()
    return Expected((x.high - x.low) + math.log(x.shape[-1]), "(max x - min x) + ln n")


def _sum(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None or x.numel is None:
        return Expected()
    out = math.prod(call.output_shape) if call.output_shape is not None else 1
    n = max(1, x.numel // max(out, 1))
    return Expected(n * x.largest, "n * max|x|, n summed")


def _cumsum(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None or x.numel is None:
        return Expected()
    dim = argument(call, 1, "dim")
    n = x.numel
    rank = len(x.shape or ())
    if dim is not None and rank and float(dim.high).is_integer() and -rank <= dim.high < rank:
        n = (x.shape or ())[int(dim.high)]
    return Expected(max(n, 1) * x.largest, "n * max|x| along the dimension")


def _counts(call: Call) -> Expected:
    x = argument(call, 0, "input")
    if x is None or x.numel is None:
        return Expected()
    weights = argument(call, 1, "weights")
    return Expected(x.numel * max(1.0, weights.largest if weights else 1.0), "numel (counts)")


def _values(call: Call, sources: Iterable[Operand]) -> Expected:
    """A fill or selection: its output's values are its sources'; infinite and saturated ones (a
    mask's fill) are named as fills rather than bounds."""
    finite, fills = [], []
    zeros = False
    for source in sources:
        zeros = zeros or source.zero
        for value in {source.high, source.low}:
            if math.isinf(value) or saturates(value, source.dtype or call.output_dtype):
                fills.append(value)
            else:
                finite.append(abs(value))
    if not finite and not fills:
        return Expected()
    return Expected(max(finite, default=0.0), "max|source|", tuple(fills), zeros)


def _select(call: Call) -> Expected:
    return _values(call, call.operands())


def _full(call: Call) -> Expected:
    # full(size, v), full_like(x, v), new_full(x, size, v), fill_(x, v): the value is the one number
    sources = [o for at, o in call.args.items() if at != 0 or o.shape == ()] + list(call.kwargs.values())
    return _values(call, sources)


def _difference(call: Call, sign: float, reverse: bool = False) -> Expected:
    """a + b, a - b, b - a (``__rsub__``) of constants (every element one value, or a scalar): the
    result is known, and 0 is what it computes (``1.0 - mask`` of a mask of ones: no padding)."""
    a, b = argument(call, 0, "input"), argument(call, 1, "other")
    if a is None or b is None or a.high != a.low or b.high != b.low:
        return Expected()
    first, second = (b, a) if reverse else (a, b)
    result = first.high + sign * second.high
    return Expected(abs(result), "a constant's sum or difference", zeros=result == 0.0)


def _arange(call: Call) -> Expected:
    numbers = [o for o in call.operands() if o.shape == ()]
    if not numbers:
        return Expected()
    return Expected(max(o.largest for o in numbers), "max(|start|, |end|)")


_RULES = {
    "rsqrt": _rsqrt,
    "reciprocal": _reciprocal,
    "truediv": lambda c: _divide(c, argument(c, 0, "input"), argument(c, 1, "other")),
    "rtruediv": lambda c: _divide(c, argument(c, 1, "other"), argument(c, 0, "input")),
    "pow": lambda c: _power(argument(c, 0, "input", "self"), argument(c, 1, "exponent")),
    "rpow": lambda c: _power(argument(c, 1, "other"), argument(c, 0, "input")),
    "square": lambda c: _power(argument(c, 0, "input"), Operand(2.0, 2.0)),
    "mul": _product,
    "exp": lambda c: _exp(c, math.e),
    "exp2": lambda c: _exp(c, 2.0),
    "expm1": lambda c: _exp(c, math.e, minus_one=True),
    "log": lambda c: _log(c, 1.0),
    "log2": lambda c: _log(c, math.log(2.0)),
    "log10": lambda c: _log(c, math.log(10.0)),
    "log_softmax": _log_softmax,
    "sum": _sum,
    "cumsum": _cumsum,
    "histc": _counts,
    "bincount": _counts,
    "select": _select,
    "full": _full,
    "zeros": lambda c: Expected(0.0, "0", zeros=True),
    "ones": lambda c: Expected(1.0, "1"),
    "arange": _arange,
    "add": lambda c: _difference(c, 1.0),
    "sub": lambda c: _difference(c, -1.0),
    "rsub": lambda c: _difference(c, -1.0, reverse=True),
}
