"""Softmax attention of requests over their gathered keys and values, float64, the arithmetic every
fused attention reference shares (torch_npu's in ``npu_attention.py``, ATB's in ``atb_attention.py``):
per request and query head, ``softmax(scale * q K^T)`` over the scores a window keeps, times V; GQA
(query head h reads kv head ``h // (N / N_kv)``); paged caches read through a block table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Precision, ReplayImpossible

Window = Callable[[int, int, int], np.ndarray]  # (request, q_len, kv_len) -> [q_len, kv_len] kept


@dataclass
class Requests:
    """Queries as rows of ``[T, N, D]`` with each request's first row, query length and kv length."""

    queries: np.ndarray
    starts: list[int]
    q_lengths: list[int]
    kv_lengths: list[int]


def kv_len_max(requests: Requests) -> int:
    """The longest kv length: the longest sum behind an output element."""
    return max(requests.kv_lengths, default=1)


def paged_tokens(
    cache: np.ndarray, table: np.ndarray, request: int, length: int, block: int, kv_heads: int
) -> np.ndarray:
    """Request ``request``'s first ``length`` tokens of a paged cache as ``[length, N_kv, D]``."""
    if cache.ndim == 3:  # [blocks, block_size, N_kv * D]
        if cache.shape[1] != block or cache.shape[2] % kv_heads:
            raise ReplayImpossible(f"cache {list(cache.shape)} is not [blocks, {block}, {kv_heads} x D]")
        tokens = cache.reshape(cache.shape[0], block, kv_heads, -1)
    elif cache.ndim == 4 and cache.shape[1:3] == (kv_heads, block):  # [blocks, N_kv, block_size, D]
        tokens = cache.transpose(0, 2, 1, 3)
    elif cache.ndim == 4 and cache.shape[1:3] == (block, kv_heads):  # vllm-ascend's own view
        tokens = cache
    else:
        raise ReplayImpossible(
            f"cache {list(cache.shape)}: not a paged layout of block {block}, {kv_heads} kv heads"
        )
    needed = -(-length // block)
    if table.ndim != 2 or request >= table.shape[0] or needed > table.shape[1]:
        raise ReplayImpossible(
            f"block_table {list(table.shape)} has no {needed} blocks for request {request}"
        )
    blocks = table[request, :needed].astype(np.int64)
    if blocks.size and (blocks.min() < 0 or blocks.max() >= cache.shape[0]):
        raise ReplayImpossible(
            f"block_table of request {request} names a block outside the cache's {cache.shape[0]}"
        )
    return tokens[blocks].reshape(needed * block, *tokens.shape[2:])[:length]


def causal(q_len: int, kv_len: int) -> np.ndarray:
    """``[q_len, kv_len]``: causal from the bottom right, ``j <= i + kv_len - q_len`` (a request's new
    tokens after its cached ones)."""
    return np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + (kv_len - q_len)


def masked(mask: np.ndarray, request: int, batch: int, q_len: int, kv_len: int) -> np.ndarray:
    """``[q_len, kv_len]``: True where the mask tensor leaves a score out (not 0), from the request's
    own mask where there is one per request, else the one shared mask."""
    rows = mask.reshape(-1, *mask.shape[-2:]) if mask.ndim >= 2 else mask.reshape(1, 1, -1)
    chosen = rows[request] if rows.shape[0] == batch else rows[0]
    if chosen.shape[0] < q_len or chosen.shape[1] < kv_len:
        raise ReplayImpossible(f"the mask {list(mask.shape)} does not cover {q_len} x {kv_len}")
    return np.asarray(chosen[:q_len, :kv_len]) != 0


@dataclass(frozen=True)
class SparseWindow:
    """Which scores of a request a fused attention computes, by torch_npu's ``sparse_mode``: 0 the
    mask where given, within ``pre`` / ``after`` tokens of the diagonal from the top left; 1 the
    mask; 2 causal from the top left; 3 causal from the bottom right; 4 a band of ``pre`` / ``after``
    tokens around the bottom-right diagonal. One query per request: modes 2-4 do not apply."""

    mask: np.ndarray | None
    mode: int
    pre: int
    after: int
    batch: int
    single_query: bool

    def allowed(self, request: int, q_len: int, kv_len: int) -> np.ndarray:
        """``[q_len, kv_len]``: True where the score is kept."""
        i = np.arange(q_len)[:, None]
        j = np.arange(kv_len)[None, :]
        shift = kv_len - q_len  # the bottom-right origin of modes 3 and 4
        if self.single_query and self.mode >= 2:
            return np.ones((q_len, kv_len), dtype=bool)
        if self.mode == 2:
            return j <= i
        if self.mode == 3:
            return causal(q_len, kv_len)
        if self.mode == 4:
            return (j - (i + shift) >= -self.pre) & (j - (i + shift) <= self.after)
        if self.mask is None:
            return np.ones((q_len, kv_len), dtype=bool)  # mode 0 without a mask: everything
        kept = ~masked(self.mask, request, self.batch, q_len, kv_len)
        if self.mode == 0 and not self.single_query:
            kept &= (j - i >= -self.pre) & (j - i <= self.after)
        return kept


def attend(
    requests: Requests,
    keys: list[np.ndarray],
    values: list[np.ndarray],
    window: Window,
    scale: float,
    kv_heads: int,
    need: np.ndarray,
    precision: Precision,
    rope: tuple[np.ndarray, list[np.ndarray]] | None = None,
) -> tuple[np.ndarray, float]:
    """``[T, N, Dv]`` outputs (zeros where ``need`` [T, N] is False), and ``sum p^2 v^2`` over them
    (``roundings_of``). ``keys``/``values``: each request's ``[kv_len, N_kv, D]``; ``rope``: MLA's
    query rope rows and each request's key rope, whose dot products add to the scores."""
    heads = requests.queries.shape[1]
    out = np.zeros((*requests.queries.shape[:2], values[0].shape[-1] if values else 0), precision)
    rope_queries, rope_keys = rope if rope is not None else (None, None)
    group = heads // kv_heads
    probability_terms = 0.0
    for b, start in enumerate(requests.starts):
        q_len, kv_len = requests.q_lengths[b], requests.kv_lengths[b]
        if q_len == 0:
            continue
        allowed = window(b, q_len, kv_len)
        for kv_head in range(kv_heads):
            heads_of = slice(kv_head * group, (kv_head + 1) * group)
            # the group's query heads at once: rows (position, head) of [q_len * group, D]
            wanted = np.flatnonzero(need[start : start + q_len, heads_of].reshape(-1))
            if not wanted.size:
                continue
            positions = wanted // group
            q = requests.queries[start : start + q_len, heads_of].reshape(q_len * group, -1)[wanted]
            scores = q @ keys[b][:, kv_head].T
            if rope_queries is not None and rope_keys is not None:
                q_rope = rope_queries[start : start + q_len, heads_of].reshape(q_len * group, -1)[wanted]
                scores = scores + q_rope @ rope_keys[b][:, kv_head].T
            kept = allowed[positions]
            empty = ~kept.any(axis=1)
            scores = np.where(kept, scale * scores, -np.inf)
            scores[empty] = 0.0  # a row with nothing kept: zeros (the kernel's row-invalid fix)
            probabilities = maths.softmax(scores, axis=1)
            probabilities[empty] = 0.0
            value = values[b][:, kv_head]
            found = probabilities @ value
            rows = out[start : start + q_len, heads_of].reshape(q_len * group, -1)
            rows[wanted] = found
            out[start : start + q_len, heads_of] = rows.reshape(q_len, group, -1)
            probability_terms += float(np.sum((probabilities**2) @ (value**2)))
    return out, probability_terms


def roundings_of(out: np.ndarray, probability_terms: float) -> int:
    """How many roundings at the inputs' dtype a fused kernel's output carries: its own, and the
    probabilities', rounded to the inputs' dtype before the second matmul (the flash pipeline), an
    error of about ``u * sqrt(sum p^2 v^2)`` per element against ``||out||``."""
    size = float(np.linalg.norm(out))
    spread = math.sqrt(probability_terms) / size if size > 0 else 1.0
    return 1 + math.ceil(spread**2)
