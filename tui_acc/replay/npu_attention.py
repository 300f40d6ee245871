"""torch_npu's fused attention replayed: ``npu_fused_infer_attention_score`` (FIA, and its ``_v2``),
``npu_prompt_flash_attention`` and ``npu_incre_flash_attention``, from op-plugin's API docs
(``docs/context/torch_npu-<api>.md``; docs/replay.md names each fact's source).

``out = softmax(scale * Q K^T, masked) V`` per request and query head, where:

- the layouts BSH, BSND, BNSD (BNSD_BSND: BNSD in, BSND out) and TND; in TND
  ``actual_seq_lengths`` holds the cumulative query lengths (the batch is its length);
- the key and value are a paged cache where ``block_table`` is given: token t of request b lies at
  ``cache[block_table[b, t // block_size], t % block_size]``, the cache ``[blocks, block_size, N_kv*D]``
  or ``[blocks, N_kv, block_size, D]``, and ``actual_seq_lengths_kv`` holds each request's kv length;
  without a table, kv lengths are cumulative in TND and per request otherwise;
- GQA: query head h reads kv head ``h // (N / N_kv)``;
- ``sparse_mode`` 0 (the mask where given, within ``pre_tokens`` / ``next_tokens`` of the diagonal
  from the top left), 1 (the mask), 2 (causal from the top left), 3 (causal from the bottom right,
  ``j <= i + kv_len - q_len``), 4 (a band of ``pre_tokens`` / ``next_tokens`` around the bottom-right
  diagonal); the 2048x2048 templates of modes 2-4 are not read, the masks are built from the
  lengths; a mask tensor holds 1 where a score is left out;
- MLA: ``query_rope`` / ``key_rope`` add their dot products to the scores.

Arguments left to their defaults are not recorded: the documented defaults are used and said
(``scale`` 1.0, not 1/sqrt(D); ``num_heads`` 1; ``input_layout`` BSH).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tui_acc.replay.attention import Requests, SparseWindow, attend, kv_len_max, paged_tokens, roundings_of
from tui_acc.replay.call import Call, Replayed, ReplayImpossible

LAYOUTS = ("BSH", "BSND", "BNSD", "TND", "BNSD_BSND")
INFINITE_TOKENS = 2147483647
# arguments that change the arithmetic in ways these references do not model: refused by name
UNMODELLED = (
    "pse_shift",
    "dequant_scale1",
    "deq_scale1",  # npu_prompt_flash_attention's spelling
    "quant_scale1",
    "dequant_scale2",
    "deq_scale2",
    "quant_scale2",
    "quant_offset2",
    "antiquant_scale",
    "antiquant_offset",
    "key_antiquant_scale",
    "value_antiquant_scale",
    "key_shared_prefix",
    "query_padding_size",
    "kv_padding_size",
    "dequant_scale_query",
    "dequant_scale_key",
    "dequant_scale_value",
    "quant_scale_out",
)


@dataclass(frozen=True)
class Names:
    """What each API calls its arguments, and the documented defaults that differ between them."""

    heads: str = "num_heads"
    scale: str = "scale"
    q_lengths: str = "actual_seq_lengths"
    kv_lengths: str = "actual_seq_lengths_kv"
    next_tokens: int = INFINITE_TOKENS
    sparse: bool = True  # sparse_mode is an argument
    kv_lengths_only: bool = False  # IFA: its actual_seq_lengths are the kv lengths


FIA = Names()
FIA_V2 = Names(
    heads="num_query_heads", scale="softmax_scale", q_lengths="actual_seq_qlen", kv_lengths="actual_seq_kvlen"
)
PFA = Names(scale="scale_value", next_tokens=0)
IFA = Names(
    scale="scale_value", q_lengths="", kv_lengths="actual_seq_lengths", sparse=False, kv_lengths_only=True
)


class Options:
    """The call's scalar arguments, with the documented default said where one was not recorded."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.notes: list[str] = []

    def get(self, name: str, default: Any, say: bool = True) -> Any:
        value = self.call.option(name)
        if value is None:
            if say:
                self.notes.append(f"{name} not recorded: torch_npu's default {default!r}")
            return default
        return value

    def lengths(self, name: str) -> list[int] | None:
        """An int list argument (msprobe records a list, ATB a JSON array); None where absent."""
        if not name:
            return None
        return as_lengths(name, self.call.keyword.get(name))


def as_lengths(name: str, value: object) -> list[int] | None:
    """A recorded int list (a list, a JSON array, a tensor) as ints; None where absent."""
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (int, float)) for v in value):
        raise ReplayImpossible(f"{name} {value!r} is not a list of lengths")
    return [int(v) for v in value]


def fused_infer_attention(call: Call) -> Replayed:
    """``torch_npu.npu_fused_infer_attention_score``: its first output."""
    return _attention(call, FIA)


def fused_infer_attention_v2(call: Call) -> Replayed:
    """``torch_npu.npu_fused_infer_attention_score_v2``: the same with v2's argument names."""
    if call.keyword.get("learnable_sink") is not None:
        raise ReplayImpossible("learnable_sink: its semantics are not documented (no formula to replay)")
    return _attention(call, FIA_V2)


def prompt_flash_attention(call: Call) -> Replayed:
    """``torch_npu.npu_prompt_flash_attention`` (prefill): FIA's arithmetic, ``next_tokens`` 0 by default."""
    return _attention(call, PFA)


def incre_flash_attention(call: Call) -> Replayed:
    """``torch_npu.npu_incre_flash_attention`` (decode): ``actual_seq_lengths`` are the kv lengths."""
    return _attention(call, IFA)


def _attention(call: Call, names: Names) -> Replayed:
    for name in UNMODELLED:
        if call.keyword.get(name) is not None:
            raise ReplayImpossible(f"{name} given: quantised or shifted attention is not replayed here")
    options = Options(call)
    layout = str(options.get("input_layout", "BSH"))
    if layout not in LAYOUTS:
        raise ReplayImpossible(f"input_layout {layout!r}: not one this replay reads ({', '.join(LAYOUTS)})")
    query = call.tensor(0, "query", "query")
    heads = int(options.get(names.heads, 1, say=layout == "BSH"))
    if layout != "BSH":
        heads = query.shape[2] if layout == "BSND" else query.shape[1]  # TND, BNSD: the second
    kv_heads = int(options.get("num_key_value_heads", 0, say=False)) or heads
    if heads % kv_heads:
        raise ReplayImpossible(f"{heads} query heads do not split into groups of {kv_heads} kv heads")
    requests = request_queries(query, layout, heads, options, names)
    keys, values = request_kv(call, options, names, layout, requests, kv_heads)
    query_rope = call.optional_tensor(-1, "query_rope")
    key_rope = call.raw(-1, "key_rope")
    if (query_rope is None) != (key_rope is None):
        raise ReplayImpossible("query_rope and key_rope come together (MLA); one of them was not dumped")
    scale = float(options.get(names.scale, 1.0))
    window = _window(options, names, requests)
    rope_keys = _kv_rope(call, options, requests, key_rope) if key_rope is not None else None
    rope_queries = (
        request_queries(query_rope, layout, heads, options, names).queries if query_rope is not None else None
    )
    need = needed_pairs(call, layout, requests, heads)
    rope = (rope_queries, rope_keys) if rope_queries is not None and rope_keys is not None else None
    out, probability_terms = attend(
        requests, keys, values, window.allowed, scale, kv_heads, need, call.precision, rope
    )
    notes = options.notes
    return laid_out(call, out, layout, requests, notes, probability_terms, kv_len_max(requests))


def needed_pairs(call: Call, layout: str, requests: Requests, heads: int) -> np.ndarray:
    """``[T, N]``: the (query row, head) pairs whose outputs the sample holds (all without one)."""
    t = requests.queries.shape[0]
    need = np.zeros((t, heads), dtype=bool)
    if call.sample is None:
        need[:] = True
        return need
    rows = call.sample.rows
    if layout == "BSH":
        need[rows[rows < t]] = True
    elif layout == "BNSD":
        seq = t // len(requests.starts)
        per_request = heads * seq
        positions = (rows // per_request) * seq + rows % seq
        need[positions, (rows // seq) % heads] = True
    else:  # a row per (token, head)
        need[rows // heads, rows % heads] = True
    return need


def laid_out(
    call: Call,
    out: np.ndarray,
    layout: str,
    requests: Requests,
    notes: list[str],
    probability_terms: float,
    reduction: int,
) -> Replayed:
    """``out`` ([T, N, Dv] rows) in the output's layout, only the rows each request's length covers
    (padding rows past ``actual_seq_lengths`` are undefined in the kernel: left out, said)."""
    t, n, dv = out.shape
    valid = np.zeros(t, dtype=bool)
    for start, q_len in zip(requests.starts, requests.q_lengths, strict=True):
        valid[start : start + q_len] = True
    if layout == "TND":
        table, row_valid = out.reshape(t * n, dv), np.repeat(valid, n)
    else:
        batch = len(requests.starts)
        seq = t // batch
        if layout == "BSH":
            table, row_valid = out.reshape(t, n * dv), valid
        elif layout == "BNSD":
            table = out.reshape(batch, seq, n, dv).transpose(0, 2, 1, 3).reshape(-1, dv)
            row_valid = np.broadcast_to(valid.reshape(batch, 1, seq), (batch, n, seq)).reshape(-1)
        else:  # BSND, BNSD_BSND
            table, row_valid = out.reshape(t * n, dv), np.repeat(valid, n)
    rows = np.flatnonzero(row_valid)
    if call.sample is not None:
        rows = np.intersect1d(rows, call.sample.rows)
    if rows.size < row_valid.size:
        if not row_valid.all():
            notes = [
                *notes,
                f"{row_valid.size - int(row_valid.sum())} padding rows past the lengths not compared",
            ]
        values: np.ndarray = table[rows]
        kept: np.ndarray | None = rows
    else:
        values, kept = table, None
    roundings = roundings_of(out, probability_terms)
    return Replayed(values, reduction=reduction, notes=tuple(notes), rows=kept, roundings=roundings)


def request_queries(query: np.ndarray, layout: str, heads: int, options: Options, names: Names) -> Requests:
    """The queries as ``[T, N, D]`` rows with each request's extent."""
    if layout == "TND":
        if query.ndim != 3:
            raise ReplayImpossible(f"query {list(query.shape)} is not TND")
        ends = options.lengths(names.q_lengths)
        if not ends:
            raise ReplayImpossible(f"{names.q_lengths} not recorded: TND needs the cumulative query lengths")
        starts = [0, *ends[:-1]]
        lengths = [end - start for start, end in zip(starts, ends, strict=True)]
        if any(n < 0 for n in lengths) or ends[-1] > query.shape[0]:
            raise ReplayImpossible(f"{names.q_lengths} {ends} do not fit {query.shape[0]} query rows")
        return Requests(query, starts, lengths, [])
    expected = 3 if layout == "BSH" else 4
    if query.ndim != expected:
        raise ReplayImpossible(f"query {list(query.shape)} is not {layout}")
    if layout == "BSH":
        if query.shape[-1] % heads:
            raise ReplayImpossible(f"query width {query.shape[-1]} does not split into {heads} heads")
        rows = query.reshape(query.shape[0], query.shape[1], heads, -1)
    elif layout == "BSND":
        rows = query
    else:  # BNSD, BNSD_BSND
        rows = query.transpose(0, 2, 1, 3)
    batch, seq = rows.shape[:2]
    given = options.lengths(names.q_lengths) if not names.kv_lengths_only else None
    lengths = _per_request(given, batch, seq, names.q_lengths)
    return Requests(rows.reshape(batch * seq, *rows.shape[2:]), [b * seq for b in range(batch)], lengths, [])


def _per_request(given: list[int] | None, batch: int, full: int, name: str) -> list[int]:
    """Per-request lengths: one length for every request, the first ``batch`` of a longer list, or the
    full length where none was recorded."""
    if given is None:
        return [full] * batch
    if len(given) == 1:
        given = given * batch
    if len(given) < batch:
        raise ReplayImpossible(f"{name} {given} has fewer than the batch's {batch} lengths")
    lengths = given[:batch]
    if any(n < 0 or n > full for n in lengths):
        raise ReplayImpossible(f"{name} {lengths} do not fit a sequence of {full}")
    return lengths


def request_kv(
    call: Call, options: Options, names: Names, layout: str, requests: Requests, kv_heads: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each request's keys and values as ``[kv_len, N_kv, D]``; ``requests.kv_lengths`` filled."""
    # as dumped: a paged cache holds every block of the layer, and only the requests' are widened
    key, value = (_dumped(call, index, name) for index, name in ((1, "key"), (2, "value")))
    batch = len(requests.starts)
    table = call.raw(-1, "block_table")
    if table is not None:
        lengths = options.lengths(names.kv_lengths)
        if lengths is None:
            raise ReplayImpossible(
                f"{names.kv_lengths} not recorded: a paged cache needs each request's kv length"
            )
        requests.kv_lengths = _per_request(lengths, batch, 1 << 62, names.kv_lengths)
        block = _block_size(options, key, kv_heads)
        return (
            [
                call.wide(paged_tokens(key, table, b, n, block, kv_heads))
                for b, n in enumerate(requests.kv_lengths)
            ],
            [
                call.wide(paged_tokens(value, table, b, n, block, kv_heads))
                for b, n in enumerate(requests.kv_lengths)
            ],
        )
    if layout == "TND":
        ends = options.lengths(names.kv_lengths)
        if not ends:
            raise ReplayImpossible(f"{names.kv_lengths} not recorded: TND needs the cumulative kv lengths")
        if any(b < a for a, b in zip([0, *ends], ends, strict=False)):
            raise ReplayImpossible(f"{names.kv_lengths} {ends} are not cumulative (they decrease)")
        if len(ends) != batch or ends[-1] > key.shape[0]:
            raise ReplayImpossible(
                f"{names.kv_lengths} {ends} do not fit {key.shape[0]} kv rows of {batch} requests"
            )
        starts = [0, *ends[:-1]]
        requests.kv_lengths = [end - start for start, end in zip(starts, ends, strict=True)]
        return (
            [call.wide(key[s:e]) for s, e in zip(starts, ends, strict=True)],
            [call.wide(value[s:e]) for s, e in zip(starts, ends, strict=True)],
        )
    k_rows, v_rows = (_bsnd(t, layout, kv_heads) for t in (key, value))
    if k_rows.shape[0] != batch:
        raise ReplayImpossible(f"key {list(key.shape)} holds {k_rows.shape[0]} requests, the query {batch}")
    requests.kv_lengths = _per_request(
        options.lengths(names.kv_lengths), batch, k_rows.shape[1], names.kv_lengths
    )
    return (
        [call.wide(k_rows[b, :n]) for b, n in enumerate(requests.kv_lengths)],
        [call.wide(v_rows[b, :n]) for b, n in enumerate(requests.kv_lengths)],
    )


def _dumped(call: Call, index: int, name: str) -> np.ndarray:
    found = call.raw(index, name)
    if found is None:
        raise ReplayImpossible(f"inputs missing: {name} (argument {index}) was not dumped")
    return found


def _bsnd(tensor: np.ndarray, layout: str, heads: int) -> np.ndarray:
    if layout == "BSH":
        if tensor.ndim != 3 or tensor.shape[-1] % heads:
            raise ReplayImpossible(f"key/value {list(tensor.shape)} is not BSH with {heads} kv heads")
        return tensor.reshape(tensor.shape[0], tensor.shape[1], heads, -1)
    if tensor.ndim != 4:
        raise ReplayImpossible(f"key/value {list(tensor.shape)} is not {layout}")
    return tensor if layout == "BSND" else tensor.transpose(0, 2, 1, 3)


def _block_size(options: Options, cache: np.ndarray, kv_heads: int) -> int:
    recorded = options.call.option("block_size")
    if recorded:
        return int(recorded)
    if cache.ndim == 3:
        options.notes.append(f"block_size not recorded: {cache.shape[1]}, the cache's second dimension")
        return int(cache.shape[1])
    raise ReplayImpossible("block_size not recorded, and a 4-d cache does not show it")


def _kv_rope(call: Call, options: Options, requests: Requests, key_rope: np.ndarray) -> list[np.ndarray]:
    """MLA's key rope part, per request, gathered as the keys are (one kv head)."""
    table = call.raw(-1, "block_table")
    if table is None:
        raise ReplayImpossible("key_rope without block_table: MLA is replayed from a paged cache only")
    block = _block_size(options, key_rope, 1)
    return [
        call.wide(paged_tokens(key_rope, table, b, n, block, 1)) for b, n in enumerate(requests.kv_lengths)
    ]


def _window(options: Options, names: Names, requests: Requests) -> SparseWindow:
    """The call's ``sparse_mode``, mask and token bounds (their defaults where not recorded)."""
    mask = options.call.raw(-1, "atten_mask")
    mode = int(options.get("sparse_mode", 0, say=False)) if names.sparse else 0
    pre = int(options.get("pre_tokens", INFINITE_TOKENS, say=False))
    after = int(options.get("next_tokens", names.next_tokens, say=False))
    if mask is not None and mode == 0 and options.call.option("next_tokens") is None:
        options.notes.append(f"next_tokens not recorded: torch_npu's default {names.next_tokens}")
    batch = len(requests.starts)
    single_query = max(requests.q_lengths, default=0) == 1
    if mode not in (0, 1, 2, 3, 4):
        raise ReplayImpossible(f"sparse_mode {mode}: not supported by the operator (0-4)")
    if mode == 1 and mask is None:
        raise ReplayImpossible("sparse_mode 1 without atten_mask: the mask was not dumped")
    if mask is not None and mask.ndim == 2 and single_query and mask.shape[0] == batch > 1:
        mask = mask[:, None, :]  # one query per request: (B, KV_S)
    return SparseWindow(mask, mode, pre, after, batch, single_query)


REFERENCES = {
    "NPU.npu_fused_infer_attention_score": fused_infer_attention,
    "NPU.npu_fused_infer_attention_score_v2": fused_infer_attention_v2,
    "NPU.npu_prompt_flash_attention": prompt_flash_attention,
    "NPU.npu_incre_flash_attention": incre_flash_attention,
}
