"""The last row's top-1 and top-k overlap (for logits, the token each side would pick), a chunk at a time."""

from __future__ import annotations

import numpy as np

from tui_acc.dumps.dtypes import widened

TOP_K = 5


def top1(
    golden: np.ndarray, test: np.ndarray, width: int, chunk: int
) -> dict[str, int | float | bool | None]:
    """The last row's argmax (for logits, the token each side would pick) and top-k overlap.

    ``chunk`` elements at a time, without a float64 copy of the row (a row can be a 1-D tensor of 50M
    values); the log-prob gap needs only the two logits, as the softmax's normaliser cancels.
    """
    if not golden.size or not width:
        return NO_TOP
    g_last = golden.reshape(-1, width)[-1]
    t_last = test.reshape(-1, width)[-1]
    g_top, t_top = _top_k(g_last, chunk), _top_k(t_last, chunk)
    if g_top is None or t_top is None:
        return NO_TOP
    k = len(g_top)
    g1, t1 = g_top[0], t_top[0]
    chosen = widened(g_last[[g1, t1]]).astype(np.float64)
    return {
        "golden_top1": g1,
        "test_top1": t1,
        "topk_overlap": len(set(g_top) & set(t_top)) / k,
        # how much less likely the golden found the test's pick (0 when they agree):
        # log p(g1) - log p(t1) = logit(g1) - logit(t1)
        "top1_logprob_gap": float(chosen[0]) - float(chosen[1]),
        "top1_mutual": g1 in t_top and t1 in g_top,
    }


def _top_k(row: np.ndarray, chunk_elements: int) -> list[int] | None:
    """Indices of the row's TOP_K largest values, best first, equal values by position; None when
    the row holds NaN/Inf.

    A chunk at a time (a row can be a 1-D tensor of 50M values): each chunk's top k are
    candidates, and the top k of the candidates is the answer.
    """
    k = min(TOP_K, row.size)
    values, indices = [], []
    for start in range(0, row.size, chunk_elements):
        chunk = widened(row[start : start + chunk_elements])
        if not bool(np.isfinite(chunk).all()):
            return None
        best = _chunk_top_k(chunk, k)
        values.append(chunk[best].astype(np.float64))
        indices.append(best + start)
    candidates, positions = np.concatenate(values), np.concatenate(indices)
    order = np.lexsort((positions, -candidates))[:k]
    return [int(i) for i in positions[order]]


def _chunk_top_k(chunk: np.ndarray, k: int) -> np.ndarray:
    """Positions of the chunk's k largest values, best first (of equal ones, the first): k passes of
    ``argmax``, each a vectorised scan, cheaper than any partition for the few k we keep."""
    if chunk.size <= k:
        return np.argsort(-chunk, kind="stable")
    rest = chunk.copy()
    best = np.empty(k, dtype=np.int64)
    for rank in range(k):
        best[rank] = position = int(rest.argmax())
        rest[position] = -np.inf  # the row is finite (checked first): -inf is never a value in it
    return best


NO_TOP: dict[str, int | float | bool | None] = {
    "golden_top1": None,
    "test_top1": None,
    "topk_overlap": None,
    "top1_logprob_gap": None,
    "top1_mutual": None,
}
