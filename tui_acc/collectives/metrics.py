"""The four metrics the Ascend all-reduce check reports, by msit's definitions, in float64.

msit's definitions (docs/formats.md §4.4: ``max_relative_error``, ``mean_relative_error`` over every
element, relative errors only where ``|golden| > 2^-23``; ``relative_euclidean_distance`` is
``||test - golden|| / ||golden||``, 0 where the golden's norm is no more than that). Computed in
float64 from the widened tensors: the golden is an exact float64 sum, and reproducing msit's own
fp32 rounding (``metrics/compat.py``, through torch) would cost a second of torch import for digits
no verdict here depends on (the verdict is ``bound.py``'s, element by element). Every sum is numpy's
pairwise sum, never BLAS's dot product, whose threads and CPU kernels move the last bits: the same
values give the same numbers on any machine, and a Ray run's nodes the numbers a local run gives.
"""

from __future__ import annotations

import numpy as np

# float32's machine epsilon: msit's threshold for a golden element counted in relative errors
_EPS32 = 2.0**-23


def collective_metrics(golden: np.ndarray, test: np.ndarray) -> dict[str, float | None]:
    """``golden`` and ``test``: flat float64 arrays of one size. None for every metric where either
    holds a NaN or an infinity (msit leaves them empty and says why)."""
    names = ("cosine_similarity", "max_relative_error", "mean_relative_error", "relative_euclidean_distance")
    if golden.size == 0 or not (np.isfinite(golden).all() and np.isfinite(test).all()):
        return dict.fromkeys(names)
    difference = test - golden
    counted = np.abs(golden) > _EPS32
    relative = np.zeros_like(golden)
    np.divide(np.abs(difference), np.abs(golden), out=relative, where=counted)
    norm_golden, norm_test = _norm(golden), _norm(test)
    if norm_golden == 0 and norm_test == 0:
        cosine = 1.0
    else:
        cosine = float(np.sum(golden * test)) / max(norm_golden * norm_test, 1e-8)
    return {
        "cosine_similarity": cosine,
        "max_relative_error": float(relative.max()),
        "mean_relative_error": float(relative.sum()) / golden.size,
        "relative_euclidean_distance": 0.0 if norm_golden <= _EPS32 else _norm(difference) / norm_golden,
    }


def _norm(values: np.ndarray) -> float:
    """The Euclidean norm by numpy's pairwise sum: BLAS splits a long dot product over its threads
    (and picks its kernel by CPU), so its last bits would follow the machine."""
    return float(np.sqrt(np.sum(values * values)))
