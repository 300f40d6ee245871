"""How far a collective's output may be from its exact value, from floating-point arithmetic alone.

A sum of N values computed in a dtype of unit roundoff u, in any order and any tree of pairwise
additions (ring, tree, or a kernel accumulating wider and rounding once), satisfies

    |out_i - s_i| <= gamma_{N-1} * sum_r |x_ri| + (N - 1) * eta,    gamma_k = k*u / (1 - k*u)

(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2; eta, half the smallest
subnormal, covers results that underflow). A product of N values: gamma_{N-1} * |prod_r x_ri|. Max,
min and all-gather copy values, so they are exact. Each element is judged against that bound times
a margin (``[collectives] margin``, 2 by default); reordering the same sum never exceeds it, a
missing contribution (of the size of the values) does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tui_acc.dumps.sharding import Reduction
from tui_acc.tolerances.rounding import unit_roundoff as dtype_unit_roundoff

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Reduction", "beyond_bound", "element_bound", "gamma", "unit_roundoff"]

# the dtypes a collective's output is written in (the 8-bit floats are not reduced here)
REDUCED_DTYPES = ("bfloat16", "float16", "float32", "float64")
# half the smallest subnormal of each: the absolute error of rounding a result that underflows
HALF_SUBNORMAL = {
    "bfloat16": 2.0**-134,
    "float16": 2.0**-25,
    "float32": 2.0**-150,
    "float64": 2.0**-1075,
}
DEFAULT_MARGIN = 2.0


def unit_roundoff(dtype: str) -> float:
    """u of a float dtype a collective writes; integers and unknown dtypes are exact (0)."""
    return (dtype_unit_roundoff(dtype) or 0.0) if dtype in REDUCED_DTYPES else 0.0


def gamma(k: int, u: float) -> float:
    """gamma_k = k*u / (1 - k*u): the relative error bound of k roundings (inf where k*u >= 1)."""
    if k <= 0 or u == 0.0:
        return 0.0
    ku = k * u
    return ku / (1.0 - ku) if ku < 1.0 else float("inf")


def element_bound(
    reduction: Reduction, dtype: str, ranks: int, magnitude: np.ndarray, margin: float
) -> np.ndarray:
    """Each element's allowed |out - golden|: ``magnitude`` is sum_r |x_ri| (sum; divided by N for
    avg) or |prod_r x_ri| (prod), as float64; copies (max, min, gather) must be exact."""
    import numpy as np

    u = unit_roundoff(dtype)
    eta = HALF_SUBNORMAL.get(dtype, 0.0)
    steps = max(ranks - 1, 0) + (reduction == "avg")  # the average: the sum's additions, one division
    if reduction in ("sum", "avg", "prod"):
        bound = gamma(steps, u) * magnitude + steps * eta
    else:
        bound = np.zeros_like(magnitude)
    return margin * bound


def beyond_bound(golden: np.ndarray, output: np.ndarray, bound: np.ndarray) -> tuple[int, float]:
    """(how many elements of ``output`` lie beyond ``bound`` of ``golden``, the largest |error|/bound).

    All float64 and flat. NaN and Inf agree only with the same value in the golden; a NaN, or an Inf
    the golden does not have, is beyond any bound.
    """
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(output - golden)
        same = (output == golden) | (np.isnan(output) & np.isnan(golden))
        beyond = ~same & ~(error <= bound)
        ratio = np.where(same, 0.0, np.where(bound > 0, error / np.where(bound > 0, bound, 1.0), np.inf))
    worst = float(np.max(ratio)) if ratio.size else 0.0
    return int(np.count_nonzero(beyond)), worst
