"""What rounding alone explains: the error a correct operator shows at its output's dtype.

Rounding a real ``x`` to a float type with unit roundoff ``u`` (half an ulp of 1; round to nearest)
gives ``x (1 + d)`` with ``|d| <= u``. Over many elements ``d`` spreads over ``[-u, u]``, so the
relative error of a rounded tensor, ``||fl(y) - y|| / ||y||``, is about ``u / sqrt(3)`` (a little
less for values spread over many binades: 0.74 of it for log-uniform values, which is what correct
Linear, RMSNorm and SiLU outputs of a bf16 port measure, 0.34-0.53 u). That is ``ROUNDING_RMS``.

An operator's output carries, on top of its inputs' error, its own (Higham, *Accuracy and Stability
of Numerical Algorithms*, §3.1 for the ``gamma_n`` bounds; Higham & Mary 2019 for the probabilistic
``sqrt(n) u`` growth of a sum):

- each rounding to the output dtype: ``u_D / sqrt(3)``, ``roundings`` times, independently;
- the accumulation of a length-``K`` sum at ``u_acc`` (float32 at least on every backend this reads:
  bf16/fp16 matmuls accumulate in float32), about ``sqrt(K) u_acc / sqrt(3)`` relative to the sum of
  the magnitudes, so ``kappa`` times that relative to the result, ``kappa = || |W| |x| || / ||W x||``
  the condition number of the sum (1 without cancellation).

``expected_local`` is their root-sum-square: what a correct operator's local error measures, give
or take a factor below 1. A measured local error above ``MARGIN`` times it is not rounding. The
margin, 3, leaves correct operators at a third of the bound or less (0.3 on the fixtures) and
puts a 2 % error at a bf16 output (5 u) 3 times over it. The bound is a property of the dtype, the
reduction and the data, never of a CPU: tests assert verdicts, not digits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# unit roundoff (half an ulp of 1) of each float dtype tui-acc reads: one rounding's largest relative error
UNIT_ROUNDOFF = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float8_e4m3fn": 2.0**-4,
    "float8_e4m3fnuz": 2.0**-4,
    "float8_e5m2": 2.0**-3,
    "float8_e5m2fnuz": 2.0**-3,
}
ACCUMULATION = 2.0**-24  # float32: the narrowest precision kernels accumulate in
ROUNDING_RMS = 1.0 / math.sqrt(3.0)  # relative rms of one rounding, in units of u
MARGIN = 3.0


def unit_roundoff(dtype: object) -> float | None:
    """``u`` of a float dtype (``torch.`` prefix allowed); None for integers and unknown types."""
    return UNIT_ROUNDOFF.get(str(dtype).removeprefix("torch."))


def coarser(*dtypes: object) -> object:
    """The dtype of the largest unit roundoff (the golden's and the test's rounding both show in the
    distance between them; a merged float64 of float32 ranks is as coarse as the float32)."""
    known = [d for d in dtypes if unit_roundoff(d) is not None]
    return max(known, key=lambda d: unit_roundoff(d) or 0.0) if known else (dtypes[0] if dtypes else None)


def coarsest(dtypes: Iterable[object]) -> str | None:
    """The float dtype of the largest unit roundoff among ``dtypes`` (None: no float dtype)."""
    known = [d for d in dtypes if unit_roundoff(d) is not None]
    return str(max(known, key=lambda d: unit_roundoff(d) or 0.0)) if known else None


def one_rounding(dtype: object) -> float:
    """The relative rms error of rounding a tensor once to ``dtype`` (0 for integers)."""
    unit = unit_roundoff(dtype)
    return 0.0 if unit is None else unit * ROUNDING_RMS


def expected_local(dtype: object, reduction: int = 1, roundings: int = 1, condition: float = 1.0) -> float:
    """The relative error a correct operator's output at ``dtype`` shows against its exact result."""
    unit = unit_roundoff(dtype)
    if unit is None:
        return 0.0
    accumulation = min(unit, ACCUMULATION) * max(1.0, condition)
    return ROUNDING_RMS * math.sqrt(max(1, roundings) * unit**2 + max(1, reduction) * accumulation**2)


def local_bound(dtype: object, reduction: int = 1, roundings: int = 1, condition: float = 1.0) -> float:
    """The largest local error a correct operator shows: ``MARGIN`` times ``expected_local``."""
    return MARGIN * expected_local(dtype, reduction, roundings, condition)
