"""Rounding-error bounds: the conformance tests' tolerances, derived from the arithmetic.

A tolerance is never the digits one machine printed. Each function here bounds how far a value
computed in floating point may lie from the exact value of the same formula on the same inputs,
from the precision and the shape of the computation alone. Two computations of one formula (ours
and a tool's, on different CPUs or libraries) may then differ by the sum of their two bounds.

The model (Higham, *Accuracy and Stability of Numerical Algorithms*, chapters 2-4):

* ``eps`` is the machine epsilon (``EPS32`` = 2**-23, ``EPS64`` = 2**-52) and u = eps/2 the unit
  roundoff: every +, -, *, / and sqrt is correctly rounded, fl(a op b) = (a op b)(1 + d), |d| <= u.
  Elementwise results are therefore the same on every CPU; only the order of sums differs.
* exp and log are within one ulp of the exact result: a relative error of at most eps.
* A sum is off by at most ``depth * u * sum|x_i|``, where depth is the most additions any one term
  passes through. A sum in unknown order has depth n - 1 (``any_order_depth``).
* Bounds are first order in eps: terms in (depth * eps)**2 are dropped. ``first_order`` checks that
  they are below 1% of the bound wherever a bound is used.
"""

from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23
EPS64 = float(np.finfo(np.float64).eps)  # 2**-52


def first_order(depth: int, eps: float) -> None:
    """Refuse a bound whose dropped second-order terms could exceed 1% of it."""
    assert depth * eps < 1e-2, f"depth {depth} at eps {eps}: first-order rounding bounds do not hold"


def any_order_depth(n: int) -> int:
    """The depth of a sum of n terms added in an unknown order (at worst one after another)."""
    return max(n - 1, 0)


def sum_bound(x: np.ndarray, eps: float, depth: int | None = None) -> float:
    """|computed sum - exact sum| for the terms x, added in eps arithmetic with the given depth."""
    depth = any_order_depth(x.size) if depth is None else depth
    first_order(depth, eps)
    return depth * eps / 2 * float(np.abs(x.astype(np.float64)).sum())


def mean_bound(x: np.ndarray, eps: float, depth: int | None = None) -> float:
    """|computed mean - exact mean|: the sum's bound over n, plus the rounding of the division."""
    if x.size == 0:
        return 0.0
    return sum_bound(x, eps, depth) / x.size + eps / 2 * abs(float(x.astype(np.float64).mean()))


def norm_relative_bound(n: int, eps: float) -> float:
    """Relative error of an L2 norm sqrt(sum x_i**2) of n terms in eps arithmetic, any order.

    Squares: u each; the sum of n non-negative terms: (n - 1) u relative; sqrt halves a relative
    error and adds its own u: ((n - 1) u + u) / 2 + u = (n + 2) u / 2.
    """
    first_order(n, eps)
    return (n + 2) * eps / 4


def relative_euclidean_bound(n: int, eps: float) -> float:
    """Relative error of sqrt(sum (m_i - g_i)**2 / sum g_i**2) over n elements in eps arithmetic.

    Numerator: the difference (u) squared (2u) and the square (u), then the sum ((n - 1) u):
    (n + 2) u. Denominator: (n - 1) u + u = n u. Quotient: u. sqrt halves it and adds u:
    ((n + 2) + n + 1) u / 2 + u = (2n + 5) u / 2.
    """
    first_order(n, eps)
    return (2 * n + 5) * eps / 4


def cosine_bound(n: int, eps: float) -> float:
    """Absolute error of g.m / (|g| |m|) over n elements in eps arithmetic, any order.

    The dot product is off by at most n u sum|g_i m_i| <= n u |g| |m| (Cauchy-Schwarz), i.e. n u in
    the cosine; each norm by (n + 2) u / 2 relative, their product and the division by 3u more,
    times |cos| <= 1: n u + (n + 2) u + 3u = (2n + 5) u.
    """
    first_order(n, eps)
    return (2 * n + 5) * eps / 2


def rounded_apart(places: int, unrounded_apart: float, magnitude: float = 1.0) -> float:
    """How far two values rounded to ``places`` decimals may be, if before rounding they were at most
    ``unrounded_apart`` apart: each rounding moves a value by half a unit of the last place, and the
    decimal result is itself stored as the nearest double (half an ulp of ``magnitude`` each)."""
    return unrounded_apart + 10.0**-places + EPS64 * abs(magnitude)


def rounded_from(places: int, unrounded_apart: float, magnitude: float = 1.0) -> float:
    """How far a value rounded to ``places`` decimals may be from an unrounded one that was at most
    ``unrounded_apart`` from it before rounding (half a unit of the last place, plus storage)."""
    return unrounded_apart + 0.5 * 10.0**-places + EPS64 * abs(magnitude)


def fp32_rounding(value: float) -> float:
    """|value - fl32(value)|: what storing one double in fp32 changes, measured, not bounded."""
    return abs(value - float(np.float32(value)))
