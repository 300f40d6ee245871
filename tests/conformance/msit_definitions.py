"""msit llm compare's metric definitions, written from formats.md §4.4 (not from our kernels).

Used to check two things: that we read the reference tensors exactly as msit did (this
reproduces msit's CSV), and that where our definitions differ from msit's, they differ only
in the documented way.
"""

from __future__ import annotations

import numpy as np

EPS32 = np.float32(1.1920929e-07)


def msit_metrics(golden: np.ndarray, test: np.ndarray) -> dict[str, float]:
    g = golden.reshape(-1).astype(np.float32)
    m = test.reshape(-1).astype(np.float32)
    n = g.size
    mask = np.abs(g) > EPS32
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mask, np.abs(m / g - np.float32(1)), np.float32(0)).astype(np.float32)
    abs_err = np.where(mask, np.abs(m - g), np.float32(0)).astype(np.float32)
    g64, m64 = g.astype(np.float64), m.astype(np.float64)
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


def whole_tensor_kl64(golden: np.ndarray, test: np.ndarray) -> float:
    """KL over one softmax of the whole flattened tensor, in float64 (msit's shape, exact arithmetic)."""
    g = golden.reshape(-1).astype(np.float64)
    m = test.reshape(-1).astype(np.float64)
    log_p = g - g.max() - np.log(np.exp(g - g.max()).sum())
    log_q = m - m.max() - np.log(np.exp(m - m.max()).sum())
    return max(0.0, float((np.exp(log_p) * (log_p - log_q)).sum()))
