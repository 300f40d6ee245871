# The C extension tui_acc/metrics/_ckernel.c (built at install time, optional).
from typing import Any

def sweep(g: Any, t: Any, offset: int, kl: bool, sums: Any, counts: Any, /) -> None: ...
def sweep_bf16(g: Any, t: Any, offset: int, kl: bool, sums: Any, counts: Any, /) -> None: ...

S_GG: int
S_TT: int
S_GT: int
S_DD: int
S_AD: int
S_G: int
S_T: int
S_REL: int
S_KL: int
M_AMAX: int
M_GMAX: int
M_GMIN: int
M_TMAX: int
M_TMIN: int
M_RELMAX: int
M_WG: int
M_WT: int
N_SUMS: int
C_N: int
C_REL: int
C_1E3: int
C_5E3: int
C_KLROWS: int
C_GNAN: int
C_GINF: int
C_TNAN: int
C_TINF: int
C_WIDX: int
N_COUNTS: int
REL_FLOOR: float
HUGE: float
