/* The metric kernel in C: numba_kernel's sweep as a CPython extension (fastkernel chooses).
 *
 * Why C beside numba: loading numba and its cached machine code costs about half a second and
 * 105-140 MiB on every launch; this module loads in under a millisecond and 0.1 MiB. The arithmetic
 * is numba_kernel's (tests/unit/test_ckernel.py holds the two equal, state against state):
 *
 * - a row goes through one vectorised loop (`row_fast`), compiled so that its sums may be
 *   reassociated into vector lanes and its min/max need not care for NaN, which also checks
 *   exactly (on the bits) for NaN, Inf and |x| > 1e150 (whose squares could overflow);
 * - a row holding one is swept again by the careful element loop (`careful_row`), which counts
 *   and skips them, and the fast loop's results for it are dropped;
 *   the worst element's index is found afterwards, only in rows that raise the maximum;
 * - KL per finite row, on the softmax shifted by the row's maxima; in a fast row with an exp of
 *   our own that vectorises (within an ulp of libm's), in a careful row with libm's;
 * - float64 accumulation everywhere, ratios as true divisions (an element exactly at 1e-3 counts
 *   as msprobe counts it).
 *
 * Only the reductions of finite rows (row_fast, block_sum, block_kl) get the fast-math flags:
 * everything else tests for NaN and must see it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

/* The state layout: sums (float64), then extremes; counts (int64) separately. The same numbers
 * as tui_acc/metrics/kernel_layout.py; the module exports them and a test holds them equal. */
enum {
    S_GG, S_TT, S_GT, S_DD, S_AD, S_G, S_T, S_REL, S_KL,
    M_AMAX, M_GMAX, M_GMIN, M_TMAX, M_TMIN, M_RELMAX, M_WG, M_WT,
    N_SUMS
};
enum { C_N, C_REL, C_1E3, C_5E3, C_KLROWS, C_GNAN, C_GINF, C_TNAN, C_TINF, C_WIDX, N_COUNTS };

/* Below this |golden| a relative error means nothing (fp32 machine epsilon, as msit uses). */
#define REL_FLOOR 1.1920928955078125e-07
/* Beyond this a square could overflow float64 (an Inf the fast loop is compiled not to expect). */
#define HUGE_ABS 1e150

/* The fast loop's flags: reassociation (vector lanes for the sums), no signed zeros, no traps, and
 * NaN-free min/max (a finite row only). Not reciprocal math: the ratios stay true divisions.
 * GCC takes them per function; clang only has a pragma for reassociation, so there the min/max
 * reductions stay scalar (correct, slower). */
#if defined(__clang__)
#define FAST_MATH_FUNCTION
#define FAST_MATH_BODY _Pragma("clang fp reassociate(on)")
#elif defined(__GNUC__)
#define FAST_MATH_FUNCTION                                                                          \
    __attribute__((optimize("associative-math", "no-signed-zeros", "no-trapping-math", "finite-math-only")))
#define FAST_MATH_BODY
#else
#define FAST_MATH_FUNCTION
#define FAST_MATH_BODY
#endif

/* On x86-64 the default build may only assume SSE2; clones for AVX-512, AVX2 and SSE4.2 (the
 * 64-bit integer compares of the row check), chosen at load time by the CPU, vectorise where it
 * has them (no -march=native: a wheel runs elsewhere). aarch64's baseline already has NEON. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "sse4.2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

/* A select, not fmax(): a compare-and-select is what the vectoriser turns into max instructions. */
#define MAX_OF(a, b) ((a) > (b) ? (a) : (b))
#define MIN_OF(a, b) ((a) < (b) ? (a) : (b))

/* One row's sums and extremes, valid when bad is 0. Counts are kept as doubles in the loop (exact
 * below 2^53) so that every lane is 64 bits wide: mixed lanes do not vectorise on x86. */
typedef struct {
    double gg, tt, gt, dd, ad, g, t, rel;
    double amax, gmax, gmin, tmax, tmin, relmax;
    double nrel, n1, n5;
    uint64_t bad;
} RowSums;

/* |x| as the bits of a float64 (sign cleared): for finite values, ordered as |x| is; NaN and Inf
 * above every finite value. A compare of these is exact whatever the floating-point flags. */
#define ABS_BITS_MASK 0x7FFFFFFFFFFFFFFFULL

/* The state while a chunk is swept: a private copy, written back once (see sweep()). */
typedef struct {
    double sums[N_SUMS];
    int64_t counts[N_COUNTS];
} State;

/* The KL of a finite row, vectorised: the exponentials a block at a time into small buffers (strict
 * arithmetic: the rounding trick below must not be reassociated), then their sums (reassociated).
 * exp_nonpositive is within an ulp of glibc's exp (checked over 2e7 arguments in [-745, 0]), which
 * a loop of calls cannot vectorise; rows holding giants (careful_row) keep libm's. */
#define KL_BLOCK 256
#define LOG2E 1.4426950408889634
#define LN2_HI 6.93147180369123816490e-01 /* fdlibm's split of ln 2: k * LN2_HI is exact */
#define LN2_LO 1.90821492927058770002e-10
#define ROUNDING_SHIFT 6755399441055744.0 /* 1.5 * 2^52: x + it rounds x to an integer, in its low bits */
#define ROUNDING_SHIFT_BITS 0x4338000000000000ULL
/* Below this exp(x) is subnormal: 0 here, which moves a softmax sum of at least 1 by under 1e-307. */
#define EXP_FLOOR -708.0

/* Not trapping math, so that the selects are done as selects (vectorised): that changes no result,
 * only floating-point exception flags, which nothing reads. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_TRAPPING_MATH __attribute__((optimize("no-trapping-math")))
#else
#define NO_TRAPPING_MATH
#endif

NO_TRAPPING_MATH static inline double exp_nonpositive(double x)
{
    double clamped = x < EXP_FLOOR ? EXP_FLOOR : x;
    double shifted = clamped * LOG2E + ROUNDING_SHIFT;
    uint64_t k_bits;
    memcpy(&k_bits, &shifted, sizeof k_bits);
    double k = shifted - ROUNDING_SHIFT;
    double r = (clamped - k * LN2_HI) - k * LN2_LO; /* |r| <= ln2 / 2 */
    /* Taylor to r^13/13!: the first omitted term is under 2^-57 of the result (1/32 of an ulp) */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t scale_bits = (k_bits - ROUNDING_SHIFT_BITS + 1023) << 52; /* 2^k, k >= -1022 */
    double scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return x < EXP_FLOOR ? 0.0 : p * scale;
}

/* A loop of its own, on doubles only (mixed with the float32 loads, the vectoriser gives up). */
VECTOR_CLONES NO_TRAPPING_MATH static void exps_of(const double *restrict logs, Py_ssize_t n,
                                                   double *restrict exps)
{
    for (Py_ssize_t c = 0; c < n; c++)
        exps[c] = exp_nonpositive(logs[c]);
}

VECTOR_CLONES FAST_MATH_FUNCTION static double block_sum(const double *restrict values, Py_ssize_t n)
{
    FAST_MATH_BODY
    double total = 0.0;
    for (Py_ssize_t c = 0; c < n; c++)
        total += values[c];
    return total;
}

VECTOR_CLONES FAST_MATH_FUNCTION static double block_kl(const double *restrict p, const double *restrict log_p,
                                                        const double *restrict log_q, Py_ssize_t n)
{
    FAST_MATH_BODY
    double total = 0.0;
    for (Py_ssize_t c = 0; c < n; c++)
        total += p[c] * (log_p[c] - log_q[c]);
    return total;
}

/* The rounding trick needs arithmetic in double, not in x87's excess precision (32-bit x86):
 * there the finite rows' KL takes libm's exp too. */
#if FLT_EVAL_METHOD == 0
#define FINITE_ROW_KL(SUFFIX) row_kl_fast_##SUFFIX
#else
#define FINITE_ROW_KL(SUFFIX) row_kl_##SUFFIX
#endif

/* An element as a double: float32 and float64 as they are; bfloat16 (its 16 bits, as a uint16) is the
 * upper half of a float32, exactly, so a bf16 chunk is swept as it lies, not widened into a copy first.
 * Macros, not functions: GCC inlines no function into the fast loops, whose optimisation options
 * differ (a call per element, 30 times slower, and no vector loop). */
typedef union {
    uint32_t bits;
    float value;
} Float32Bits;
#define AS_DOUBLE(x) ((double)(x))
#define BF16_VALUE(x) ((double)((Float32Bits){.bits = (uint32_t)(x) << 16}).value)

/* logs[c] = (x[c] - shift) - log_z, in that order (as row_kl rounds); exps[c] its exp, if asked: one
 * per element type (a kernel of two types takes one for each side). */
#define DEFINE_BLOCK_EXP(T, LOAD, NAME)                                                             \
    VECTOR_CLONES static void block_exp_##NAME(const T *restrict x, double shift, double log_z,     \
                                                 Py_ssize_t n, double *restrict logs,               \
                                                 double *restrict exps)                             \
    {                                                                                               \
        for (Py_ssize_t c = 0; c < n; c++)                                                          \
            logs[c] = (LOAD(x[c]) - shift) - log_z;                                                 \
        if (exps)                                                                                   \
            exps_of(logs, n, exps);                                                                 \
    }

#define DEFINE_KERNEL(TG, TT, GV, TV, GX, TX, SUFFIX, LIMIT)                                        \
    /* Every sum and extreme of a row in one vectorised loop, and whether the row holds a NaN, an   \
     * Inf or a value beyond LIMIT (bad: then nothing else here is valid, and the careful loop      \
     * takes the row). That check compares bits, so the fast-math flags cannot touch it. */         \
    VECTOR_CLONES FAST_MATH_FUNCTION static void row_fast_##SUFFIX(                                 \
        const TG *restrict g, const TT *restrict t, Py_ssize_t width, RowSums *out)                 \
    {                                                                                               \
        FAST_MATH_BODY                                                                              \
        double sgg = 0.0, stt = 0.0, sgt = 0.0, sdd = 0.0, sad = 0.0, sg = 0.0, st = 0.0;           \
        double srel = 0.0, amax = 0.0, relmax = 0.0;                                                \
        double gmax = -INFINITY, tmax = -INFINITY, gmin = INFINITY, tmin = INFINITY;                \
        double nrel = 0.0, n1 = 0.0, n5 = 0.0;                                                      \
        const double limit = (double)(LIMIT);                                                       \
        uint64_t limit_bits, bad = 0;                                                               \
        memcpy(&limit_bits, &limit, sizeof limit_bits);                                             \
        for (Py_ssize_t c = 0; c < width; c++) {                                                    \
            double gv = GV(g[c]), tv = TV(t[c]);                                                    \
            uint64_t g_bits, t_bits;                                                                \
            memcpy(&g_bits, &gv, sizeof g_bits);                                                    \
            memcpy(&t_bits, &tv, sizeof t_bits);                                                    \
            bad |= ((g_bits & ABS_BITS_MASK) > limit_bits) | ((t_bits & ABS_BITS_MASK) > limit_bits); \
            double d = tv - gv, ad = fabs(d), ag = fabs(gv);                                        \
            sgg += gv * gv;                                                                         \
            stt += tv * tv;                                                                         \
            sgt += gv * tv;                                                                         \
            sdd += d * d;                                                                           \
            sad += ad;                                                                              \
            sg += gv;                                                                               \
            st += tv;                                                                               \
            amax = MAX_OF(ad, amax);                                                                \
            gmax = MAX_OF(gv, gmax);                                                                \
            gmin = MIN_OF(gv, gmin);                                                                \
            tmax = MAX_OF(tv, tmax);                                                                \
            tmin = MIN_OF(tv, tmin);                                                                \
            /* msprobe's thousandth ratios: eps stands in for a zero golden */                      \
            double ratio = ad / (gv != 0.0 ? ag : REL_FLOOR);                                       \
            /* the relative error counts only above the floor; as 1.0/0.0 and a min() rather than   \
             * a branch or a select of the ratio, which GCC does not vectorise */                   \
            double big = ag > REL_FLOOR ? 1.0 : 0.0;                                                \
            double rel = MIN_OF(ratio, big * DBL_MAX);                                              \
            srel += rel;                                                                            \
            relmax = MAX_OF(rel, relmax);                                                           \
            nrel += big;                                                                            \
            n1 += ratio < 1e-3 ? 1.0 : 0.0;                                                         \
            n5 += ratio < 5e-3 ? 1.0 : 0.0;                                                         \
        }                                                                                           \
        RowSums r = {sgg, stt, sgt, sdd, sad, sg, st, srel, amax, gmax, gmin, tmax, tmin, relmax,   \
                     nrel, n1, n5, bad};                                                            \
        *out = r;                                                                                   \
    }                                                                                               \
                                                                                                    \
    /* The first column whose absolute difference is target (exact compare). */                     \
    static Py_ssize_t first_at_##SUFFIX(const TG *g, const TT *t, Py_ssize_t width, double target)  \
    {                                                                                               \
        for (Py_ssize_t c = 0; c < width; c++)                                                      \
            if (fabs(TV(t[c]) - GV(g[c])) == target)                                                \
                return c;                                                                           \
        return 0;                                                                                   \
    }                                                                                               \
                                                                                                    \
    /* KL(golden || test) of the row's softmax; mg/mt are the row maxima (for stability). */        \
    static double row_kl_##SUFFIX(const TG *g, const TT *t, Py_ssize_t width, double mg, double mt) \
    {                                                                                               \
        double zg = 0.0, zt = 0.0;                                                                  \
        for (Py_ssize_t c = 0; c < width; c++) {                                                    \
            zg += exp(GV(g[c]) - mg);                                                               \
            zt += exp(TV(t[c]) - mt);                                                               \
        }                                                                                           \
        double log_zg = log(zg), log_zt = log(zt), acc = 0.0;                                       \
        for (Py_ssize_t c = 0; c < width; c++) {                                                    \
            double log_p = GV(g[c]) - mg - log_zg;                                                  \
            double log_q = TV(t[c]) - mt - log_zt;                                                  \
            acc += exp(log_p) * (log_p - log_q);                                                    \
        }                                                                                           \
        return acc > 0.0 ? acc : 0.0;                                                               \
    }                                                                                               \
                                                                                                    \
    /* row_kl of a row within +-1e150 (so every shifted value is finite and <= 0), vectorised. */   \
    static double row_kl_fast_##SUFFIX(const TG *g, const TT *t, Py_ssize_t width, double mg, double mt) \
    {                                                                                               \
        double log_p[KL_BLOCK], p[KL_BLOCK], log_q[KL_BLOCK], q[KL_BLOCK]; /* 8 KiB: L1 */          \
        double zg = 0.0, zt = 0.0;                                                                  \
        for (Py_ssize_t start = 0; start < width; start += KL_BLOCK) {                              \
            Py_ssize_t n = width - start < KL_BLOCK ? width - start : KL_BLOCK;                     \
            block_exp_##GX(g + start, mg, 0.0, n, log_p, p);                                        \
            block_exp_##TX(t + start, mt, 0.0, n, log_q, q);                                        \
            zg += block_sum(p, n);                                                                  \
            zt += block_sum(q, n);                                                                  \
        }                                                                                           \
        double log_zg = log(zg), log_zt = log(zt), acc = 0.0;                                       \
        for (Py_ssize_t start = 0; start < width; start += KL_BLOCK) {                              \
            Py_ssize_t n = width - start < KL_BLOCK ? width - start : KL_BLOCK;                     \
            block_exp_##GX(g + start, mg, log_zg, n, log_p, p);                                     \
            block_exp_##TX(t + start, mt, log_zt, n, log_q, NULL);                                  \
            acc += block_kl(p, log_p, log_q, n);                                                    \
        }                                                                                           \
        return acc > 0.0 ? acc : 0.0;                                                               \
    }                                                                                               \
                                                                                                    \
    /* A row holding NaN/Inf/giants, element by element: counts them, skips them, and takes the     \
     * first position of the largest difference as the worst element (fastkernel's _sweep). */      \
    static void careful_row_##SUFFIX(const TG *g, const TT *t, Py_ssize_t width, int64_t offset,    \
                                     int kl, State *s)                                              \
    {                                                                                               \
        double *sums = s->sums;                                                                     \
        int64_t *counts = s->counts;                                                                \
        int row_finite = 1;                                                                         \
        double mg = -INFINITY, mt = -INFINITY;                                                      \
        for (Py_ssize_t c = 0; c < width; c++) {                                                    \
            double gv = GV(g[c]), tv = TV(t[c]);                                                    \
            int g_ok = isfinite(gv), t_ok = isfinite(tv);                                           \
            if (!(g_ok && t_ok)) {                                                                  \
                row_finite = 0;                                                                     \
                if (isnan(gv))                                                                      \
                    counts[C_GNAN]++;                                                               \
                else if (!g_ok)                                                                     \
                    counts[C_GINF]++;                                                               \
                if (isnan(tv))                                                                      \
                    counts[C_TNAN]++;                                                               \
                else if (!t_ok)                                                                     \
                    counts[C_TINF]++;                                                               \
                continue;                                                                           \
            }                                                                                       \
            double d = tv - gv, ad = fabs(d), ag = fabs(gv);                                        \
            counts[C_N]++;                                                                          \
            sums[S_GG] += gv * gv;                                                                  \
            sums[S_TT] += tv * tv;                                                                  \
            sums[S_GT] += gv * tv;                                                                  \
            sums[S_DD] += d * d;                                                                    \
            sums[S_AD] += ad;                                                                       \
            sums[S_G] += gv;                                                                        \
            sums[S_T] += tv;                                                                        \
            if (ad > sums[M_AMAX] || counts[C_WIDX] < 0) {                                          \
                sums[M_AMAX] = ad;                                                                  \
                sums[M_WG] = gv;                                                                    \
                sums[M_WT] = tv;                                                                    \
                counts[C_WIDX] = offset + c;                                                        \
            }                                                                                       \
            sums[M_GMAX] = MAX_OF(gv, sums[M_GMAX]);                                                \
            sums[M_GMIN] = MIN_OF(gv, sums[M_GMIN]);                                                \
            sums[M_TMAX] = MAX_OF(tv, sums[M_TMAX]);                                                \
            sums[M_TMIN] = MIN_OF(tv, sums[M_TMIN]);                                                \
            double ratio = ad / (gv != 0.0 ? ag : REL_FLOOR);                                       \
            if (ag > REL_FLOOR) {                                                                   \
                sums[S_REL] += ratio;                                                               \
                counts[C_REL]++;                                                                    \
                sums[M_RELMAX] = MAX_OF(ratio, sums[M_RELMAX]);                                     \
            }                                                                                       \
            counts[C_1E3] += ratio < 1e-3;                                                          \
            counts[C_5E3] += ratio < 5e-3;                                                          \
            mg = MAX_OF(gv, mg);                                                                    \
            mt = MAX_OF(tv, mt);                                                                    \
        }                                                                                           \
        if (kl && row_finite && width > 0) {                                                        \
            sums[S_KL] += row_kl_##SUFFIX(g, t, width, mg, mt);                                     \
            counts[C_KLROWS]++;                                                                     \
        }                                                                                           \
    }                                                                                               \
                                                                                                    \
    static void sweep_##SUFFIX(const TG *g, const TT *t, Py_ssize_t rows, Py_ssize_t width,         \
                               int64_t offset, int kl, State *s)                                    \
    {                                                                                               \
        double *sums = s->sums;                                                                     \
        int64_t *counts = s->counts;                                                                \
        for (Py_ssize_t r = 0; r < rows; r++) {                                                     \
            const TG *gr = g + r * width;                                                           \
            const TT *tr = t + r * width;                                                           \
            int64_t row_offset = offset + (int64_t)r * width;                                       \
            if (width == 0)                                                                         \
                continue;                                                                           \
            RowSums rs;                                                                             \
            row_fast_##SUFFIX(gr, tr, width, &rs);                                                  \
            if (rs.bad) {                                                                           \
                careful_row_##SUFFIX(gr, tr, width, row_offset, kl, s);                             \
                continue;                                                                           \
            }                                                                                       \
            sums[S_GG] += rs.gg;                                                                    \
            sums[S_TT] += rs.tt;                                                                    \
            sums[S_GT] += rs.gt;                                                                    \
            sums[S_DD] += rs.dd;                                                                    \
            sums[S_AD] += rs.ad;                                                                    \
            sums[S_G] += rs.g;                                                                      \
            sums[S_T] += rs.t;                                                                      \
            sums[S_REL] += rs.rel;                                                                  \
            if (rs.amax > sums[M_AMAX] || counts[C_WIDX] < 0) {                                     \
                Py_ssize_t c = first_at_##SUFFIX(gr, tr, width, rs.amax);                           \
                sums[M_AMAX] = rs.amax;                                                             \
                sums[M_WG] = GV(gr[c]);                                                             \
                sums[M_WT] = TV(tr[c]);                                                             \
                counts[C_WIDX] = row_offset + c;                                                    \
            }                                                                                       \
            sums[M_GMAX] = MAX_OF(rs.gmax, sums[M_GMAX]);                                           \
            sums[M_GMIN] = MIN_OF(rs.gmin, sums[M_GMIN]);                                           \
            sums[M_TMAX] = MAX_OF(rs.tmax, sums[M_TMAX]);                                           \
            sums[M_TMIN] = MIN_OF(rs.tmin, sums[M_TMIN]);                                           \
            sums[M_RELMAX] = MAX_OF(rs.relmax, sums[M_RELMAX]);                                     \
            counts[C_N] += width;                                                                   \
            counts[C_REL] += (int64_t)rs.nrel;                                                      \
            counts[C_1E3] += (int64_t)rs.n1;                                                        \
            counts[C_5E3] += (int64_t)rs.n5;                                                        \
            if (kl) {                                                                               \
                sums[S_KL] += FINITE_ROW_KL(SUFFIX)(gr, tr, width, rs.gmax, rs.tmax);               \
                counts[C_KLROWS]++;                                                                 \
            }                                                                                       \
        }                                                                                           \
    }

DEFINE_BLOCK_EXP(float, AS_DOUBLE, f32)
DEFINE_BLOCK_EXP(double, AS_DOUBLE, f64)
DEFINE_BLOCK_EXP(uint16_t, BF16_VALUE, bf16)

/* float32 and bfloat16 hold no value beyond 1e150, only NaN/Inf: FLT_MAX is their limit. */
DEFINE_KERNEL(float, float, AS_DOUBLE, AS_DOUBLE, f32, f32, f32, FLT_MAX)
DEFINE_KERNEL(double, double, AS_DOUBLE, AS_DOUBLE, f64, f64, f64, HUGE_ABS)
DEFINE_KERNEL(float, uint16_t, AS_DOUBLE, BF16_VALUE, f32, bf16, f32_bf16, FLT_MAX)
DEFINE_KERNEL(uint16_t, uint16_t, BF16_VALUE, BF16_VALUE, bf16, bf16, bf16, FLT_MAX)

/* The buffer's single type code with native byte order and size ('f', 'd', 'l', 'q'), or 0. */
static char type_code(const Py_buffer *view)
{
    const char *format = view->format ? view->format : "B";
    if (format[0] == '@' || format[0] == '=' || format[0] == (PY_LITTLE_ENDIAN ? '<' : '>'))
        format++;
    return (format[0] && !format[1]) ? format[0] : 0;
}

/* Take obj's buffer as a C-contiguous array; on failure a TypeError naming the argument. */
static int take_buffer(PyObject *obj, Py_buffer *view, const char *function, const char *name,
                       const char *expected)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0)
        return 0;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_Format(PyExc_TypeError, "%s(): %s must be %s (%S)", function, name, expected, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return -1;
}

static const char CHUNK_EXPECTED[] = "a C-contiguous 2-D array";

/* The chunk's element type: 'f' float32, 'd' float64, 'b' bfloat16 (uint16 bits, where the caller
 * says a uint16 chunk holds bfloat16), or 0 with a TypeError. */
static char chunk_type(const Py_buffer *view, const char *name, const char *function, int bf16_bits)
{
    char code = type_code(view);
    char found = (code == 'f' && view->itemsize == 4)   ? 'f'
                 : (code == 'd' && view->itemsize == 8) ? 'd'
                 : (bf16_bits && code == 'H' && view->itemsize == 2) ? 'b'
                                                                      : 0;
    if (!found) {
        PyErr_Format(PyExc_TypeError, "%s(): %s must be %s, not format '%s'", function, name,
                     bf16_bits ? "float32, or uint16 holding bfloat16" : "float32 or float64",
                     view->format ? view->format : "B");
        return 0;
    }
    if (view->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s(): %s must be 2-D, not %d-D", function, name, view->ndim);
        return 0;
    }
    return found;
}

static int check_state(const Py_buffer *view, const char *function, const char *name, int is_sums)
{
    char code = type_code(view);
    int ok_type = is_sums ? (code == 'd' && view->itemsize == 8)
                          : ((code == 'l' || code == 'q') && view->itemsize == 8);
    Py_ssize_t length = is_sums ? N_SUMS : N_COUNTS;
    if (!ok_type) {
        PyErr_Format(PyExc_TypeError, "%s(): %s must be %s, not format '%s'", function, name,
                     is_sums ? "float64" : "int64", view->format ? view->format : "B");
        return -1;
    }
    if (view->readonly) {
        PyErr_Format(PyExc_TypeError, "%s(): %s must be writable", function, name);
        return -1;
    }
    if (view->ndim != 1 || view->shape[0] != length) {
        PyErr_Format(PyExc_ValueError, "%s(): %s must be 1-D of length %zd", function, name, length);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(sweep_doc,
             "sweep(g, t, offset, kl, sums, counts)\n--\n\n"
             "Add one chunk's metric sums to the state (sums: float64[N_SUMS], counts: int64[N_COUNTS],\n"
             "updated in place). g and t: C-contiguous 2-D arrays of one shape and dtype, float32 or\n"
             "float64; offset: flat index of the chunk's first element; kl: KL per row too.");

PyDoc_STRVAR(sweep_bf16_doc,
             "sweep_bf16(g, t, offset, kl, sums, counts)\n--\n\n"
             "sweep() of a bfloat16 test chunk as it lies: t is uint16 holding bfloat16 bits, g float32 or\n"
             "uint16 holding bfloat16 bits; the sums are sweep()'s of both widened to float32.");

/* sweep() and sweep_bf16(): the arguments checked, the chunk swept with the GIL released. */
static PyObject *run_sweep(PyObject *args, int bf16)
{
    const char *function = bf16 ? "sweep_bf16" : "sweep";
    PyObject *g_obj, *t_obj, *sums_obj, *counts_obj;
    long long offset;
    int kl;
    if (!PyArg_ParseTuple(args, bf16 ? "OOLpOO:sweep_bf16" : "OOLpOO:sweep", &g_obj, &t_obj, &offset, &kl,
                          &sums_obj, &counts_obj))
        return NULL;
    Py_buffer g = {0}, t = {0}, sums = {0}, counts = {0};
    PyObject *result = NULL;
    char g_type = 0, t_type = 0;
    if (take_buffer(g_obj, &g, function, "g", CHUNK_EXPECTED) || take_buffer(t_obj, &t, function, "t", CHUNK_EXPECTED)
        || take_buffer(sums_obj, &sums, function, "sums", "a contiguous float64 array")
        || take_buffer(counts_obj, &counts, function, "counts", "a contiguous int64 array"))
        goto done;
    if (!(g_type = chunk_type(&g, "g", function, bf16)) || !(t_type = chunk_type(&t, "t", function, bf16))
        || check_state(&sums, function, "sums", 1) || check_state(&counts, function, "counts", 0))
        goto done;
    if (bf16 ? (t_type != 'b' || g_type == 'd') : g_type != t_type) {
        PyErr_Format(PyExc_TypeError, "%s(): %s", function,
                     bf16 ? "t must be uint16 holding bfloat16, g float32 or bfloat16"
                          : "g and t must have the same dtype (widen first)");
        goto done;
    }
    if (g.shape[0] != t.shape[0] || g.shape[1] != t.shape[1]) {
        PyErr_Format(PyExc_ValueError, "%s(): g and t must have the same shape, not (%zd, %zd) and (%zd, %zd)",
                     function, g.shape[0], g.shape[1], t.shape[0], t.shape[1]);
        goto done;
    }
    State state;
    memcpy(state.sums, sums.buf, sizeof state.sums);
    memcpy(state.counts, counts.buf, sizeof state.counts);
    Py_ssize_t rows = g.shape[0], width = g.shape[1];
    /* the state is a private copy and the buffers stay held: other threads may run meanwhile */
    Py_BEGIN_ALLOW_THREADS
    if (g_type == 'f' && t_type == 'f')
        sweep_f32((const float *)g.buf, (const float *)t.buf, rows, width, (int64_t)offset, kl, &state);
    else if (g_type == 'd')
        sweep_f64((const double *)g.buf, (const double *)t.buf, rows, width, (int64_t)offset, kl, &state);
    else if (g_type == 'f')
        sweep_f32_bf16((const float *)g.buf, (const uint16_t *)t.buf, rows, width, (int64_t)offset, kl, &state);
    else
        sweep_bf16((const uint16_t *)g.buf, (const uint16_t *)t.buf, rows, width, (int64_t)offset, kl, &state);
    Py_END_ALLOW_THREADS
    memcpy(sums.buf, state.sums, sizeof state.sums);
    memcpy(counts.buf, state.counts, sizeof state.counts);
    result = Py_NewRef(Py_None);
done:
    if (g.obj)
        PyBuffer_Release(&g);
    if (t.obj)
        PyBuffer_Release(&t);
    if (sums.obj)
        PyBuffer_Release(&sums);
    if (counts.obj)
        PyBuffer_Release(&counts);
    return result;
}

static PyObject *sweep(PyObject *Py_UNUSED(module), PyObject *args)
{
    return run_sweep(args, 0);
}

static PyObject *sweep_bf16_chunk(PyObject *Py_UNUSED(module), PyObject *args)
{
    return run_sweep(args, 1);
}

static PyMethodDef methods[] = {
    {"sweep", sweep, METH_VARARGS, sweep_doc},
    {"sweep_bf16", sweep_bf16_chunk, METH_VARARGS, sweep_bf16_doc},
    {NULL, NULL, 0, NULL},
};

static int add_layout(PyObject *module)
{
    static const struct {
        const char *name;
        int value;
    } layout[] = {
        {"S_GG", S_GG},       {"S_TT", S_TT},         {"S_GT", S_GT},         {"S_DD", S_DD},
        {"S_AD", S_AD},       {"S_G", S_G},           {"S_T", S_T},           {"S_REL", S_REL},
        {"S_KL", S_KL},       {"M_AMAX", M_AMAX},     {"M_GMAX", M_GMAX},     {"M_GMIN", M_GMIN},
        {"M_TMAX", M_TMAX},   {"M_TMIN", M_TMIN},     {"M_RELMAX", M_RELMAX}, {"M_WG", M_WG},
        {"M_WT", M_WT},       {"N_SUMS", N_SUMS},     {"C_N", C_N},           {"C_REL", C_REL},
        {"C_1E3", C_1E3},     {"C_5E3", C_5E3},       {"C_KLROWS", C_KLROWS}, {"C_GNAN", C_GNAN},
        {"C_GINF", C_GINF},   {"C_TNAN", C_TNAN},     {"C_TINF", C_TINF},     {"C_WIDX", C_WIDX},
        {"N_COUNTS", N_COUNTS},
    };
    for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++)
        if (PyModule_AddIntConstant(module, layout[i].name, layout[i].value) < 0)
            return -1;
    const struct {
        const char *name;
        double value;
    } limits[] = {{"REL_FLOOR", REL_FLOOR}, {"HUGE", HUGE_ABS}};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        PyObject *value = PyFloat_FromDouble(limits[i].value);
        int failed = PyModule_AddObjectRef(module, limits[i].name, value);
        Py_XDECREF(value);
        if (failed)
            return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, add_layout},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_ckernel",
    "The metric kernel compiled from C (see tui_acc.metrics.fastkernel for how it is chosen).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__ckernel(void)
{
    return PyModuleDef_Init(&module_def);
}
