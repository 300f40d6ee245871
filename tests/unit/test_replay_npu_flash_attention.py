"""torch_npu's other attention entry points replayed: ``npu_fusion_attention`` (and ``_v2``) by
replay/npu_flash_attention.py, ``npu_prompt_flash_attention`` and ``npu_incre_flash_attention`` by the
references the registry holds for them; each held against torch's ``scaled_dot_product_attention`` run
request by request, with the windows built from op-plugin's docs (``torch_npu-npu_fusion_attention.md``:
1 in ``atten_mask`` leaves a score out; no mask: every score, whatever ``sparse_mode``; 0: the mask
within ``pre_tockens`` / ``next_tockens`` of the top-left diagonal; 2 causal from the top left; 3 from
the bottom right; 4 a band around the bottom-right diagonal; PFA's ``next_tokens`` default 0)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_flash_attention as fa
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.registry import Registry
from tui_acc.replay.sampling import plan
from tui_acc.verdicts.replay_check import _judged

FUSION = "NPU.npu_fusion_attention.0.forward"
HEADS, KV_HEADS, DIM, DIM_V = 8, 2, 16, 12
INF = 2147483647


def _call(positional: dict, keyword: dict, name: str = FUSION, sample=None) -> Call:
    def plain(v):
        return from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v

    arrays = {k: plain(v) for k, v in positional.items()}
    return Call(
        name, name.split(".")[1], "msprobe", arrays, {k: plain(v) for k, v in keyword.items()}, sample=sample
    )


def _judge(replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape))


def _dense(q, k, v, allowed: torch.Tensor, scale: float) -> torch.Tensor:
    """One request: q [q_len, N, D], k/v [kv_len, N_kv, D(v)], allowed [q_len, kv_len] -> [q_len, N, Dv];
    query head h reads kv head h // (N / N_kv)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(
        q.permute(1, 0, 2), k.permute(1, 0, 2), v.permute(1, 0, 2), attn_mask=allowed, scale=scale
    )
    return out.permute(1, 0, 2)


def _band(q_len: int, kv_len: int, pre: int, nxt: int, bottom_right: bool) -> torch.Tensor:
    i, j = torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :]
    diagonal = i + (kv_len - q_len) if bottom_right else i
    return (j - diagonal >= -pre) & (j - diagonal <= nxt)


def _laid(t: torch.Tensor, layout: str) -> torch.Tensor:
    """[B, S, N, D] in ``layout``."""
    if layout in ("BSH", "SBH"):
        t = t.reshape(*t.shape[:2], -1)
        return t.transpose(0, 1) if layout == "SBH" else t
    return t.transpose(1, 2) if layout == "BNSD" else t


def _case(q_len: int, kv_len: int, allowed: torch.Tensor, layout: str, keyword: dict, batch: int = 2):
    """A fusion-attention call in ``layout`` (scale 0.5, GQA, a narrower value) and torch's answer."""
    q = _randn(batch, q_len, HEADS, DIM, seed=11)
    k, v = _randn(batch, kv_len, KV_HEADS, DIM, seed=12), _randn(batch, kv_len, KV_HEADS, DIM_V, seed=13)
    per = [allowed[b] if allowed.ndim == 3 else allowed for b in range(batch)]  # [B, Sq, Skv]: per request
    expected = torch.stack([_dense(q[b], k[b], v[b], per[b], 0.5) for b in range(batch)])
    args = {i: _laid(t, layout) for i, t in enumerate((q, k, v))}
    call = _call(args, {"head_num": HEADS, "input_layout": layout, "scale": 0.5, **keyword})
    return call, _laid(expected, layout)


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
def test_each_layout_agrees_with_torch_and_a_3_percent_error_is_caught(layout: str) -> None:
    template = {"sparse_mode": 3, "atten_mask": torch.triu(torch.ones(64, 64, dtype=torch.bool), 1)}
    call, expected = _case(4, 12, _band(4, 12, INF, 0, True), layout, template)
    replayed = fa.fusion_attention(call)
    assert replayed.notes == ()
    for dtype in (torch.float32, torch.bfloat16):
        assert _judge(replayed, expected.to(dtype)) == "consistent", dtype
        assert _judge(replayed, expected.to(dtype) * 1.03) == "disagrees", dtype


def _tnd(q_lengths: list[int], kv_lengths: list[int], padding: int = 0, trailing: int = 0):
    """TND with cumulative lengths, sparse_mode 3 per request; ``padding`` query rows after the last."""
    q = _randn(sum(q_lengths) + padding, HEADS, DIM, seed=1)
    k, v = _randn(sum(kv_lengths), KV_HEADS, DIM, seed=2), _randn(sum(kv_lengths), KV_HEADS, DIM, seed=3)
    expected, qs, ks = [], 0, 0
    for q_len, kv_len in zip(q_lengths, kv_lengths, strict=True):
        allowed = _band(q_len, kv_len, INF, 0, True)
        expected.append(_dense(q[qs : qs + q_len], k[ks : ks + kv_len], v[ks : ks + kv_len], allowed, 0.25))
        qs, ks = qs + q_len, ks + kv_len
    keyword = {
        "head_num": HEADS,
        "input_layout": "TND",
        "scale": 0.25,
        "sparse_mode": 3,
        "atten_mask": torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1),
        "actual_seq_qlen": np.cumsum(q_lengths).tolist() + [0] * trailing,
        "actual_seq_kvlen": np.cumsum(kv_lengths).tolist() + [0] * trailing,
    }
    return _call({0: q, 1: k, 2: v}, keyword), torch.cat(expected)


def test_tnd_reads_cumulative_lengths_per_request() -> None:
    call, expected = _tnd([3, 1, 4], [7, 5, 4])
    replayed = fa.fusion_attention(call)
    assert _judge(replayed, expected.float()) == "consistent"
    assert _judge(replayed, expected.float() * 1.03) == "disagrees"
    shifted = torch.cat([expected[1:], expected[:1]])  # the rows of one request read for another's
    assert _judge(replayed, shifted.float()) == "disagrees"


def test_tnd_trailing_zeros_leave_requests_out_and_their_rows_are_not_compared() -> None:
    # the doc: true lengths [2, 3, 4, 5, 6] with the last two left out pass [2, 5, 9, 0, 0]
    call, expected = _tnd([2, 3], [4, 6], padding=3, trailing=2)
    replayed = fa.fusion_attention(call)
    dumped = torch.cat([expected, torch.full((3, HEADS, DIM), 1e4, dtype=torch.float64)])
    assert _judge(replayed, dumped.float()) == "consistent"
    assert any("ends in 2 zeros" in note for note in replayed.notes)
    assert any("padding rows" in note for note in replayed.notes)


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_sparse_mode_4_is_a_band_around_the_bottom_right_diagonal(api: str) -> None:
    pre, after = ("pre_tockens", "next_tockens") if api == "v1" else ("pre_tokens", "next_tokens")
    keyword = {"sparse_mode": 4, pre: 3, after: 1, "atten_mask": torch.ones(2048, 2048, dtype=torch.bool)}
    call, expected = _case(4, 12, _band(4, 12, 3, 1, True), "BSND", keyword)
    replayed = (fa.fusion_attention if api == "v1" else fa.fusion_attention_v2)(call)
    assert _judge(replayed, expected.float()) == "consistent"
    # the band measured from the top left, as msprobe's bench does: with Sq < Skv, another answer
    _, top_left = _case(4, 12, _band(4, 12, 3, 1, False), "BSND", {})
    assert _judge(replayed, top_left.float()) == "disagrees"


def test_mode_0_keeps_the_mask_within_the_tokens_of_the_top_left_diagonal() -> None:
    mask = torch.from_numpy(np.random.default_rng(5).random((2, 4, 12)) < 0.3)  # one per request
    mask[:, torch.arange(4), torch.arange(4)] = False  # every row keeps a score
    allowed = ~mask & _band(4, 12, 2, 5, False)
    per_head = mask[:, None].expand(2, HEADS, 4, 12)  # BNSS, the same for every head
    keyword = {"atten_mask": per_head.to(torch.uint8), "pre_tockens": 2, "next_tockens": 5}
    call, expected = _case(4, 12, allowed, "BNSD", keyword)
    assert _judge(fa.fusion_attention(call), expected.float()) == "consistent"
    # sparse_mode 1: the mask alone, the tokens ignored
    call, expected = _case(4, 12, ~mask, "BNSD", {**keyword, "sparse_mode": 1})
    assert _judge(fa.fusion_attention(call), expected.float()) == "consistent"
    # 2: causal from the top left
    call, expected = _case(4, 12, _band(4, 12, INF, 0, False), "BNSD", {**keyword, "sparse_mode": 2})
    assert _judge(fa.fusion_attention(call), expected.float()) == "consistent"


@pytest.mark.parametrize(
    ("keyword", "allowed"),
    [
        ({"sparse_mode": 2}, _band(1, 12, INF, 0, False)),  # the first key only
        ({"sparse_mode": 4, "pre_tockens": 3, "next_tockens": 0}, _band(1, 12, 3, 0, True)),
    ],
    ids=["2", "4"],
)
def test_one_query_per_request_keeps_its_window(keyword: dict, allowed: torch.Tensor) -> None:
    # FIA switches the window off for one query; the fusion attention's doc has no such rule
    template = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    call, expected = _case(1, 12, allowed, "BNSD", {**keyword, "atten_mask": template})
    replayed = fa.fusion_attention(call)
    assert _judge(replayed, expected.float()) == "consistent"
    _, everything = _case(1, 12, torch.ones(1, 12, dtype=torch.bool), "BNSD", {})
    assert _judge(replayed, everything.float()) == "disagrees"


def test_without_a_mask_every_score_counts_whatever_the_sparse_mode() -> None:
    call, expected = _case(4, 12, torch.ones(4, 12, dtype=torch.bool), "BSH", {"sparse_mode": 3})
    replayed = fa.fusion_attention(call)
    assert _judge(replayed, expected.float()) == "consistent"
    assert replayed.notes == ("sparse_mode 3 without atten_mask: every score, as the doc says",)


def test_positional_arguments_in_the_schemas_order_and_the_defaults_said() -> None:
    call, expected = _case(4, 12, _band(4, 12, 3, 1, True), "BSH", {})
    q, k, v = (call.positional[i] for i in range(3))
    mask = from_torch(torch.ones(2048, 2048, dtype=torch.bool))
    # query, key, value, head_num, input_layout, pse, padding_mask, atten_mask, scale, keep_prob,
    # pre_tockens, next_tockens, inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen, sparse_mode
    args = (q, k, v, HEADS, "bsh", None, None, mask, 0.5, 1.0, 3, 1, 0, None, None, None, 4)
    replayed = fa.fusion_attention(Call(FUSION, "x", "msprobe", dict(enumerate(args))))
    assert _judge(replayed, expected.float()) == "consistent"
    # scale left to its default: 1.0, not 1/sqrt(D), said
    unscaled, expected = _case(4, 12, torch.ones(4, 12, dtype=torch.bool), "BSH", {})
    keyword = {k: v for k, v in unscaled.keyword.items() if k != "scale"}
    replayed = fa.fusion_attention(Call(FUSION, "x", "msprobe", unscaled.positional, keyword))
    assert replayed.notes == ("scale not recorded: torch_npu's default 1.0",)
    assert _judge(replayed, expected.float()) == "disagrees"  # torch's answer was at scale 0.5


def test_a_sampled_sbh_output_is_replayed_on_its_rows_in_sbh_order() -> None:
    keyword = {"sparse_mode": 3, "atten_mask": torch.ones(2048, 2048, dtype=torch.bool)}
    call, expected = _case(400, 400, _band(400, 400, INF, 0, True), "SBH", keyword)
    sample = plan(tuple(expected.shape), "an SBH prefill")  # [400, 2, 96]: above 2**16 elements
    assert sample is not None
    replayed = fa.fusion_attention(Call(**{**call.__dict__, "sample": sample}))
    assert replayed.rows is not None and np.array_equal(replayed.rows, sample.rows)
    assert _judge(replayed, expected.float()) == "consistent"
    assert _judge(replayed, expected.transpose(0, 1).reshape(expected.shape).float()) == "disagrees"


@pytest.mark.parametrize(
    ("keyword", "said"),
    [
        ({"keep_prob": 0.9}, "keep_prob 0.9"),
        ({"pse": torch.ones(2, HEADS, 4, 12)}, "pse given"),
        ({"padding_mask": torch.ones(4, 12)}, "padding_mask given"),
        ({"sink": torch.ones(HEADS)}, "sink given"),
        ({"sparse_mode": 5, "atten_mask": torch.ones(4, 12), "prefix": [2, 2]}, "sparse_mode 5"),
        ({"sparse_mode": 7, "atten_mask": torch.ones(4, 12)}, "sparse_mode 7"),
        ({"atten_mask": torch.rand(2, HEADS, 4, 12) < 0.5}, "differs between heads"),
        ({"actual_seq_qlen": [4, 8], "actual_seq_kvlen": [12, 24]}, "TND only"),
        ({"input_layout": "NTD"}, "input_layout 'NTD'"),
        ({"head_num": None}, "head_num not recorded"),
        ({"query_rope": torch.ones(2, 4, HEADS, 4)}, "query_rope given"),
    ],
)
def test_what_is_not_replayed_is_said_by_name(keyword: dict, said: str) -> None:
    call, _ = _case(4, 12, torch.ones(4, 12, dtype=torch.bool), "BSH", {})
    changed = Call(**{**call.__dict__, "keyword": {**call.keyword, **_call({}, keyword).keyword}})
    with pytest.raises(ReplayImpossible, match=said):
        fa.fusion_attention_v2(changed) if "query_rope" in keyword else fa.fusion_attention(changed)


def _registered(name: str):
    found = Registry().find(name, None)
    assert found is not None, name
    return found.load()


def test_prompt_flash_attention_defaults_next_tokens_to_0() -> None:
    # a mask that leaves nothing out, next_tokens not passed: PFA's default 0 makes it causal from
    # the top left (FIA's default, 2147483647, would keep every score)
    q = _randn(2, HEADS, 4, DIM, seed=1)
    k, v = _randn(2, KV_HEADS, 12, DIM, seed=2), _randn(2, KV_HEADS, 12, DIM, seed=3)
    keyword = {
        "input_layout": "BNSD",
        "num_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "scale_value": 0.5,
    }

    def torch_answer(allowed: torch.Tensor) -> torch.Tensor:
        rows = [_dense(*(t[b].transpose(0, 1) for t in (q, k, v)), allowed, 0.5) for b in range(2)]
        return torch.stack(rows).transpose(1, 2)

    name = "NPU.npu_prompt_flash_attention.0.forward"
    call = _call({0: q, 1: k, 2: v}, {**keyword, "atten_mask": torch.zeros(4, 12, dtype=torch.bool)}, name)
    replayed = _registered("NPU.npu_prompt_flash_attention")(call)
    assert _judge(replayed, torch_answer(_band(4, 12, INF, 0, False)).float()) == "consistent"
    assert _judge(replayed, torch_answer(torch.ones(4, 12, dtype=torch.bool)).float()) == "disagrees"
    assert "next_tokens not recorded: torch_npu's default 0" in replayed.notes
    # sparse_mode 4: the band around the bottom-right diagonal, not the top-left one
    band = {**keyword, "sparse_mode": 4, "pre_tokens": 3, "next_tokens": 1, "atten_mask": torch.ones(8, 8)}
    replayed = _registered("NPU.npu_prompt_flash_attention")(_call({0: q, 1: k, 2: v}, band, name))
    assert _judge(replayed, torch_answer(_band(4, 12, 3, 1, True)).float()) == "consistent"
    assert _judge(replayed, torch_answer(_band(4, 12, 3, 1, False)).float()) == "disagrees"


def test_incre_flash_attention_reads_a_paged_bnsd_cache() -> None:
    # decode, query BNSD [B, N, 1, D], the cache [blocks, N_kv, block_size, D] (the doc's faster
    # layout), actual_seq_lengths the kv lengths
    lengths, block, blocks = [5, 37], 16, 10
    q = _randn(2, HEADS, 1, DIM, seed=1)
    keys = [_randn(n, KV_HEADS, DIM, seed=2 + b) for b, n in enumerate(lengths)]
    values = [_randn(n, KV_HEADS, DIM, seed=4 + b) for b, n in enumerate(lengths)]
    k_cache, v_cache = (_randn(blocks, KV_HEADS, block, DIM, seed=s) * 50 for s in (6, 7))
    free = np.random.default_rng(0).permutation(blocks).tolist()
    table = torch.zeros(2, 3, dtype=torch.int32)
    for b, n in enumerate(lengths):
        for i in range(-(-n // block)):
            at = free.pop()
            table[b, i] = at
            part = slice(i * block, min(n, (i + 1) * block))
            k_cache[at, :, : part.stop - part.start] = keys[b][part].transpose(0, 1)
            v_cache[at, :, : part.stop - part.start] = values[b][part].transpose(0, 1)
    expected = torch.stack(
        [
            _dense(q[b].transpose(0, 1), keys[b], values[b], torch.ones(1, n, dtype=torch.bool), 0.25)
            for b, n in enumerate(lengths)
        ]
    ).transpose(1, 2)
    keyword = {
        "input_layout": "BNSD",
        "num_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "scale_value": 0.25,
        "block_table": table,
        "block_size": block,
        "actual_seq_lengths": lengths,
    }
    call = _call({0: q, 1: k_cache, 2: v_cache}, keyword, "NPU.npu_incre_flash_attention.0.forward")
    replayed = _registered("NPU.npu_incre_flash_attention")(call)
    assert _judge(replayed, expected.float()) == "consistent"
    assert _judge(replayed, expected.float() * 1.03) == "disagrees"
