"""torch_npu's training attention replayed: the first output (``attention_out``) of
``npu_fusion_attention`` and ``npu_fusion_attention_v2`` (the FlashAttentionScore kernel), from op-plugin's
API doc ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_fusion_attention.md`` (formerly under
``docs/context/``) and the schemas in ``op_plugin/config/op_plugin_functions.yaml``; v2 has no doc page:
its schema's argument names with v1's semantics (op-plugin's ``FlashAttentionV2KernelNpuOpApi.cpp``
calls the same kernel family). The arithmetic is the fused-infer reference's (``npu_attention.py``,
``attention.py``); what differs is translated here:

- ``attention_out = Dropout(Softmax(Mask(scale * Q K^T, atten_mask)), keep_prob) V``; ``keep_prob`` 1
  only (anything else is a random Philox mask the dump does not hold: refused);
- v1's arguments are all positional in the schema's order (``query, key, value, head_num, input_layout,
  pse, padding_mask, atten_mask, scale, keep_prob, pre_tockens, next_tockens, inner_precise, prefix,
  actual_seq_qlen, actual_seq_kvlen, sparse_mode, ...``; note the spelling ``tockens``); v2's are
  keyword-only after ``input_layout`` and spelled ``pre_tokens`` / ``next_tokens``;
- ``input_layout`` (case-insensitive) BSH, SBH, BSND, BNSD or TND; ``head_num`` splits the width of
  BSH and SBH; the kv heads are the key's (there is no ``num_key_value_heads``): GQA as FIA's, query
  head h reads kv head ``h // (N / N_kv)``; the value's head size may be smaller than the key's;
- TND: ``actual_seq_qlen`` / ``actual_seq_kvlen`` are cumulative (``[2, 4, 6]``), trailing zeros
  leave the last requests out (``[2, 5, 9, 0, 0]``: three requests computed); elsewhere they are not
  documented (op-plugin then calls the varlen kernel): refused;
- without ``atten_mask``, ``sparse_mode`` and the token bounds have no effect: every score (the doc's
  constraints). With it, ``sparse_mode`` 0: the mask within ``pre_tockens`` before and
  ``next_tockens`` after the diagonal from the top left (default 2147483647 each); 1: the mask;
  2: causal from the top left; 3: causal from the bottom right (``j <= i + kv_len - q_len``);
  4: the band of ``pre_tockens`` / ``next_tockens`` around the bottom-right diagonal (msprobe's bench
  measures it from the top left: not copied); the 2048x2048 templates of 2-4 are not read. Unlike FIA,
  one query per request does not switch the window off (the doc has no such rule). 5-8 (prefix,
  varlen split across devices) are refused. A mask is BNSS, B1SS, 11SS or SS; a BNSS one whose heads
  differ is refused;
- a row that keeps no score: zeros (the doc's "invalid row" computation, which the operator switches
  on itself where it sees such rows, e.g. mode 3 with Sq > Skv).

Refused by name: ``pse`` (the doc's formula, ``scale * (pse + Q K^T)``, and its own example,
``scale * Q K^T + pse``, disagree), ``padding_mask`` (the doc: not supported), ``sink``, v2's
``query_rope`` / ``key_rope`` (no doc for them). ``scale`` not recorded: torch_npu's default 1.0, said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tui_acc.replay.attention import SparseWindow, attend, kv_len_max
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_attention import (
    FIA,
    INFINITE_TOKENS,
    Options,
    as_lengths,
    laid_out,
    needed_pairs,
    request_kv,
    request_queries,
)
from tui_acc.replay.sampling import Sample

LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
# v1: every argument may be positional (the schema has no ``*``)
V1_POSITIONS = {
    name: index
    for index, name in enumerate(
        (
            "query",
            "key",
            "value",
            "head_num",
            "input_layout",
            "pse",
            "padding_mask",
            "atten_mask",
            "scale",
            "keep_prob",
            "pre_tockens",
            "next_tockens",
            "inner_precise",
            "prefix",
            "actual_seq_qlen",
            "actual_seq_kvlen",
            "sparse_mode",
            "gen_mask_parallel",
            "sync",
            "softmax_layout",
            "sink",
            "dropout_mask",
            "seed",
            "offset",
        )
    )
}
V2_POSITIONS = {"query": 0, "key": 1, "value": 2, "head_num": 3, "input_layout": 4}
REFUSED = {
    "pse": "the doc's formula, scale * (pse + Q K^T), and its example, scale * Q K^T + pse, disagree",
    "padding_mask": "the doc says the operator does not support it",
    "sink": "per-head sink logits are not modelled by the shared attention",
    "query_rope": "npu_fusion_attention_v2's rope inputs have no doc",
    "key_rope": "npu_fusion_attention_v2's rope inputs have no doc",
}


@dataclass(frozen=True)
class Api:
    """Where each API's arguments are and how it spells the token bounds."""

    positions: Mapping[str, int]
    pre: str
    after: str


V1 = Api(V1_POSITIONS, "pre_tockens", "next_tockens")
V2 = Api(V2_POSITIONS, "pre_tokens", "next_tokens")


def fusion_attention(call: Call) -> Replayed:
    """``torch_npu.npu_fusion_attention``: its first output, ``attention_out``."""
    return _fusion(call, V1)


def fusion_attention_v2(call: Call) -> Replayed:
    """``torch_npu.npu_fusion_attention_v2``: the same, with v2's argument names."""
    return _fusion(call, V2)


class Arguments:
    """The call's arguments by name, by keyword or at their schema position."""

    def __init__(self, call: Call, api: Api) -> None:
        self.call, self.api = call, api

    def scalar(self, name: str, default: Any) -> Any:
        value = self.call.option(name, self.api.positions.get(name))
        return default if value is None else value

    def tensor(self, name: str) -> np.ndarray | None:
        return self.call.raw(self.api.positions.get(name, -1), name)

    def given(self, name: str) -> bool:
        """Whether the argument was passed as anything but None."""
        if self.call.keyword.get(name) is not None:
            return True
        index = self.api.positions.get(name)
        return index is not None and self.call.positional.get(index) is not None

    def lengths(self, name: str) -> list[int] | None:
        value = self.call.keyword.get(name)
        if value is None and name in self.api.positions:
            value = self.call.positional.get(self.api.positions[name])
        return as_lengths(name, value)


def _fusion(call: Call, api: Api) -> Replayed:
    args = Arguments(call, api)
    for name, why in REFUSED.items():
        if args.given(name):
            raise ReplayImpossible(f"{name} given: not replayed ({why})")
    keep = float(args.scalar("keep_prob", 1.0))
    if keep != 1.0:
        raise ReplayImpossible(f"keep_prob {keep}: dropout is random (its Philox mask was not dumped)")
    recorded = args.scalar("input_layout", None)
    if recorded is None:
        raise ReplayImpossible("input_layout not recorded (a required argument)")
    layout = str(recorded).upper()
    if layout not in LAYOUTS:
        raise ReplayImpossible(f"input_layout {recorded!r}: not one of {', '.join(LAYOUTS)}")
    query, key, value = (_dumped(args, name) for name in ("query", "key", "value"))
    notes: list[str] = []
    if layout == "SBH":  # [S, B, H]: read as BSH, and the rows put back in SBH's order
        query, key, value = (np.swapaxes(t, 0, 1) for t in (query, key, value))
    read_as = "BSH" if layout == "SBH" else layout
    heads, kv_heads = _heads(args, read_as, query, key)
    keyword: dict[str, Any] = {"input_layout": read_as}
    keyword.update(_lengths(args, layout, notes))
    scale = args.scalar("scale", None)
    if scale is None:
        notes.append("scale not recorded: torch_npu's default 1.0")
        scale = 1.0
    window = _window(args, notes)
    translated = replace(
        call,
        positional={0: query, 1: key, 2: value},
        keyword=keyword,
        sample=_bsh_sample(call.sample, query.shape[:2]) if layout == "SBH" else call.sample,
    )
    options = Options(translated)
    requests = request_queries(translated.tensor(0, "query"), read_as, heads, options, FIA)
    keys, values = request_kv(translated, options, FIA, read_as, requests, kv_heads)
    window = replace(window, batch=len(requests.starts))
    need = needed_pairs(translated, read_as, requests, heads)
    out, terms = attend(
        requests, keys, values, window.allowed, float(scale), kv_heads, need, translated.precision
    )
    replayed = laid_out(translated, out, read_as, requests, notes, terms, kv_len_max(requests))
    return _sbh_order(replayed, *query.shape[:2]) if layout == "SBH" else replayed


def _dumped(args: Arguments, name: str) -> np.ndarray:
    found = args.tensor(name)
    if found is None:
        raise ReplayImpossible(f"inputs missing: {name} (argument {args.api.positions[name]}) was not dumped")
    return found


def _heads(args: Arguments, layout: str, query: np.ndarray, key: np.ndarray) -> tuple[int, int]:
    """The query's heads and the key's."""
    recorded = args.scalar("head_num", None)
    expected = 3 if layout in ("BSH", "TND") else 4
    if query.ndim != expected or key.ndim != expected:
        raise ReplayImpossible(f"query {list(query.shape)}, key {list(key.shape)}: not {layout}")
    if layout == "BSH":
        if recorded is None:
            raise ReplayImpossible("head_num not recorded: the width of BSH / SBH does not show the heads")
        heads = int(recorded)
        if heads <= 0 or query.shape[-1] % heads:
            raise ReplayImpossible(f"query width {query.shape[-1]} does not split into {heads} heads")
        dim = query.shape[-1] // heads
        if key.shape[-1] % dim:
            raise ReplayImpossible(f"key width {key.shape[-1]} is not whole heads of {dim}")
        return heads, key.shape[-1] // dim
    axis = 2 if layout == "BSND" else 1
    heads = query.shape[axis]
    if recorded is not None and int(recorded) != heads:
        raise ReplayImpossible(f"head_num {recorded} but the {layout} query holds {heads} heads")
    return heads, key.shape[axis]


def _lengths(args: Arguments, layout: str, notes: list[str]) -> dict[str, list[int]]:
    """TND's cumulative lengths under FIA's names, without the trailing zeros of requests left out."""
    q_ends, kv_ends = args.lengths("actual_seq_qlen"), args.lengths("actual_seq_kvlen")
    if layout != "TND":
        if q_ends is not None or kv_ends is not None:
            raise ReplayImpossible(
                f"actual_seq_qlen / actual_seq_kvlen with {layout}: documented for TND only"
            )
        return {}
    if not q_ends or not kv_ends:
        raise ReplayImpossible("actual_seq_qlen / actual_seq_kvlen not recorded: TND needs both, cumulative")
    found = {}
    for name, ends, fia_name in (
        ("actual_seq_qlen", q_ends, "actual_seq_lengths"),
        ("actual_seq_kvlen", kv_ends, "actual_seq_lengths_kv"),
    ):
        computed = len(ends)
        while computed > 1 and ends[computed - 1] == 0:
            computed -= 1
        if computed < len(ends):
            notes.append(f"{name} ends in {len(ends) - computed} zeros: those requests are not computed")
        found[fia_name] = ends[:computed]
    return found


def _window(args: Arguments, notes: list[str]) -> SparseWindow:
    """The scores each request keeps (the batch is filled in once known)."""
    mask = args.tensor("atten_mask")
    mode = int(args.scalar("sparse_mode", 0))
    pre = int(args.scalar(args.api.pre, INFINITE_TOKENS))
    after = int(args.scalar(args.api.after, INFINITE_TOKENS))
    if mask is None:
        if mode != 0:
            notes.append(f"sparse_mode {mode} without atten_mask: every score, as the doc says")
        return SparseWindow(None, 0, INFINITE_TOKENS, INFINITE_TOKENS, 0, single_query=False)
    if mode not in (0, 1, 2, 3, 4):
        raise ReplayImpossible(
            f"sparse_mode {mode}: prefix and varlen-split masks are not replayed (0-4 are)"
        )
    if mask.ndim == 4 and mask.shape[1] > 1:  # BNSS: one mask per head
        if not (mask == mask[:, :1]).all():
            raise ReplayImpossible(f"atten_mask {list(mask.shape)} differs between heads: not replayed")
        mask = mask[:, :1]
    return SparseWindow(mask, mode, pre, after, 0, single_query=False)


def _bsh_sample(sample: Sample | None, batch_seq: tuple[int, ...]) -> Sample | None:
    """An SBH output's sampled rows (``s * B + b``) as the BSH rows (``b * S + s``) they are."""
    if sample is None:
        return None
    batch, seq = batch_seq
    rows = (sample.rows % batch) * seq + sample.rows // batch
    return replace(sample, rows=np.sort(rows))


def _sbh_order(replayed: Replayed, batch: int, seq: int) -> Replayed:
    """BSH rows back in SBH's order."""
    if replayed.rows is None:
        values = replayed.values.reshape(batch, seq, -1).swapaxes(0, 1).reshape(batch * seq, -1)
        return replace(replayed, values=values)
    rows = (replayed.rows % seq) * batch + replayed.rows // seq
    order = np.argsort(rows)
    return replace(replayed, values=replayed.values[order], rows=rows[order])


REFERENCES = {
    "NPU.npu_fusion_attention": fusion_attention,
    "NPU.npu_fusion_attention_v2": fusion_attention_v2,
}
