"""How far a dumped output may be from its float64 replay and still be what the operator computes.

The dumped output ``y`` of an operator at dtype D came from its inputs (the same, bit for bit, as
the replay's) through two kinds of rounding:

- the final rounding to D: |y_i - r_i| <= u_D |r_i| element by element, so ‖y - r‖ <= u_D ‖r‖;
- the kernel's arithmetic before it, at least float32 on every backend tui-acc meets (bf16/fp16
  matmuls accumulate in float32): a length-K sum in a blocked or pairwise order errs, with high
  probability, by about sqrt(K) u_w relative to the result (Higham & Mary's probabilistic bound),
  u_w = min(u_D, 2**-24).

So ``rel_euclidean = ‖y - r‖ / ‖r‖ <= SAFETY * (u_D + sqrt(K) u_w)``, with SAFETY = 4 for the few
extra roundings a fused operator may do (an RMSNorm rounds the normalised value, then the product
with its weight). Integer and boolean outputs must match exactly. A NaN or infinity where the
replay has none (or the other way round) disagrees. The bound is a property of the dtype and K,
not of a CPU: tests assert verdicts, never digits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tui_acc.dumps.dtypes import unit_roundoff
from tui_acc.numbers import number

ACCUMULATION = 2.0**-24  # float32: the narrowest precision kernels accumulate in
SAFETY = 4.0


def tolerance(dtype: str, reduction: int = 1) -> float:
    """The largest relative euclidean distance a correct operator's output at ``dtype`` shows; 0 for
    integer outputs (exact)."""
    unit = unit_roundoff(dtype)
    if unit is None:
        return 0.0
    return SAFETY * (unit + math.sqrt(max(1, reduction)) * min(unit, ACCUMULATION))


def consistent(metrics: Mapping[str, object], bound: float) -> tuple[bool, str]:
    """Whether the dumped output is within ``bound`` of its replay, and a sentence saying why."""
    non_finite = {
        key: metrics.get(f"test_{key}", 0) != metrics.get(f"golden_{key}", 0) for key in ("nan", "inf")
    }
    if any(non_finite.values()):
        return False, (
            f"non-finite values differ: dumped {metrics.get('test_nan', 0)} NaN, "
            f"{metrics.get('test_inf', 0)} inf; replay {metrics.get('golden_nan', 0)} NaN, "
            f"{metrics.get('golden_inf', 0)} inf"
        )
    rel = metrics.get("rel_euclidean")
    if not isinstance(rel, (int, float)) or math.isnan(rel):
        return False, "no distance could be computed"
    if rel <= bound:
        return True, f"rel euclid {number(float(rel))} <= tolerance {number(bound)}"
    return False, f"rel euclid {number(float(rel))} > tolerance {number(bound)}"
