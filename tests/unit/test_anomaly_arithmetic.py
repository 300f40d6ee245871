"""The jump rule against what each operator computes (anomalies/arithmetic.py), on hand-made rows.

Every bound below is the operator's documented arithmetic worked by hand (rsqrt(0.01) = 10,
exp(2) < 7.39, a softmax is at most 1, ...), never read from the code under test; an output within
it passes however large beside its inputs, and one far beyond it is still a jump.
"""

from __future__ import annotations

import math

import pytest

from tui_acc.anomalies.arithmetic import expected
from tui_acc.anomalies.calls import Call, Operand, operator_name, place
from tui_acc.anomalies.rules import AnomalySettings, Inputs, anomaly, anomaly_text

SETTINGS = AnomalySettings()  # jump_factor 1000, jump_floor 1
FLOAT32_MIN = -3.4028234663852886e38


def _tensor(low: float, high: float, shape: tuple[int, ...] = (1, 8)) -> Operand:
    return Operand(high, low, math.prod(shape), shape, "float32")


def _judge(call: Call, out_low: float, out_high: float, **row: object) -> tuple[str, float] | None:
    """The rule's verdict on an output of ``call`` holding values in [out_low, out_high]."""
    floats = [o.largest for o in call.operands() if o.dtype is not None and o.dtype.startswith("float")]
    largest = max(floats) if floats else None
    output = {
        "role": "output",
        "test_dtype": call.output_dtype or "float32",
        "test_max": out_high,
        "test_min": out_low,
        "test_shape": str(list(call.output_shape or (1, 8))),
        "numel": 8,
        **row,
    }
    return anomaly(output, Inputs(True, largest, expected(call, largest)), SETTINGS)


def _api(op: str, *args: Operand, output_shape: tuple[int, ...] = (1, 8), **kwargs: Operand) -> Call:
    return Call(
        operator_name(op),
        True,
        dict(enumerate(args)),
        kwargs,
        output_shape=output_shape,
        output_dtype="float32",
    )


def test_a_norms_rsqrt_is_judged_by_one_over_the_root_of_its_smallest_input() -> None:
    # a variance in [0.01, 0.04]: rsqrt is at most 1/sqrt(0.01) = 10, 250 times the input's largest
    rsqrt = _api("rsqrt", _tensor(0.01, 0.04))
    assert _judge(rsqrt, 5.0, 10.0) is None
    kind, figure = _judge(rsqrt, 5.0, 1e5)
    assert kind == "jump" and figure == pytest.approx(1e4, rel=1e-9)  # 1e5 / 10
    # a variance of 1e-6 (an activation of 1e-3): rsqrt 1000, 1e9 times the input
    assert _judge(_api("rsqrt_", _tensor(1e-6, 2e-6)), 700.0, 1000.0) is None
    # where the statistics reach 0 rsqrt is Inf or NaN there: those rules judge it, not this one
    assert _judge(_api("rsqrt", _tensor(0.0, 1.0)), 1.0, 1e30) is None


def test_reciprocals_divisions_and_powers_follow_their_smallest_divisor() -> None:
    assert _judge(_api("reciprocal", _tensor(1e-4, 1.0)), 1.0, 1e4) is None  # 1/min|x|
    assert _judge(_api("reciprocal", _tensor(1e-4, 1.0)), 1.0, 1e8)[0] == "jump"
    # a / b with |a| <= 1 and b in [0.5, 2]: at most 2
    divide = _api("__truediv__", _tensor(-1.0, 1.0), _tensor(0.5, 2.0))
    assert _judge(divide, -2.0, 2.0) is None
    kind, figure = _judge(divide, -2.0, 1e4)
    assert kind == "jump" and figure == pytest.approx(5e3, rel=1e-9)
    # x / 1e-4, the divisor a recorded scalar; 1.0 / x (__rtruediv__: the tensor divides)
    assert _judge(_api("__truediv__", _tensor(-1e-3, 1e-3), Operand(1e-4, 1e-4)), -10.0, 10.0) is None
    assert _judge(_api("__rtruediv__", _tensor(1e-6, 1e-5), Operand(1.0, 1.0)), 1e5, 1e6) is None
    # a divisor whose range holds 0 bounds nothing: 1/x near 0 is any size
    assert _judge(_api("div", _tensor(-1.0, 1.0), _tensor(-1.0, 1.0)), -1e9, 1e9) is None
    # x ** -0.5 of a variance of 1e-6, x ** 3 of an outlier of 100
    assert _judge(_api("pow", _tensor(1e-6, 1e-4), Operand(-0.5, -0.5)), 100.0, 1000.0) is None
    assert _judge(_api("pow", _tensor(1e-6, 1e-4), Operand(-0.5, -0.5)), 100.0, 1e7)[0] == "jump"
    assert _judge(_api("pow", _tensor(-3.0, 100.0), Operand(3.0, 3.0)), -27.0, 1e6) is None
    # 10000 ** x for x in [0, 1] (__rpow__: the tensor is the exponent): at most 10000
    assert _judge(_api("__rpow__", _tensor(0.0, 1.0), Operand(1e4, 1e4)), 1.0, 1e4) is None


def test_exp_softmax_and_log_are_judged_by_their_functions() -> None:
    assert _judge(_api("exp", _tensor(-5.0, 2.0)), 0.0, 7.0) is None  # exp(2) = 7.389
    assert _judge(_api("exp", _tensor(-5.0, 10.0)), 0.0, 22026.0) is None  # exp(10) = 22026.47
    assert _judge(_api("exp", _tensor(-5.0, 2.0)), 0.0, 1e5)[0] == "jump"
    # a softmax over one score of 1e-6 is exactly 1; a softmax never exceeds 1
    assert _judge(_api("softmax", _tensor(1e-6, 1e-6)), 1.0, 1.0) is None
    kind, figure = _judge(_api("_softmax", _tensor(1e-6, 1e-6)), 0.0, 2000.0)
    assert kind == "jump" and figure == pytest.approx(2000.0, rel=1e-12)
    # ln of probabilities in [1e-6, 1e-5]: |ln 1e-6| = 13.8
    assert _judge(_api("log", _tensor(1e-6, 1e-5)), -13.9, -11.0) is None
    assert _judge(_api("log", _tensor(1e-6, 1e-5)), -1e5, -11.0)[0] == "jump"


def test_a_linear_far_beyond_its_inputs_is_still_a_jump() -> None:
    """A linear, a matmul or a module are no family: the largest float input stays the bound."""
    linear = _api("linear", _tensor(-1.0, 1.0), _tensor(-0.5, 0.5, (8, 8)))
    kind, figure = _judge(linear, -1e4, 10.0)
    assert kind == "jump" and figure == pytest.approx(1e4, rel=1e-12)
    module = Call(operator_name("Linear"), False, {0: _tensor(-1.0, 1.0)}, output_shape=(1, 8))
    assert _judge(module, -1e4, 10.0)[0] == "jump"
    assert _judge(module, -100.0, 10.0) is None


def test_a_norm_module_is_bounded_by_its_width_not_its_input() -> None:
    """(x - mean) / rms over 64 elements is within sqrt(64) = 8 of 0, times the weight: an input of
    1e-6 normalised to 3 is a norm, 1e5 is not."""
    norm = Call(
        operator_name("LlamaRMSNorm"), False, {0: _tensor(-1e-6, 1e-6, (1, 8, 64))}, output_shape=(1, 8, 64)
    )
    assert _judge(norm, -3.0, 3.0) is None
    assert _judge(norm, -3.0, 1e5)[0] == "jump"
    weighted = Call(
        operator_name("RmsNormOperation"),  # ATB: intensor1 is the weight, here up to 50
        False,
        {0: _tensor(-1e-6, 1e-6, (8, 64)), 1: _tensor(0.5, 50.0, (64,))},
        output_shape=(8, 64),
    )
    assert _judge(weighted, -300.0, 300.0) is None  # within 8 * 50 = 400
    assert _judge(weighted, -300.0, 1e7)[0] == "jump"
    rotary = Call(operator_name("LlamaRotaryEmbedding"), False, {0: _tensor(-1e-5, 1e-5)})
    assert _judge(rotary, -1.0, 1.0) is None  # cos and sin
    assert _judge(rotary, -1.0, 1e4)[0] == "jump"


def test_sums_count_their_elements() -> None:
    ones = _tensor(1.0, 1.0, (1, 4096))
    cumsum = _api("cumsum", ones, Operand(-1.0, -1.0), output_shape=(1, 4096))
    assert _judge(cumsum, 1.0, 4096.0) is None
    assert _judge(cumsum, 1.0, 4096.0 * 1e4)[0] == "jump"
    assert _judge(_api("sum", ones, output_shape=(1,)), 4096.0, 4096.0) is None


def test_a_masks_fill_is_neither_a_jump_nor_an_inf() -> None:
    scores = _tensor(-3.0, 10.0, (8, 8))
    minimum = _api("masked_fill", scores, Operand(FLOAT32_MIN, FLOAT32_MIN), output_shape=(8, 8))
    assert _judge(minimum, FLOAT32_MIN, 10.0) is None
    kind, figure = _judge(minimum, FLOAT32_MIN, 1e5)  # its other values, 1e4 times its sources
    assert kind == "jump" and figure == pytest.approx(1e4, rel=1e-12)
    minus_inf = _api("masked_fill_", scores, Operand(-math.inf, -math.inf), output_shape=(8, 8))
    assert _judge(minus_inf, -3.0, 10.0, test_inf=28) is None  # data rows: finite max/min, Infs counted
    assert _judge(minus_inf, -math.inf, 10.0) is None  # statistics rows: -inf as the min
    # the same -inf out of an operator that fills nothing is made there
    assert _judge(_api("linear", scores), -3.0, 10.0, test_inf=28) == ("inf", 28.0)
    # a tensor that saturates float32 from a mask added in keeps its other values judged
    assert _judge(_api("__add__", scores, _tensor(FLOAT32_MIN, 0.0, (8, 8))), FLOAT32_MIN, 10.0) is None


def test_zeros_that_an_operator_computes_are_not_lost_buffers() -> None:
    zero = Operand(0.0, 0.0, 1, (), "float32")
    minimum = Operand(FLOAT32_MIN, FLOAT32_MIN, 1, (), "float32")
    assert _judge(_api("where", zero, minimum), 0.0, 0.0) is None  # where(all true, 0, finfo.min)
    assert _judge(_api("zeros"), 0.0, 0.0) is None
    assert _judge(_api("masked_fill", _tensor(-3.0, 3.0), Operand(0.0, 0.0)), 0.0, 0.0) is None
    assert _judge(_api("__rsub__", _tensor(1.0, 1.0), Operand(1.0, 1.0)), 0.0, 0.0) is None  # 1.0 - ones
    # a difference that is not of equal constants, and a linear, are still all zero for nothing
    assert _judge(_api("__rsub__", _tensor(0.0, 1.0), Operand(1.0, 1.0)), 0.0, 0.0) == ("zeros", 8.0)
    assert _judge(_api("linear", _tensor(-1.0, 1.0)), 0.0, 0.0) == ("zeros", 8.0)


def test_operator_names_and_argument_slots() -> None:
    assert [operator_name(t) for t in ("__truediv__", "_softmax", "rsqrt_", "RmsNormOperation")] == [
        "truediv",
        "softmax",
        "rsqrt",
        "rmsnorm",
    ]
    assert [place(s) for s in ("input.1", "input_0", "intensor2", "argument 3", "input.dim", "output")] == [
        1,
        0,
        2,
        3,
        "dim",
        None,
    ]
    assert anomaly_text("jump", 7130.0) == "7.13e+03x what its inputs allow"
