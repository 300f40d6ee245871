"""msit llm compare's metric definitions, written from docs/formats.md §4.4 (not from our kernels).

Used to check two things: that we read the reference tensors exactly as msit did (this
reproduces msit's CSV), and that where our definitions differ from msit's, they differ only
in the documented way. ``kl_rounding_bound`` says how far msit's fp32 KL may be from the exact
one (tests/conformance/rounding.py holds the other rounding bounds).
"""

from __future__ import annotations

import math

import numpy as np

from tests.conformance import rounding
from tests.conformance.rounding import any_order_depth, first_order

EPS32 = np.float32(1.1920929e-07)

# torch's CPU softmax and log_softmax add up exp(x - max) in a vectorised linear scan
# (vec::map_reduce_all): each lane of a Vectorized<float> (8 lanes at 256 bits, 16 at 512) adds
# every 8th (16th) element in turn, a partial last vector is merged in once, and the lanes are then
# combined pairwise (3 or 4 levels).
TORCH_SOFTMAX_LANES = 8


def torch_softmax_depth(n: int) -> int:
    """The most additions one term of torch's CPU softmax sum over n elements passes through.

    ceil(n / lanes) in its lane plus log2(lanes) combining them; 8 lanes (the narrowest ATen fp32
    vector) with 4 combining levels (the widest) covers every CPU build.
    """
    return math.ceil(n / TORCH_SOFTMAX_LANES) + 4


def msit_elementwise(golden: np.ndarray, test: np.ndarray) -> dict[str, np.ndarray]:
    """msit's per-element terms in fp32 (docs/formats.md §4.4), flattened; 0 where |golden| <= eps32.

    ``ratio`` is m/g itself (its fp32 rounding is the largest error in ``rel`` = |m/g - 1|). Each
    is one or two correctly rounded fp32 operations, so they are the same on every CPU.
    """
    g = golden.reshape(-1).astype(np.float32)
    m = test.reshape(-1).astype(np.float32)
    mask = np.abs(g) > EPS32
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mask, m / g, np.float32(0)).astype(np.float32)
        rel = np.where(mask, np.abs(m / g - np.float32(1)), np.float32(0)).astype(np.float32)
    abs_err = np.where(mask, np.abs(m - g), np.float32(0)).astype(np.float32)
    return {"mask": mask, "ratio": ratio, "rel": rel, "abs_err": abs_err}


def msit_metrics(golden: np.ndarray, test: np.ndarray) -> dict[str, float]:
    """msit's CSV metric columns: fp32 elementwise terms as msit's, sums and ratios in float64."""
    terms = msit_elementwise(golden, test)
    rel, abs_err = terms["rel"], terms["abs_err"]
    g64 = golden.reshape(-1).astype(np.float32).astype(np.float64)
    m64 = test.reshape(-1).astype(np.float32).astype(np.float64)
    n = g64.size
    cosine = float(g64 @ m64 / max(np.linalg.norm(g64) * np.linalg.norm(m64), 1e-8))
    red = 0.0 if np.linalg.norm(g64) <= EPS32 else float(np.sqrt(((m64 - g64) ** 2).sum() / (g64**2).sum()))
    return {
        "cosine_similarity": round(cosine, 10),
        "max_relative_error": float(rel.max()),
        "mean_relative_error": float(rel.sum(dtype=np.float64) / n),
        "max_absolute_error": float(abs_err.max()),
        "mean_absolute_error": float(abs_err.sum(dtype=np.float64) / n),
        "relative_euclidean_distance": red,
    }


def kl_rounding_bound(golden: np.ndarray, test: np.ndarray, eps: float, depth: int | None = None) -> float:
    """How far KL(softmax(g) || softmax(t)) over the whole flattened tensor, computed in eps
    arithmetic the way msit and torch do, may lie from its exact value (first order in eps).

    The computation: a_i = x_i - max x; S = sum_j exp(a_j) (a sum whose terms pass through at most
    ``depth`` additions: ``torch_softmax_depth(n)`` for torch's fp32 kernel; any order if None);
    log q_i = a_i - log S (log_softmax of the test); p_i = exp(a_i) / S (softmax of the golden), whose
    log kl_div takes again; KL = sum_i p_i (log p_i - log q_i), summed in any order.

    With u = eps/2, r = p or q, H_r = sum_i r_i |log r_i| and |a_i| <= |log r_i| (since log S >= 0):

    * exp(a_i) carries u |a_i| from the subtraction of the max and eps of its own, so S is off by
      u H_r + eps + depth u (relative), and log S by that plus eps log n;
    * |log q_i error| <= u (2 |log q_i| + H_q + depth) + eps (1 + log n): the subtraction a_i - log S
      adds u |log q_i|. This is the "few eps times |log p|" that makes an fp32 KL below ~1e-6 noise:
      every log carries an error proportional to its magnitude, and KL is a small difference of them;
    * p_i is off by u (|log p_i| + H_p + depth + 2) + 2 eps (relative; the division adds 2u), and
      its log by that plus eps |log p_i|;
    * term i, p_i (log p_i - log q_i), is off by p_i (|log p_i error| + |log q_i error|), plus the
      error of p_i times |log p_i - log q_i|, plus u p_i (|log p_i| + |log q_i|) for the two products;
    * the final sum adds (n - 1) u sum_i |p_i (log p_i - log q_i)|.

    Summing with sum_i p_i = 1, D = sum_i p_i |log p_i - log q_i| and m = max_i |log p_i| gives the
    bound below. The depth term dominates for large n: with 8-lane sums and n = 1000 logits it is
    129 u per side. Clamping at 0, as msit does, only moves a value towards the exact KL >= 0.
    The exact p and q are stood in for by float64, whose own error is of order eps64.
    """
    g = golden.reshape(-1).astype(np.float64)
    t = test.reshape(-1).astype(np.float64)
    n = g.size
    depth = any_order_depth(n) if depth is None else depth
    first_order(max(depth, n), eps)
    log_p = g - g.max() - np.log(np.exp(g - g.max()).sum())
    log_q = t - t.max() - np.log(np.exp(t - t.max()).sum())
    p, q = np.exp(log_p), np.exp(log_q)
    lp, lq = np.abs(log_p), np.abs(log_q)
    h_p, h_q = float((p * lp).sum()), float((q * lq).sum())
    p_lq = float((p * lq).sum())
    d = float((p * np.abs(log_p - log_q)).sum())
    u = eps / 2
    golden_logs = u * (4 * h_p + depth + 2) + 2 * eps  # sum_i p_i |log p_i error| (softmax, then log)
    test_logs = u * (2 * p_lq + h_q + depth) + eps * (1 + math.log(n))  # sum_i p_i |log q_i error|
    products = u * (h_p + p_lq)  # p_i log p_i and p_i log q_i, each rounded
    p_error = u * (float(lp.max()) + h_p + depth + 2) + 2 * eps  # the largest relative error of a p_i
    differences = u * d  # log p_i - log q_i, rounded
    final_sum = any_order_depth(n) * u * d
    return golden_logs + test_logs + products + p_error * d + differences + final_sum


def whole_tensor_kl64(golden: np.ndarray, test: np.ndarray) -> float:
    """KL over one softmax of the whole flattened tensor, in float64 (msit's shape, exact arithmetic)."""
    g = golden.reshape(-1).astype(np.float64)
    m = test.reshape(-1).astype(np.float64)
    log_p = g - g.max() - np.log(np.exp(g - g.max()).sum())
    log_q = m - m.max() - np.log(np.exp(m - m.max()).sum())
    return max(0.0, float((np.exp(log_p) * (log_p - log_q)).sum()))


def assert_cosine_and_distance_agree(mine: dict[str, object], row: dict[str, str], key: object) -> None:
    """Our row against a row of msit's compare CSV: cosine and relative Euclidean distance.

    Cosine has one definition, in float64 on both sides (any summation order), and msit rounds it to
    10 decimals; the relative Euclidean distance is ours in float64 and msit's in fp32.
    """
    n = int(mine["numel"])  # type: ignore[call-overload]
    cosine = float(mine["cosine"])  # type: ignore[arg-type]
    cosine_apart = rounding.rounded_from(10, 2 * rounding.cosine_bound(n, rounding.EPS64))
    assert abs(cosine - float(row["cosine_similarity"])) <= cosine_apart, key
    red = float(row["relative_euclidean_distance"])
    bound = red * (
        rounding.relative_euclidean_bound(n, rounding.EPS32)
        + rounding.relative_euclidean_bound(n, rounding.EPS64)
    )
    assert abs(float(mine["rel_euclidean"]) - red) <= bound, key  # type: ignore[arg-type]
