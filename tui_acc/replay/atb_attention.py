"""ATB's attention, rope and KV-cache operations replayed, from ATB's ``include/atb/infer_op_params.h``
(parameters and their defaults) and the operations' documented intensors (docs/replay.md names each
fact's source). Parameters are read from ``op_param.json``; a default used is said.

- ``PagedAttentionOperation`` (decode): intensors query ``[tokens, N, D]``, key and value caches
  (``[blocks, block_size, N_kv, D]``, or NZ ``[blocks, N_kv * D / 16, block_size, 16]``),
  ``blockTables [tokens, blocks]``, ``contextLens [tokens]``: token i attends to the first
  ``contextLens[i]`` cached tokens of its own table row; ``qkScale`` scales the scores.
- ``SelfAttentionOperation`` with ``calcType`` PA_ENCODER (prefill): q, k, v ``[tokens, N * D]`` (or
  ``[tokens, N, D]``), the mask where ``maskType`` says one is given, then ``seqLen [batch]``: each
  request's tokens attend to its own, ``(q * qScale) k^T * qkScale``.
- ``RopeOperation``: q ``[tokens, Nq * D]``, k, cos and sin ``[tokens, D]``, seqlen: the head dim is
  the width of cos (ATB's own kernel test, ``test_rope.py``), each head rotated whole by
  ``rotaryCoeff`` c: in each of the c/2 segments of width 2r
  (``r = D / c``) the rotation pairs ``cat(-x[r:2r], x[0:r])``; ``x * cos + rotate(x) * sin``
  (c = 2: halves, NeoX; c = D: neighbouring pairs, GPT-J). Its first outtensor (q) is compared.
- ``ReshapeAndCacheOperation``: the rows written at ``slotMapping``, read back from its outtensors
  (the caches after it ran; ``npu_cache.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tui_acc.replay.attention import Requests, attend, causal, masked, roundings_of
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_cache import written_rows

# infer_op_params.h's defaults where op_param.json leaves a field out
DEFAULT_ROTARY_COEFF = 4


def _param(call: Call, name: str, default: Any, notes: list[str] | None = None) -> Any:
    value = call.keyword.get(name)
    if value is None:
        if notes is not None:
            notes.append(f"{name} not in op_param.json: ATB's default {default!r}")
        return default
    return value


def _refuse_unless(call: Call, allowed: dict[str, tuple[Any, ...]]) -> None:
    """Parameters whose other values change the arithmetic in ways not replayed here: refused by name."""
    for name, values in allowed.items():
        value = call.keyword.get(name)
        if value is not None and value not in values:
            raise ReplayImpossible(f"{name} {value!r}: not replayed here")


def _heads(call: Call, query: np.ndarray, notes: list[str]) -> tuple[int, int]:
    heads = int(_param(call, "headNum", query.shape[1] if query.ndim == 3 else 0, notes))
    if heads <= 0:
        raise ReplayImpossible("headNum not in op_param.json and the query's shape does not show it")
    kv_heads = int(call.keyword.get("kvHeadNum") or heads)
    if heads % kv_heads:
        raise ReplayImpossible(f"{heads} query heads do not split into groups of {kv_heads} kv heads")
    return heads, kv_heads


def _rows(tensor: np.ndarray, heads: int, what: str) -> np.ndarray:
    """``[tokens, N, D]`` from ``[tokens, N, D]`` or ``[tokens, N * D]``."""
    if tensor.ndim == 3:
        return tensor
    if tensor.ndim != 2 or tensor.shape[1] % heads:
        raise ReplayImpossible(f"{what} {list(tensor.shape)} is not [tokens, {heads} x D]")
    return tensor.reshape(tensor.shape[0], heads, -1)


def _all_rows(call: Call, tokens: int, heads: int) -> np.ndarray:
    need = np.zeros((tokens, heads), dtype=bool)
    if call.sample is None:
        need[:] = True
    else:  # output rows are tokens of N * D, or (token, head) rows of D
        rows = call.sample.rows
        width_is_heads = len(call.output_shape) == 3
        if width_is_heads:
            need[rows // heads, rows % heads] = True
        else:
            need[rows[rows < tokens]] = True
    return need


def _replayed(call: Call, out: np.ndarray, terms: float, reduction: int, notes: list[str]) -> Replayed:
    """The [tokens, N, Dv] result shaped as the dumped output, a sample's rows only."""
    roundings = roundings_of(out, terms)
    width = call.output_shape[-1] if call.output_shape else out.shape[-1]
    table = out.reshape(-1, width)
    if call.sample is not None:
        return Replayed(
            table[call.sample.rows], reduction, tuple(notes), rows=call.sample.rows, roundings=roundings
        )
    return Replayed(table, reduction, tuple(notes), roundings=roundings)


def paged_attention(call: Call) -> Replayed:
    """``PagedAttentionOperation`` (no mask, unquantised, one query per token)."""
    _refuse_unless(
        call,
        {
            "maskType": (0, "MASK_TYPE_UNDEFINED"),
            "quantType": (0, "TYPE_QUANT_UNDEFINED"),
            "compressType": (0, "COMPRESS_TYPE_UNDEFINED"),
            "calcType": (0, "CALC_TYPE_UNDEFINED"),
            "scaleType": (0, "SCALE_TYPE_TOR"),
            "mlaVHeadSize": (0,),
        },
    )
    notes: list[str] = []
    query = call.tensor(0, "query")
    heads, kv_heads = _heads(call, query, notes)
    rows = _rows(query, heads, "query")
    key_cache, value_cache = call.raw(1), call.raw(2)
    tables, lengths = call.raw(3), call.raw(4)
    if key_cache is None or value_cache is None or tables is None or lengths is None:
        raise ReplayImpossible("inputs missing: the caches, blockTables or contextLens were not dumped")
    tokens = rows.shape[0]
    context = [int(n) for n in np.asarray(lengths).reshape(-1)]
    if len(context) != tokens or tables.ndim != 2 or tables.shape[0] < tokens:
        raise ReplayImpossible(
            f"contextLens {context} and blockTables {list(tables.shape)} for {tokens} tokens"
        )
    keys = [
        call.wide(_cache_tokens(key_cache, tables, i, n, kv_heads, rows.shape[-1]))
        for i, n in enumerate(context)
    ]
    values = [
        call.wide(_cache_tokens(value_cache, tables, i, n, kv_heads, None)) for i, n in enumerate(context)
    ]
    requests = Requests(rows, list(range(tokens)), [1] * tokens, context)
    scale = float(_param(call, "qkScale", 1.0, notes))
    need = _all_rows(call, tokens, heads)
    out, terms = attend(
        requests, keys, values, lambda _b, q, k: np.ones((q, k), bool), scale, kv_heads, need, call.precision
    )
    return _replayed(call, out, terms, max(context, default=1), notes)


def _cache_tokens(
    cache: np.ndarray, tables: np.ndarray, token: int, length: int, kv_heads: int, dim: int | None
) -> np.ndarray:
    """Token ``token``'s first ``length`` cached tokens as ``[length, N_kv, D]``: an ND cache
    ``[blocks, block_size, N_kv, D]`` or an NZ one ``[blocks, N_kv * D / 16, block_size, 16]``
    (``[blocks, block_size, N_kv * D]`` where the reader un-tiled a FRACTAL_NZ ``.bin``)."""
    if cache.ndim == 3 and cache.shape[2] % kv_heads == 0:
        cache = cache.reshape(*cache.shape[:2], kv_heads, -1)
    if cache.ndim != 4:
        raise ReplayImpossible(f"cache {list(cache.shape)} is not a 4-d paged cache")
    if cache.shape[2] == kv_heads and (dim is None or cache.shape[3] == dim):
        by_token, block = cache, cache.shape[1]
    elif cache.shape[1] * cache.shape[3] % kv_heads == 0 and cache.shape[3] == 16:  # NZ
        block = cache.shape[2]
        by_token = cache.transpose(0, 2, 1, 3).reshape(cache.shape[0], block, kv_heads, -1)
    else:
        raise ReplayImpossible(
            f"cache {list(cache.shape)}: neither [blocks, block_size, {kv_heads}, D] nor NZ"
        )
    needed = -(-length // block)
    if needed > tables.shape[1]:
        raise ReplayImpossible(f"blockTables row {token} has {tables.shape[1]} blocks, {needed} needed")
    blocks = tables[token, :needed].astype(np.int64)
    if blocks.size and (blocks.min() < 0 or blocks.max() >= cache.shape[0]):
        raise ReplayImpossible(f"blockTables row {token} names a block outside the cache's {cache.shape[0]}")
    return by_token[blocks].reshape(needed * block, kv_heads, -1)[:length]


PA_ENCODER = (3, "PA_ENCODER")
_MASK_NAMES = ("MASK_TYPE_UNDEFINED", "MASK_TYPE_NORM", "MASK_TYPE_NORM_COMPRESS", "MASK_TYPE_CAUSAL_MASK")


def self_attention(call: Call) -> Replayed:
    """``SelfAttentionOperation`` with ``calcType`` PA_ENCODER: prefill over the requests' own tokens,
    causal by ``maskType`` NORM (a mask given: non-zero leaves a score out), NORM_COMPRESS or
    CAUSAL_MASK (no mask intensor)."""
    notes: list[str] = []
    calc = call.keyword.get("calcType")
    if calc not in PA_ENCODER:
        raise ReplayImpossible(f"calcType {calc!r}: only PA_ENCODER (3) is replayed here")
    _refuse_unless(
        call,
        {
            "clampType": (0, "CLAMP_TYPE_UNDEFINED"),
            "quantType": (0, "TYPE_QUANT_UNDEFINED"),
            "scaleType": (0, "SCALE_TYPE_TOR"),
            "mlaVHeadSize": (0,),
        },
    )
    mask_type = call.keyword.get("maskType", 0)
    if mask_type not in (0, 1, 3, 9, *_MASK_NAMES):
        raise ReplayImpossible(f"maskType {mask_type!r} (alibi, sliding window): not replayed here")
    windowed = mask_type not in (0, "MASK_TYPE_UNDEFINED")
    # the operation's own sources: a mask intensor (index 3) unless undefined or CAUSAL_MASK, then the
    # lengths (self_attention_operation.cpp: maskId_ 3, tokenOffsetId_ 4 with a mask, 3 without)
    mask_given = windowed and mask_type not in (9, "MASK_TYPE_CAUSAL_MASK")
    query = call.tensor(0, "q")
    heads, kv_heads = _heads(call, query, notes)
    q = _rows(query, heads, "q")
    k, v = (_rows(call.tensor(i, what), kv_heads, what) for i, what in ((1, "k"), (2, "v")))
    lengths = call.raw(4 if mask_given else 3)
    if lengths is None or lengths.dtype.kind not in "iu":
        raise ReplayImpossible("inputs missing: seqLen (the intensor after the mask) was not dumped")
    seq = [int(n) for n in lengths.reshape(-1)]
    if sum(seq) > q.shape[0]:
        raise ReplayImpossible(f"seqLen {seq} sums past the {q.shape[0]} tokens")
    starts = list(np.cumsum([0, *seq[:-1]]).astype(int))
    requests = Requests(q, starts, seq, seq)
    keys = [k[s : s + n] for s, n in zip(starts, seq, strict=True)]
    values = [v[s : s + n] for s, n in zip(starts, seq, strict=True)]
    mask = call.raw(3) if mask_type in (1, "MASK_TYPE_NORM") else None

    def window(request: int, q_len: int, kv_len: int) -> np.ndarray:
        if not windowed:
            return np.ones((q_len, kv_len), dtype=bool)
        if mask is None:  # NORM_COMPRESS, CAUSAL_MASK: causal, rebuilt from the lengths
            return causal(q_len, kv_len)
        return ~masked(mask, request, len(seq), q_len, kv_len)

    scale = float(_param(call, "qScale", 1.0, notes)) * float(_param(call, "qkScale", 1.0, notes))
    need = _all_rows(call, q.shape[0], heads)
    out, terms = attend(requests, keys, values, window, scale, kv_heads, need, call.precision)
    return _replayed(call, out, terms, max(seq, default=1), notes)


def rope(call: Call) -> Replayed:
    """``RopeOperation``'s first output, the rotated query."""
    notes: list[str] = []
    q, cos, sin = call.tensor(0, "q"), call.tensor(2, "cos"), call.tensor(3, "sin")
    coeff = int(_param(call, "rotaryCoeff", DEFAULT_ROTARY_COEFF, notes))
    width = cos.shape[-1]
    if coeff <= 0 or coeff % 2 or width % coeff:
        raise ReplayImpossible(f"rotaryCoeff {coeff} does not divide the rotary width {width} into pairs")
    if q.shape[-1] % width or cos.shape[0] != q.shape[0] or sin.shape != cos.shape:
        raise ReplayImpossible(f"q {list(q.shape)} and cos/sin {list(cos.shape)}: not one row each")
    heads = q.reshape(q.shape[0], -1, width)
    turned = _rotated(heads, coeff)
    out = heads * cos[:, None, :] + turned * sin[:, None, :]
    return Replayed(out.reshape(q.shape), reduction=2, notes=tuple(notes))


def _rotated(x: np.ndarray, coeff: int) -> np.ndarray:
    """ATB's rotate: in each of ``coeff / 2`` segments of width ``2r`` (``r = width / coeff``),
    ``cat(-second half, first half)``."""
    stride = x.shape[-1] // coeff
    segments = x.reshape(*x.shape[:-1], coeff // 2, 2, stride)
    turned = np.stack((-segments[..., 1, :], segments[..., 0, :]), axis=-2)
    return turned.reshape(x.shape)


def reshape_and_cache(call: Call) -> Replayed:
    """``ReshapeAndCacheOperation``: the rows it wrote, read from its own outtensors (the caches
    after it ran), ND or NZ by ``kvCacheCfg``."""
    _refuse_unless(call, {"compressType": (0, "COMPRESS_TYPE_UNDEFINED")})
    config = call.keyword.get("kvCacheCfg", 0)
    if config in (1, "K_CACHE_V_BYPASS"):
        raise ReplayImpossible(
            "kvCacheCfg K_CACHE_V_BYPASS: the value cache is not written; not replayed here"
        )
    cache = call.raw(2)
    # a FRACTAL_NZ .bin comes un-tiled from the reader, [blocks, block_size, N * D]: rows as in ND
    nz = config in (2, "NZ") and (cache is None or cache.ndim == 4)
    return written_rows(call, "slot_mapping", nz, ())


REFERENCES = {
    "PagedAttentionOperation": paged_attention,
    "SelfAttentionOperation": self_attention,
    "RopeOperation": rope,
    "ReshapeAndCacheOperation": reshape_and_cache,
}
