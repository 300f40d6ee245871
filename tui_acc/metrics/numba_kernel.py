"""The metric kernel compiled by numba: every metric of a chunk, row by row, in float64, without the GIL.

The fallback where the C extension (``_ckernel.c``, the same algorithm) could not be built;
``fastkernel`` chooses. ``kernels.compare_tensors`` defines the metrics; this computes the same sums,
so worker threads run it on every core. Each row is first checked for NaN/Inf (a cheap, exact loop).
A finite row (nearly all of them) then goes through one SIMD-vectorised loop: compiled with
fast-math so that sums may be reassociated into vector lanes, and with min/max as LLVM's
``maxnum``/``minnum``, which vectorise where a compare-and-branch does not; the worst element's
index is found afterwards, only in rows that raise the maximum. A row holding NaN/Inf takes the
element-by-element loop that skips them (``_sweep``). The KL softmax loops run per row while it
is in cache. ``sweep`` is None where numba is not installed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tui_acc.metrics.kernel_layout import (
    C_1E3,
    C_5E3,
    C_GINF,
    C_GNAN,
    C_KLROWS,
    C_N,
    C_REL,
    C_TINF,
    C_TNAN,
    C_WIDX,
    HUGE,
    M_AMAX,
    M_GMAX,
    M_GMIN,
    M_RELMAX,
    M_TMAX,
    M_TMIN,
    M_WG,
    M_WT,
    REL_FLOOR,
    S_AD,
    S_DD,
    S_G,
    S_GG,
    S_GT,
    S_KL,
    S_REL,
    S_T,
    S_TT,
)

try:  # numba is a dependency, but a platform without a wheel still gets a working tool
    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic
except ImportError:  # pragma: no cover
    njit = None  # type: ignore[assignment]


def _sweep(
    g: Any, t: Any, offset: int, kl: bool, sums: Any, counts: Any
) -> None:  # pragma: no cover - compiled
    # Accumulators are locals (registers), written back once: array cells would be re-read and
    # re-written per element, since the compiler cannot rule out that they alias the inputs.
    rows, width = g.shape
    sgg = sums[S_GG]
    stt = sums[S_TT]
    sgt = sums[S_GT]
    sdd = sums[S_DD]
    sad = sums[S_AD]
    sg = sums[S_G]
    st = sums[S_T]
    srel = sums[S_REL]
    skl = sums[S_KL]
    amax = sums[M_AMAX]
    gmax = sums[M_GMAX]
    gmin = sums[M_GMIN]
    tmax = sums[M_TMAX]
    tmin = sums[M_TMIN]
    relmax = sums[M_RELMAX]
    wg = sums[M_WG]
    wt = sums[M_WT]
    n = counts[C_N]
    nrel = counts[C_REL]
    n1 = counts[C_1E3]
    n5 = counts[C_5E3]
    klrows = counts[C_KLROWS]
    widx = counts[C_WIDX]
    gnan = counts[C_GNAN]
    ginf = counts[C_GINF]
    tnan = counts[C_TNAN]
    tinf = counts[C_TINF]
    for r in range(rows):
        row_finite = True
        mg = -math.inf
        mt = -math.inf
        for c in range(width):
            gv = np.float64(g[r, c])
            tv = np.float64(t[r, c])
            g_ok = math.isfinite(gv)
            t_ok = math.isfinite(tv)
            if not (g_ok and t_ok):
                row_finite = False
                if math.isnan(gv):
                    gnan += 1
                elif not g_ok:
                    ginf += 1
                if math.isnan(tv):
                    tnan += 1
                elif not t_ok:
                    tinf += 1
                continue
            d = tv - gv
            ad = abs(d)
            ag = abs(gv)
            n += 1
            sgg += gv * gv
            stt += tv * tv
            sgt += gv * tv
            sdd += d * d
            sad += ad
            sg += gv
            st += tv
            if ad > amax or widx < 0:
                amax = ad
                wg = gv
                wt = tv
                widx = offset + r * width + c
            gmax = max(gmax, gv)
            gmin = min(gmin, gv)
            tmax = max(tmax, tv)
            tmin = min(tmin, tv)
            ratio = ad / (ag if gv != 0.0 else REL_FLOOR)  # msprobe's thousandth ratios (eps for a zero)
            if ag > REL_FLOOR:
                srel += ratio
                nrel += 1
                relmax = max(relmax, ratio)
            # branch-free: whether an element is within 0.1% is a coin toss the CPU cannot predict
            n1 += ratio < 1e-3
            n5 += ratio < 5e-3
            mg = max(mg, gv)
            mt = max(mt, tv)
        if kl and row_finite and width > 0:
            skl += _row_kl_c(g, t, r, width, mg, mt)
            klrows += 1
    sums[S_GG] = sgg
    sums[S_TT] = stt
    sums[S_GT] = sgt
    sums[S_DD] = sdd
    sums[S_AD] = sad
    sums[S_G] = sg
    sums[S_T] = st
    sums[S_REL] = srel
    sums[S_KL] = skl
    sums[M_AMAX] = amax
    sums[M_GMAX] = gmax
    sums[M_GMIN] = gmin
    sums[M_TMAX] = tmax
    sums[M_TMIN] = tmin
    sums[M_RELMAX] = relmax
    sums[M_WG] = wg
    sums[M_WT] = wt
    counts[C_N] = n
    counts[C_REL] = nrel
    counts[C_1E3] = n1
    counts[C_5E3] = n5
    counts[C_KLROWS] = klrows
    counts[C_WIDX] = widx
    counts[C_GNAN] = gnan
    counts[C_GINF] = ginf
    counts[C_TNAN] = tnan
    counts[C_TINF] = tinf


def _llvm_minmax(name: str) -> Any:
    """``llvm.maxnum``/``llvm.minnum`` on float64 (NaN-free here: only finite rows use them)."""

    def typer(typingctx: Any, a: Any, b: Any) -> Any:
        signature = types.float64(types.float64, types.float64)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            double = ir.DoubleType()
            fn = builder.module.declare_intrinsic(name, [double], ir.FunctionType(double, [double, double]))
            return builder.call(fn, args)

        return signature, codegen

    return intrinsic(typer)


def _row_nonfinite(g: Any, t: Any, r: int, width: int) -> Any:  # pragma: no cover - compiled
    """(golden NaN, golden Inf, test NaN, test Inf, huge values) in row ``r``; exact, no fast-math."""
    gnan = ginf = tnan = tinf = huge = 0
    for c in range(width):
        gv = np.float64(g[r, c])
        tv = np.float64(t[r, c])
        gnan += gv != gv
        tnan += tv != tv
        ginf += abs(gv) == math.inf
        tinf += abs(tv) == math.inf
        huge += (abs(gv) > HUGE) + (abs(tv) > HUGE)
    return gnan, ginf, tnan, tinf, huge


def _row_fast(g: Any, t: Any, r: int, width: int) -> Any:  # pragma: no cover - compiled
    """Every sum and extreme of a finite row in one vectorised loop (see the module's docstring)."""
    sgg = stt = sgt = sdd = sad = sg = st = srel = 0.0
    amax = relmax = 0.0
    gmax = tmax = -math.inf
    gmin = tmin = math.inf
    nrel = n1 = n5 = 0
    for c in range(width):
        gv = np.float64(g[r, c])
        tv = np.float64(t[r, c])
        d = tv - gv
        ad = abs(d)
        ag = abs(gv)
        sgg += gv * gv
        stt += tv * tv
        sgt += gv * tv
        sdd += d * d
        sad += ad
        sg += gv
        st += tv
        amax = _fmax(amax, ad)
        gmax = _fmax(gmax, gv)
        gmin = _fmin(gmin, gv)
        tmax = _fmax(tmax, tv)
        tmin = _fmin(tmin, tv)
        ratio = ad / (ag if gv != 0.0 else REL_FLOOR)
        big = ag > REL_FLOOR
        srel += ratio if big else 0.0
        relmax = _fmax(relmax, ratio if big else 0.0)
        nrel += big
        n1 += ratio < 1e-3
        n5 += ratio < 5e-3
    return sgg, stt, sgt, sdd, sad, sg, st, srel, amax, gmax, gmin, tmax, tmin, relmax, nrel, n1, n5


def _first_at(g: Any, t: Any, r: int, width: int, target: float) -> int:  # pragma: no cover
    """The first column of row ``r`` whose absolute difference is ``target`` (exact compare)."""
    for c in range(width):
        if abs(np.float64(t[r, c]) - np.float64(g[r, c])) == target:
            return c
    return 0


def _row_kl(g: Any, t: Any, r: int, width: int, mg: float, mt: float) -> float:  # pragma: no cover
    """KL(golden || test) of row ``r``'s softmax; ``mg``/``mt`` are the row maxima (for stability)."""
    zg = 0.0
    zt = 0.0
    for c in range(width):
        zg += math.exp(np.float64(g[r, c]) - mg)
        zt += math.exp(np.float64(t[r, c]) - mt)
    log_zg = math.log(zg)
    log_zt = math.log(zt)
    acc = 0.0
    for c in range(width):
        log_p = np.float64(g[r, c]) - mg - log_zg
        log_q = np.float64(t[r, c]) - mt - log_zt
        acc += math.exp(log_p) * (log_p - log_q)
    return acc if acc > 0.0 else 0.0


def _sweep_rows(g: Any, t: Any, offset: int, kl: bool, sums: Any, counts: Any) -> None:  # pragma: no cover
    """``_sweep``'s results, a finite row at a time through the vectorised loop."""
    rows, width = g.shape
    for r in range(rows):
        gnan, ginf, tnan, tinf, huge = _row_nonfinite_c(g, t, r, width)
        if gnan + ginf + tnan + tinf + huge:
            _sweep_c(g[r : r + 1], t[r : r + 1], offset + r * width, kl, sums, counts)
            continue
        if width == 0:
            continue
        sgg, stt, sgt, sdd, sad, sg, st, srel, amax, gmax, gmin, tmax, tmin, relmax, nrel, n1, n5 = (
            _row_fast_c(g, t, r, width)
        )
        sums[S_GG] += sgg
        sums[S_TT] += stt
        sums[S_GT] += sgt
        sums[S_DD] += sdd
        sums[S_AD] += sad
        sums[S_G] += sg
        sums[S_T] += st
        sums[S_REL] += srel
        if amax > sums[M_AMAX] or counts[C_WIDX] < 0:
            c = _first_at_c(g, t, r, width, amax)
            sums[M_AMAX] = amax
            sums[M_WG] = np.float64(g[r, c])
            sums[M_WT] = np.float64(t[r, c])
            counts[C_WIDX] = offset + r * width + c
        sums[M_GMAX] = max(sums[M_GMAX], gmax)
        sums[M_GMIN] = min(sums[M_GMIN], gmin)
        sums[M_TMAX] = max(sums[M_TMAX], tmax)
        sums[M_TMIN] = min(sums[M_TMIN], tmin)
        sums[M_RELMAX] = max(sums[M_RELMAX], relmax)
        counts[C_N] += width
        counts[C_REL] += nrel
        counts[C_1E3] += n1
        counts[C_5E3] += n5
        if kl:
            sums[S_KL] += _row_kl_c(g, t, r, width, gmax, tmax)
            counts[C_KLROWS] += 1


if njit is not None:
    _fmax = _llvm_minmax("llvm.maxnum")
    _fmin = _llvm_minmax("llvm.minnum")
    _sweep_c = njit(cache=True, nogil=True)(_sweep)
    _row_nonfinite_c = njit(cache=True, nogil=True)(_row_nonfinite)
    # reassociation (vector lanes) and no NaN/Inf/signed-zero care; not "arcp": the ratios are
    # true divisions, so an element exactly at 1e-3 counts as msprobe counts it
    _row_fast_c = njit(cache=True, nogil=True, fastmath={"reassoc", "nnan", "ninf", "nsz"})(_row_fast)
    _first_at_c = njit(cache=True, nogil=True)(_first_at)
    _row_kl_c = njit(cache=True, nogil=True)(_row_kl)
    sweep = njit(cache=True, nogil=True)(_sweep_rows)
else:  # pragma: no cover
    sweep = None
