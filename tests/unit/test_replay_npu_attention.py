"""torch_npu's fused attention replayed (replay/npu_attention.py), held against torch's own
``scaled_dot_product_attention`` run request by request on dense tensors, with the masks built from
op-plugin's documented semantics (1 in ``atten_mask`` leaves a score out; sparse_mode 3 is causal from
the bottom right, 4 a band around that diagonal, 2 causal from the top left) and the paged caches
written by scattering each request's tokens into shuffled blocks, as ``block_table`` says."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_attention
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.registry import Registry
from tui_acc.replay.sampling import plan
from tui_acc.verdicts.replay_check import _judged

FIA = "NPU.npu_fused_infer_attention_score.0.forward"


def _call(positional: dict, keyword: dict, name: str = FIA, sample=None) -> Call:
    def plain(v):
        return from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v

    arrays = {k: plain(v) for k, v in positional.items()}
    kwargs = {k: plain(v) for k, v in keyword.items()}
    return Call(name, name.split(".")[1], "msprobe", arrays, kwargs, sample=sample)


def _judge(replayed: Replayed, dumped: torch.Tensor, call: Call | None = None) -> str:
    gathered = Gathered(call or Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape)).to(torch.float64)


def _dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """One request: q [q_len, N, D], k/v [kv_len, N_kv, D], allowed [q_len, kv_len] -> [q_len, N, D],
    by torch's SDPA (kv heads repeated for GQA: query head h reads kv head h // group)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(
        q.permute(1, 0, 2), k.permute(1, 0, 2), v.permute(1, 0, 2), attn_mask=allowed, scale=scale
    )
    return out.permute(1, 0, 2)


def _causal_bottom_right(q_len: int, kv_len: int) -> torch.Tensor:
    i, j = torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :]
    return j <= i + (kv_len - q_len)


def _paged(
    tokens: list[torch.Tensor], block: int, blocks: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache of ``blocks`` blocks (noise where nothing was written) holding each request's tokens
    [kv_len, N_kv * D] in shuffled blocks, and its block table."""
    width = tokens[0].shape[-1]
    cache = _randn(blocks, block, width, seed=seed) * 50  # noise: a wrong gather cannot pass
    free = np.random.default_rng(seed).permutation(blocks).tolist()
    most = max(-(-len(t) // block) for t in tokens)
    table = torch.zeros(len(tokens), most, dtype=torch.int32)
    for b, request in enumerate(tokens):
        for n in range(-(-len(request) // block)):
            at = free.pop()
            table[b, n] = at
            chunk = request[n * block : (n + 1) * block]
            cache[at, : len(chunk)] = chunk
    return cache, table


HEADS, KV_HEADS, DIM = 8, 2, 16


def _tnd_paged(q_lengths: list[int], kv_lengths: list[int], seed: int = 0):
    """A vllm-ascend style call: TND queries, a paged [blocks, block_size, N_kv * D] cache, cumulative
    query lengths, per-request kv lengths, sparse_mode 3 with its (unread) template mask; and what
    torch computes for it."""
    block, scale = 16, 1 / math.sqrt(DIM)
    q = _randn(sum(q_lengths), HEADS, DIM, seed=seed)
    keys = [_randn(n, KV_HEADS, DIM, seed=seed + 1 + b) for b, n in enumerate(kv_lengths)]
    values = [_randn(n, KV_HEADS, DIM, seed=seed + 101 + b) for b, n in enumerate(kv_lengths)]
    k_cache, table = _paged([k.reshape(len(k), -1) for k in keys], block, 40, seed + 7)
    v_cache, _ = _paged([v.reshape(len(v), -1) for v in values], block, 40, seed + 7)
    expected, start = [], 0
    for b, (q_len, kv_len) in enumerate(zip(q_lengths, kv_lengths, strict=True)):
        rows = q[start : start + q_len]
        expected.append(_dense(rows, keys[b], values[b], _causal_bottom_right(q_len, kv_len), scale))
        start += q_len
    keyword = {
        "input_layout": "TND",
        "block_table": table,
        "block_size": block,
        "actual_seq_lengths": np.cumsum(q_lengths).tolist(),
        "actual_seq_lengths_kv": kv_lengths,
        "num_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "scale": scale,
        "sparse_mode": 3,
        "atten_mask": torch.triu(torch.ones(64, 64, dtype=torch.int8), 1),
    }
    return _call({0: q, 1: k_cache, 2: v_cache}, keyword), torch.cat(expected)


@pytest.mark.parametrize(
    ("q_lengths", "kv_lengths"),
    [([1, 1, 1], [5, 130, 17]), ([3, 1, 4], [7, 40, 4])],
    ids=["decode", "chunked-prefill"],
)
def test_paged_tnd_attention_agrees_with_torch_and_a_3_percent_error_is_caught(q_lengths, kv_lengths) -> None:
    call, expected = _tnd_paged(q_lengths, kv_lengths)
    replayed = Registry().find("NPU.npu_fused_infer_attention_score", None).load()(call)
    assert replayed.notes == ()  # everything it needs was recorded
    for dtype in (torch.float32, torch.bfloat16):
        dumped = expected.to(dtype)
        assert _judge(replayed, dumped) == "consistent", dtype
        assert _judge(replayed, dumped * 1.03) == "disagrees", dtype  # the attention output 3 % off
    one_head = expected.to(torch.float32)
    one_head[-1, 5] *= 1.01  # at float32, one head of one token 1 % off is far beyond its rounding
    assert _judge(replayed, one_head) == "disagrees"


def test_a_cache_read_through_another_block_table_disagrees() -> None:
    call, expected = _tnd_paged([1, 1], [40, 20])
    table = call.keyword["block_table"].copy()
    table[0, 1] = 39 - table[0, 1]  # the first request's second block read from another block
    swapped = npu_attention.fused_infer_attention(
        Call(**{**call.__dict__, "keyword": {**call.keyword, "block_table": table}})
    )
    assert _judge(swapped, expected.to(torch.float32)) == "disagrees"


def _flash_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """A bf16 kernel as Ascend's flash pipeline runs it: bf16 inputs, float32 scores and softmax, the
    probabilities rounded to bf16 for the second matmul, float32 accumulation, a bf16 output."""
    q, k, v = (t.to(torch.bfloat16).float() for t in (q, k, v))
    probabilities = torch.softmax(scale * q @ k.transpose(-1, -2), dim=-1).to(torch.bfloat16).float()
    return (probabilities @ v).to(torch.bfloat16)


def test_a_bf16_kernel_that_rounds_its_probabilities_is_consistent() -> None:
    # BNSD, one request of 64 queries over 512 keys, no mask: the rounding of the probabilities
    # before the second matmul is in the model, not a fault
    q, k, v = (_randn(1, HEADS, n, DIM, seed=s) for n, s in ((64, 1), (512, 2), (512, 3)))
    k, v = k[:, :KV_HEADS], v[:, :KV_HEADS]
    group = HEADS // KV_HEADS
    dumped = _flash_bf16(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), 0.25)
    keyword = {"input_layout": "BNSD", "num_heads": HEADS, "num_key_value_heads": KV_HEADS, "scale": 0.25}
    as_dumped = [t.to(torch.bfloat16) for t in (q, k, v)]
    replayed = npu_attention.fused_infer_attention(_call(dict(enumerate(as_dumped)), keyword))
    assert _judge(replayed, dumped) == "consistent"
    assert _judge(replayed, (dumped.float() * 1.03).to(torch.bfloat16)) == "disagrees"


def _bsnd_case(q_len: int, kv_len: int, allowed: torch.Tensor, layout: str, keyword: dict):
    q = _randn(2, q_len, HEADS, DIM, seed=11)
    k, v = _randn(2, kv_len, KV_HEADS, DIM, seed=12), _randn(2, kv_len, KV_HEADS, DIM, seed=13)
    expected = torch.stack([_dense(q[b], k[b], v[b], allowed, 0.5) for b in range(2)])
    common = {"num_heads": HEADS, "num_key_value_heads": KV_HEADS, "scale": 0.5, "input_layout": layout}
    if layout == "BSH":
        args = [t.reshape(2, t.shape[1], -1) for t in (q, k, v)]
        expected = expected.reshape(2, q_len, -1)
    elif layout == "BNSD":
        args = [t.transpose(1, 2) for t in (q, k, v)]
        expected = expected.transpose(1, 2)
    else:
        args = [q, k, v]
    return _call(dict(enumerate(args)), {**common, **keyword}), expected


def _band(q_len: int, kv_len: int, pre: int, nxt: int, bottom_right: bool) -> torch.Tensor:
    i, j = torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :]
    diagonal = i + (kv_len - q_len) if bottom_right else i
    return (j - diagonal >= -pre) & (j - diagonal <= nxt)


MODES = {
    # sparse_mode 2: causal from the top left (q_len < kv_len shows the origin)
    "2": ({"sparse_mode": 2, "atten_mask": torch.ones(8, 8)}, _band(4, 12, 1 << 30, 0, False)),
    "3": ({"sparse_mode": 3, "atten_mask": torch.ones(8, 8)}, _causal_bottom_right(4, 12)),
    # 4: a band of 3 before and 1 after the bottom-right diagonal (msprobe's bench measures it from
    # the top left: with q_len < kv_len that would be wrong)
    "4": (
        {"sparse_mode": 4, "pre_tokens": 3, "next_tokens": 1, "atten_mask": torch.ones(8, 8)},
        _band(4, 12, 3, 1, True),
    ),
}


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_sparse_mode_and_layout_agrees_with_torch(mode: str, layout: str) -> None:
    keyword, allowed = MODES[mode]
    call, expected = _bsnd_case(4, 12, allowed, layout, keyword)
    replayed = npu_attention.fused_infer_attention(call)
    dumped = expected.to(torch.float32)
    assert _judge(replayed, dumped) == "consistent"
    # the same scores under another mode's window are far from it
    other = "3" if mode != "3" else "2"
    _, elsewhere = _bsnd_case(4, 12, MODES[other][1], layout, MODES[other][0])
    assert _judge(replayed, elsewhere.to(torch.float32)) == "disagrees"
    if mode == "4":  # the band measured from the top left, as msprobe's bench does: not the operator
        _, top_left = _bsnd_case(4, 12, _band(4, 12, 3, 1, False), layout, {})
        assert _judge(replayed, top_left.to(torch.float32)) == "disagrees"


def test_a_mask_tensor_leaves_out_its_ones_within_the_tokens_window() -> None:
    # sparse_mode 0 with a mask: 1 leaves a score out; pre_tokens / next_tokens from the top left
    mask = torch.from_numpy(np.random.default_rng(5).random((4, 12)) < 0.3)
    mask[:, 0] = False  # every row keeps a score
    allowed = ~mask & _band(4, 12, 2, 5, False)
    call, expected = _bsnd_case(
        4, 12, allowed, "BSND", {"atten_mask": mask.to(torch.uint8), "pre_tokens": 2, "next_tokens": 5}
    )
    assert _judge(npu_attention.fused_infer_attention(call), expected.to(torch.float32)) == "consistent"


def test_defaults_not_recorded_are_used_and_said() -> None:
    # BSH without num_heads or scale: one head of the whole width, scale 1.0 (not 1/sqrt(D))
    q, k, v = _randn(1, 3, 32, seed=1), _randn(1, 5, 32, seed=2), _randn(1, 5, 32, seed=3)
    expected = _dense(q[0, :, None], k[0, :, None], v[0, :, None], torch.ones(3, 5, dtype=torch.bool), 1.0)
    replayed = npu_attention.fused_infer_attention(_call({0: q, 1: k, 2: v}, {}))
    assert _judge(replayed, expected.reshape(1, 3, 32).to(torch.float32)) == "consistent"
    assert replayed.notes == (
        "input_layout not recorded: torch_npu's default 'BSH'",
        "num_heads not recorded: torch_npu's default 1",
        "scale not recorded: torch_npu's default 1.0",
    )


def test_padding_rows_past_the_query_lengths_are_left_out_and_said() -> None:
    call, expected = _tnd_paged([2, 1], [6, 9])
    q = torch.cat([torch.from_numpy(call.positional[0]), _randn(2, HEADS, DIM, seed=9)])  # 2 rows of padding
    padded = Call(**{**call.__dict__, "positional": {**call.positional, 0: from_torch(q)}})
    replayed = npu_attention.fused_infer_attention(padded)
    dumped = torch.cat([expected, torch.full((2, HEADS, DIM), 1e4, dtype=torch.float64)])  # garbage there
    assert _judge(replayed, dumped.to(torch.float32)) == "consistent"
    assert any("padding rows" in note for note in replayed.notes)


def test_a_sampled_prefill_computes_only_its_rows() -> None:
    q_len = 600  # 600 x 8 rows of 16: above the 2**16 elements replayed whole
    call, expected = _tnd_paged([q_len], [q_len])
    sample = plan(tuple(expected.shape), "a prefill")
    assert sample is not None
    replayed = npu_attention.fused_infer_attention(Call(**{**call.__dict__, "sample": sample}))
    assert replayed.rows is not None and np.array_equal(replayed.rows, sample.rows)
    assert replayed.values.shape == (len(sample.rows), DIM)
    dumped = expected.to(torch.float32)
    assert _judge(replayed, dumped) == "consistent"
    faulty = dumped.clone()
    faulty[:, 2] *= 1.05  # one head wrong at every token: in every sample
    assert _judge(replayed, faulty) == "disagrees"


@pytest.mark.parametrize(
    ("keyword", "said"),
    [
        ({"input_layout": "NTD_TND"}, "NTD_TND"),
        ({"dequant_scale1": torch.ones(1)}, "dequant_scale1"),
        ({"pse_shift": torch.ones(1, 1, 2, 2)}, "pse_shift"),
        ({"input_layout": "TND"}, "actual_seq_lengths not recorded"),
    ],
)
def test_what_is_not_replayed_is_said_by_name(keyword: dict, said: str) -> None:
    q = _randn(2, 1, 16, seed=1)
    with pytest.raises(ReplayImpossible, match=said):
        npu_attention.fused_infer_attention(_call({0: q, 1: q, 2: q}, keyword))
    sink = {"learnable_sink": torch.ones(1)}
    with pytest.raises(ReplayImpossible, match="learnable_sink"):
        npu_attention.fused_infer_attention_v2(_call({0: q, 1: q, 2: q}, sink))


def test_the_v2_and_the_older_apis_read_their_own_argument_names() -> None:
    call, expected = _tnd_paged([1, 1], [9, 33])
    kw = dict(call.keyword)
    v2 = {
        **{
            k: v
            for k, v in kw.items()
            if k not in ("num_heads", "scale", "actual_seq_lengths", "actual_seq_lengths_kv")
        },
        "num_query_heads": HEADS,
        "softmax_scale": kw["scale"],
        "actual_seq_qlen": kw["actual_seq_lengths"],
        "actual_seq_kvlen": kw["actual_seq_lengths_kv"],
    }
    replayed = npu_attention.fused_infer_attention_v2(Call(**{**call.__dict__, "keyword": v2}))
    assert _judge(replayed, expected.to(torch.float32)) == "consistent"
    # IFA: BSH decode, its actual_seq_lengths are the kv lengths
    q = expected.new_tensor(call.positional[0]).reshape(2, 1, HEADS * DIM)
    ifa = {
        "block_table": kw["block_table"],
        "block_size": 16,
        "actual_seq_lengths": kw["actual_seq_lengths_kv"],
        "num_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "scale_value": kw["scale"],
    }
    positional = {0: from_torch(q.contiguous()), 1: call.positional[1], 2: call.positional[2]}
    replayed = npu_attention.incre_flash_attention(
        Call("NPU.npu_incre_flash_attention.0.forward", "x", "msprobe", positional, ifa)
    )
    assert _judge(replayed, expected.reshape(2, 1, -1).to(torch.float32)) == "consistent"


def test_mla_adds_the_rope_parts_scores_and_reads_the_latent_as_value() -> None:
    # DeepSeek's MLA decode: one latent kv head (the cache is key and value), a separate rope part
    heads, latent, rope, lengths = 4, 32, 8, [9, 21]
    q, q_rope = _randn(2, heads, latent, seed=1), _randn(2, heads, rope, seed=2)
    latents = [_randn(n, 1, latent, seed=3 + b) for b, n in enumerate(lengths)]
    ropes = [_randn(n, 1, rope, seed=5 + b) for b, n in enumerate(lengths)]
    cache, table = _paged([t[:, 0] for t in latents], 16, 8, seed=1)
    rope_cache, _ = _paged([t[:, 0] for t in ropes], 16, 8, seed=1)
    expected = torch.cat(
        [
            _dense(
                torch.cat((q[b : b + 1], q_rope[b : b + 1]), -1),
                torch.cat((latents[b], ropes[b]), -1),
                torch.cat((latents[b], torch.zeros(lengths[b], 1, rope, dtype=torch.float64)), -1),
                torch.ones(1, lengths[b], dtype=torch.bool),
                0.1,
            )[..., :latent]
            for b in range(2)
        ]
    )
    keyword = {
        "input_layout": "TND",
        "query_rope": q_rope,
        "key_rope": rope_cache,
        "block_table": table,
        "block_size": 16,
        "actual_seq_lengths": [1, 2],
        "actual_seq_lengths_kv": lengths,
        "num_heads": heads,
        "num_key_value_heads": 1,
        "scale": 0.1,
    }
    replayed = npu_attention.fused_infer_attention(_call({0: q, 1: cache, 2: cache}, keyword))
    assert _judge(replayed, expected.to(torch.float32)) == "consistent"
    without_rope = {k: v for k, v in keyword.items() if k not in ("query_rope", "key_rope")}
    plain = npu_attention.fused_infer_attention(_call({0: q, 1: cache, 2: cache}, without_rope))
    assert _judge(plain, expected.to(torch.float32)) == "disagrees"
