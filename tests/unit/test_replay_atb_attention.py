"""ATB's attention, rope, KV-cache and quantised linear operations replayed (replay/atb_attention.py,
atb_ops.py), held against torch computing each from the operations' documented intensors and
parameters: SDPA per token or request, the rope written as rotations of its documented pairs, an
int8 matmul summed in int64."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import atb_attention, atb_ops
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.verdicts.replay_check import _judged

HEADS, KV_HEADS, DIM, BLOCK, BLOCKS = 4, 2, 16, 8, 10


def _call(op: str, intensors: list, params: dict, output: torch.Tensor) -> Call:
    positional = {
        i: from_torch(t.contiguous()) if isinstance(t, torch.Tensor) else t for i, t in enumerate(intensors)
    }
    dtype = str(output.dtype).removeprefix("torch.")
    return Call(op, op, "msit-atb", positional, params, output_dtype=dtype, output_shape=tuple(output.shape))


def _judge(replayed: Replayed, dumped: torch.Tensor, call: Call) -> str:
    gathered = Gathered(call, from_torch(dumped.contiguous()), "outtensor0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape)).to(torch.float64)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """q [q_len, N, D], k/v [kv_len, N_kv, D] -> [q_len, N, D] (GQA by repeated kv heads)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=allowed, scale=scale
    )
    return out.transpose(0, 1)


@pytest.mark.parametrize("layout", ["nd", "nz", "nz-bin"], ids=["ND cache", "NZ cache", "NZ .bin cache"])
def test_paged_attention_reads_each_tokens_blocks(layout: str, tmp_path) -> None:
    lengths = [5, 19, 11]
    block = 16 if layout == "nz-bin" else BLOCK  # a FRACTAL_NZ .bin pads its rows to 16: a real block size
    rng = np.random.default_rng(0)
    tables = torch.from_numpy(rng.permutation(BLOCKS)[: 3 * 3].reshape(3, 3)).to(torch.int32)
    key_cache, value_cache = (
        _randn(BLOCKS, block, KV_HEADS, DIM, seed=1),
        _randn(BLOCKS, block, KV_HEADS, DIM, seed=2),
    )
    q = _randn(3, HEADS, DIM, seed=3)
    expected = []
    for i, n in enumerate(lengths):
        k = key_cache[tables[i].long()].reshape(-1, KV_HEADS, DIM)[:n]
        v = value_cache[tables[i].long()].reshape(-1, KV_HEADS, DIM)[:n]
        expected.append(_sdpa(q[i : i + 1], k, v, None, 0.25))
    dumped = torch.cat(expected).to(torch.float32)
    if layout != "nd":  # [blocks, N_kv * D / 16, block_size, 16]: each token's row in chunks of 16
        key_cache, value_cache = (
            c.reshape(BLOCKS, block, -1, 16).transpose(1, 2) for c in (key_cache, value_cache)
        )
    if layout == "nz-bin":  # the same tiles in a FRACTAL_NZ .bin: the reader un-tiles them
        key_cache, value_cache = (
            _through_nz_bin(c, tmp_path / f"{i}.bin") for i, c in enumerate((key_cache, value_cache))
        )
        assert key_cache.shape == (BLOCKS, block, KV_HEADS * DIM)
    params = {"headNum": HEADS, "kvHeadNum": KV_HEADS, "qkScale": 0.25}
    lens = torch.tensor(lengths, dtype=torch.int32)
    call = _call("PagedAttentionOperation", [q, key_cache, value_cache, tables, lens], params, dumped)
    replayed = atb_attention.paged_attention(call)
    assert _judge(replayed, dumped, call) == "consistent"
    assert _judge(replayed, dumped * 1.03, call) == "disagrees"
    shorter = _call("PagedAttentionOperation", [q, key_cache, value_cache, tables, lens - 1], params, dumped)
    assert _judge(atb_attention.paged_attention(shorter), dumped, call) == "disagrees"  # one token short


def _through_nz_bin(tiles: torch.Tensor, path) -> torch.Tensor:
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.dumps.writers.atb_bin import write_bin

    stored = load_tensor(write_bin(path, tiles.to(torch.float32).contiguous(), format_code=29), ANYWHERE)
    return torch.from_numpy(np.asarray(stored)).to(torch.float64)


def test_paged_attention_refuses_what_it_does_not_model_by_name() -> None:
    q = _randn(1, HEADS, DIM, seed=1)
    call = _call("PagedAttentionOperation", [q], {"quantType": 1}, q)
    with pytest.raises(ReplayImpossible, match="quantType"):
        atb_attention.paged_attention(call)


@pytest.mark.parametrize(
    "mask_type", [0, 1, 3, 9], ids=["no mask", "NORM 0/1 mask", "NORM_COMPRESS", "CAUSAL_MASK"]
)
def test_self_attention_pa_encoder_attends_within_each_request(mask_type: int) -> None:
    seq = [3, 6]
    q, k, v = (
        _randn(sum(seq), heads, DIM, seed=s) for s, heads in ((1, HEADS), (2, KV_HEADS), (3, KV_HEADS))
    )
    causal = mask_type != 0
    expected, start = [], 0
    for n in seq:
        allowed = torch.ones(n, n, dtype=torch.bool).tril() if causal else None
        expected.append(
            _sdpa(q[start : start + n], k[start : start + n], v[start : start + n], allowed, 0.5 * 0.5)
        )
        start += n
    dumped = torch.cat(expected).reshape(sum(seq), -1).to(torch.float32)
    params = {
        "headNum": HEADS,
        "kvHeadNum": KV_HEADS,
        "qScale": 0.5,
        "qkScale": 0.5,
        "calcType": 3,
        "maskType": mask_type,
    }
    flat = [t.reshape(t.shape[0], -1) for t in (q, k, v)]
    # NORM: a mask, 1 leaves a score out; NORM_COMPRESS: a compressed causal template (not read)
    extra = [torch.ones(8, 8).triu(1)] if mask_type in (1, 3) else []  # CAUSAL_MASK: no mask intensor
    call = _call(
        "SelfAttentionOperation", [*flat, *extra, torch.tensor(seq, dtype=torch.int32)], params, dumped
    )
    replayed = atb_attention.self_attention(call)
    assert _judge(replayed, dumped, call) == "consistent"
    assert _judge(replayed, dumped * 1.03, call) == "disagrees"


def _rotate_pairs(
    x: torch.Tensor, pairs: list[tuple[int, int]], cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """Each (a, b) pair of a head's values turned by its angle: (a cos - b sin, b cos + a sin), the
    angle's cosine and sine read at a (the rope tables repeat each angle at both members)."""
    out = x.clone()
    for a, b in pairs:
        out[..., a] = x[..., a] * cos[..., a] - x[..., b] * sin[..., a]
        out[..., b] = x[..., b] * cos[..., b] + x[..., a] * sin[..., b]
    return out


@pytest.mark.parametrize("coeff", [2, 4, DIM], ids=["halves (NeoX)", "4 (ChatGLM)", "pairs (GPT-J)"])
def test_rope_rotates_the_pairs_its_coefficient_names(coeff: int) -> None:
    tokens = 3
    stride = DIM // coeff
    # segment s of width 2r pairs element i with i + r, for i in its first half
    pairs = [
        (2 * stride * s + i, 2 * stride * s + stride + i) for s in range(coeff // 2) for i in range(stride)
    ]
    angles = torch.zeros(tokens, DIM, dtype=torch.float64)
    base = _randn(tokens, DIM // 2, seed=5)
    for index, (a, b) in enumerate(pairs):
        angles[:, a] = angles[:, b] = base[:, index]
    cos, sin = angles.cos(), angles.sin()
    q, k = _randn(tokens, HEADS, DIM, seed=6), _randn(tokens, KV_HEADS, DIM, seed=7)
    expected = _rotate_pairs(q, pairs, cos[:, None, :], sin[:, None, :]).reshape(tokens, -1).to(torch.float32)
    intensors = [
        q.reshape(tokens, -1),
        k.reshape(tokens, -1),
        cos,
        sin,
        torch.tensor([tokens], dtype=torch.int32),
    ]
    call = _call("RopeOperation", intensors, {"rotaryCoeff": coeff}, expected)
    replayed = atb_attention.rope(call)
    assert _judge(replayed, expected, call) == "consistent"
    other = 2 if coeff != 2 else DIM
    assert (
        _judge(
            atb_attention.rope(_call("RopeOperation", intensors, {"rotaryCoeff": other}, expected)),
            expected,
            call,
        )
        == "disagrees"
    )
    defaulted = atb_attention.rope(_call("RopeOperation", intensors, {}, expected))
    assert defaulted.notes == ("rotaryCoeff not in op_param.json: ATB's default 4",)


def test_reshape_and_cache_is_checked_through_its_own_outtensors() -> None:
    key, value = _randn(3, KV_HEADS, DIM, seed=1), _randn(3, KV_HEADS, DIM, seed=2)
    caches = [_randn(BLOCKS, BLOCK, KV_HEADS, DIM, seed=s) for s in (3, 4)]
    slots = torch.tensor([9, 0, 30], dtype=torch.int32)
    after = []
    for cache, rows in zip(caches, (key, value), strict=True):
        written = cache.clone()
        for i, s in enumerate(slots.tolist()):
            written[s // BLOCK, s % BLOCK] = rows[i]
        after.append(written)
    call = _call("ReshapeAndCacheOperation", [key, value, *caches, slots], {}, after[0])
    good = Call(
        **{
            **call.__dict__,
            "after": {"key": from_torch(after[0]), "value": from_torch(after[1])},
            "after_by": "out",
        }
    )
    replayed = atb_attention.reshape_and_cache(good)
    assert _judge(replayed, after[0], good) == "consistent"
    shifted = atb_attention.reshape_and_cache(
        Call(**{**good.__dict__, "positional": {**good.positional, 4: from_torch(slots + 1)}})
    )
    assert _judge(shifted, after[0], good) == "disagrees"


def test_reshape_and_cache_into_an_nz_cache_read_from_a_fractal_nz_bin(tmp_path) -> None:
    """kvCacheCfg NZ, the caches dumped as FRACTAL_NZ ``[blocks, N_kv * D / 16, block_size, 16]``:
    token s's row is ``cache[s // block_size, :, s % block_size, :]``, chunk by chunk (float32
    caches: the rows are float32's too)."""
    key, value = (_randn(3, KV_HEADS, DIM, seed=s).float().double() for s in (1, 2))
    slots = torch.tensor([9, 0, 30], dtype=torch.int32)
    before, after = [], []
    for seed, rows in ((3, key), (4, value)):
        tiles = _randn(BLOCKS, KV_HEADS * DIM // 16, 16, 16, seed=seed)
        written = tiles.clone()
        for i, slot in enumerate(slots.tolist()):
            written[slot // 16, :, slot % 16, :] = rows[i].reshape(-1, 16)
        before.append(_through_nz_bin(tiles, tmp_path / f"b{seed}.bin"))
        after.append(_through_nz_bin(written, tmp_path / f"a{seed}.bin"))
    call = _call("ReshapeAndCacheOperation", [key, value, *before, slots], {"kvCacheCfg": 2}, after[0])
    good = replace(call, after={"key": from_torch(after[0]), "value": from_torch(after[1])}, after_by="out")
    assert _judge(atb_attention.reshape_and_cache(good), after[0], good) == "consistent"
    shifted = replace(good, positional={**good.positional, 4: from_torch(slots + 1)})
    assert _judge(atb_attention.reshape_and_cache(shifted), after[0], good) == "disagrees"


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_quantised_linear_operation_finds_its_scale_by_dtype_not_by_count(with_bias: bool) -> None:
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.integers(-127, 128, (5, 32))).to(torch.int8)
    weight = torch.from_numpy(rng.integers(-127, 128, (24, 32))).to(torch.int8)  # [n, k]: transposeB
    bias = torch.from_numpy(rng.integers(-100, 100, 24)).to(torch.int32)
    scale = torch.from_numpy(rng.uniform(1e-4, 2e-4, 24)).to(torch.float32)
    total = (x.long() @ weight.long().T).double() + (bias.double() if with_bias else 0)
    dumped = (total * scale.double()).to(torch.float16)
    intensors = [x, weight, *([bias] if with_bias else []), scale]
    call = _call("LinearOperation", intensors, {"transposeB": True, "outDataType": 1}, dumped)
    replayed = atb_ops.linear(call)
    assert _judge(replayed, dumped, call) == "consistent"
    assert _judge(replayed, (total * scale.double() * 1.02).to(torch.float16), call) == "disagrees"
    # its int8 operands carry their own rounding to integers: rms 1/sqrt(12) a step, per element

    def rounding(a: torch.Tensor) -> float:
        return (a.numel() / 12) ** 0.5 / a.double().norm().item()

    assert replayed.quantisation == pytest.approx(np.hypot(rounding(x), rounding(weight)), rel=1e-9)


def test_a_quantised_linear_reads_its_fractal_nz_weight_as_the_matrix_it_tiles(tmp_path) -> None:
    """An int8 weight ``[20, 40]`` stored as ATB's four-dim FRACTAL_NZ ``[1, 2, 32, 32]`` (rows
    padded to 16, columns to the 32-wide tile), tiled here element by element."""
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.dumps.writers.atb_bin import write_bin

    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.integers(-127, 128, (5, 40))).to(torch.int8)
    weight = rng.integers(-127, 128, (20, 40)).astype(np.int8)
    tiles = np.zeros((1, 2, 32, 32), dtype=np.int8)
    for h in range(20):
        for w in range(40):
            tiles[0, w // 32, h, w % 32] = weight[h, w]
    stored = load_tensor(write_bin(tmp_path / "w.bin", tiles, format_code=29), ANYWHERE)
    assert stored.shape == (1, 32, 64)
    scale = torch.from_numpy(rng.uniform(1e-4, 2e-4, 20)).to(torch.float32)
    total = x.long() @ torch.from_numpy(weight).long().T
    dumped = (total.double() * scale.double()).to(torch.float16)
    call = _call("LinearOperation", [x, stored, scale], {"transposeB": True, "outDataType": 1}, dumped)
    assert _judge(atb_ops.linear(call), dumped, call) == "consistent"


def test_elewise_dynamic_quant_scales_each_row_to_127_at_its_largest() -> None:
    # ElewiseOperation ELEWISE_DYNAMIC_QUANT (19): y = round(x / (rowmax|x| / 127)), int8
    x = _randn(6, 40, seed=7).to(torch.bfloat16)
    scale = x.double().abs().amax(dim=-1, keepdim=True) / 127
    y = torch.round(x.double() / scale).to(torch.int8)
    call = _call("ElewiseOperation", [x], {"elewiseType": 19, "quantParam": {"asymmetric": False}}, y)
    replayed = atb_ops.elewise(call)
    assert _judge(replayed, y, call) == "consistent"
    one_off = y.clone()
    one_off[2, 5] += 1 if y[2, 5] < 127 else -1
    assert _judge(replayed, one_off, call) == "disagrees"
    asymmetric = _call("ElewiseOperation", [x], {"elewiseType": 19, "quantParam": {"asymmetric": True}}, y)
    with pytest.raises(ReplayImpossible, match="asymmetric"):
        atb_ops.elewise(asymmetric)


def test_elewise_quant_per_channel_divides_by_each_channels_scale_and_adds_its_offset() -> None:
    # ELEWISE_QUANT_PER_CHANNEL (17): intensors x, scale, offset; round(x / scale) + offset, last axis
    x = _randn(4, 16, seed=8).to(torch.float16)
    scale = torch.from_numpy(np.random.default_rng(9).uniform(0.01, 0.03, 16)).to(torch.float16)
    offset = torch.from_numpy(np.random.default_rng(10).integers(-3, 4, 16)).to(torch.int8)
    y = (torch.round(x.double() / scale.double()) + offset.double()).clamp(-128, 127).to(torch.int8)
    call = _call("ElewiseOperation", [x, scale, offset], {"elewiseType": 17}, y)
    assert _judge(atb_ops.elewise(call), y, call) == "consistent"
    shifted = (y.long() - offset).to(torch.int8)  # the offset left out
    assert _judge(atb_ops.elewise(call), shifted, call) == "disagrees"
