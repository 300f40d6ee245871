"""The compiled kernels' state: what ``sweep`` accumulates a pair's metrics into, and where.

Every compiled kernel (the C extension ``_ckernel``, ``numba_kernel``) updates the same two arrays
in place, chunk after chunk: ``sums`` (float64: sums, then extremes) and ``counts`` (int64).
``_ckernel.c`` has the same numbers; tests/unit/test_ckernel.py holds the two equal.
"""

from __future__ import annotations

import math

import numpy as np

# Below this |golden| a relative error means nothing (fp32 machine epsilon, as msit uses).
REL_FLOOR = 1.1920928955078125e-07
# Beyond this a square could overflow float64 (an Inf the fast loops are compiled not to expect).
HUGE = 1e150

S_GG, S_TT, S_GT, S_DD, S_AD, S_G, S_T, S_REL, S_KL = range(9)
M_AMAX, M_GMAX, M_GMIN, M_TMAX, M_TMIN, M_RELMAX, M_WG, M_WT = range(9, 17)
N_SUMS = 17
C_N, C_REL, C_1E3, C_5E3, C_KLROWS, C_GNAN, C_GINF, C_TNAN, C_TINF, C_WIDX = range(10)
N_COUNTS = 10


def new_state() -> tuple[np.ndarray, np.ndarray]:
    """Empty ``sums`` and ``counts``: extremes at their identities, no worst element yet (-1)."""
    sums = np.zeros(N_SUMS, dtype=np.float64)
    sums[M_GMAX] = sums[M_TMAX] = -math.inf
    sums[M_GMIN] = sums[M_TMIN] = math.inf
    counts = np.zeros(N_COUNTS, dtype=np.int64)
    counts[C_WIDX] = -1
    return sums, counts
