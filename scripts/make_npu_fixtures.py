"""Real msprobe dumps of a W8A8 Llama port on torch_npu's fused operators: ``tests/data/npu/*.tar.xz``.

The golden is transformers' ``LlamaForCausalLM`` (random weights from its config, float32, eager
attention). The test is the same weights served as vllm-ascend serves a W8A8 dynamic model, in bf16:
every linear but ``lm_head`` quantised per output channel to int8 (``weight`` int8, ``weight_scale``
float32), its activations per token (``npu_dynamic_quant`` then ``npu_quant_matmul``), RMSNorm by
``npu_rms_norm``, rope by ``npu_rotary_mul``, the KV cache written by ``npu_scatter_pa_kv_cache`` into
a paged cache (block size 128, the request in block 2 of 3) and attention by
``npu_fused_infer_attention_score`` (TND, paged, ``sparse_mode`` 3), the MLP's activation by
``npu_swiglu``. The modules keep transformers' names and class names, so the two dumps pair by name.

No NPU runs here: each torch_npu operator is written below in torch from its API doc in
Ascend/op-plugin (``docs/context/torch_npu-<api>.md``), and mindstudio-probe's own
``PrecisionDebugger.register_custom_api(module, api, "NPU")`` wraps them, so its records are
``NPU.<api>.<n>.forward`` with the arguments msprobe itself records (kwargs as passed, defaults
not). These implementations share no code with tui-acc's replay (numpy, replay/npu_*.py): a
misreading of a doc would have to be made twice, in two forms, to pass unnoticed.

Cases (one archive: the golden once, a test dump per case):

- ``clean``: the port as it should be;
- ``attention``: layer 0's attention output 3 % off at token 2 (a decode step), inside the kernel;
- ``dequant``: layer 1's ``o_proj`` dequantised with its scale 2 % off, at every token;
- ``rope``: layer 1's rope with the sine's sign flipped (the rotation turned the other way), at every
  token;
- ``kvslot``: layer 1's KV-cache write puts token 2's key and value one slot too far (the attention
  then reads what the slot held before, and is consistent with that).

The tools' venv (docs/formats.md §0)::

    python3 -m venv ~/tools-venv && ~/tools-venv/bin/pip install torch==2.13.0
    ~/tools-venv/bin/pip install mindstudio-probe transformers "numpy<2.0" "pandas<2.3" "ml_dtypes<0.6"
    ~/tools-venv/bin/python scripts/make_npu_fixtures.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_model_fixtures import PROMPT, SEED, _pack, _relativise  # noqa: E402

OUT = REPO / "tests" / "data" / "npu"
NEW_TOKENS = 4
BLOCK, BLOCKS, REQUEST_BLOCK = 128, 3, 2
CASES = ("clean", "attention", "dequant", "rope", "kvslot")
FAULTS = {
    "attention": "layer 0's npu_fused_infer_attention_score output 3 % off at token 2 (a decode step)",
    "dequant": "layer 1's o_proj npu_quant_matmul dequantised with its scale 2 % off, at every token",
    "rope": "layer 1's npu_rotary_mul of the query turns the other way (the sine's sign), at every token",
    "kvslot": "layer 1's npu_scatter_pa_kv_cache writes token 2's key and value one slot too far",
}

# --- torch_npu's operators, in torch, from op-plugin's API docs -----------------------------------

npu = types.ModuleType("torch_npu_from_docs")
STATE: dict[str, Any] = {"case": "clean", "token": -1, "layer": -1, "projection": ""}


def _faulty(kind: str, layer: int, token: int | None = None) -> bool:
    return STATE["case"] == kind and STATE["layer"] == layer and (token is None or STATE["token"] == token)


def npu_rms_norm(x: Any, gamma: Any, epsilon: float = 1e-6) -> Any:
    """``x / sqrt(mean(x^2) + epsilon) * gamma`` in float32, and rstd."""
    import torch

    wide = x.float()
    rstd = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + epsilon)
    return (wide * rstd * gamma.float()).to(x.dtype), rstd


def npu_rotary_mul(x: Any, r1: Any, r2: Any, rotary_mode: str = "half") -> Any:
    """``x * r1 + rotate_half(x) * r2``; rotate_half(x) = cat(-x2, x1)."""
    import torch

    first, second = x.float().chunk(2, dim=-1)
    turned = torch.cat((-second, first), dim=-1)
    sign = -1.0 if _faulty("rope", 1) and STATE["projection"] == "q" else 1.0
    return (x.float() * r1.float() + sign * turned * r2.float()).to(x.dtype)


def npu_dynamic_quant(x: Any, *, smooth_scales: Any = None) -> Any:
    """Per-token symmetric int8: ``scale = rowmax|x| / 127``, ``y = round(x / scale)``."""
    import torch

    wide = x.float()
    scale = wide.abs().amax(dim=-1) / 127.0
    return torch.round(wide / scale.unsqueeze(-1)).clamp(-128, 127).to(torch.int8), scale


def npu_quant_matmul(
    x1: Any, x2: Any, scale: Any, *, pertoken_scale: Any = None, output_dtype: Any = None
) -> Any:
    """``(x1 @ x2) * scale * pertoken_scale``: the int8 products summed exactly (in int64 here, int32
    on the device), dequantised in float32."""
    import torch

    total = (x1.to(torch.int64) @ x2.to(torch.int64)).to(torch.float32)
    used = scale * 1.02 if _faulty("dequant", 1) and STATE["projection"] == "o" else scale
    out = total * used.float()
    if pertoken_scale is not None:
        out = out * pertoken_scale.float().unsqueeze(-1)
    return out.to(output_dtype or torch.int8)


def npu_swiglu(x: Any, dim: int = -1) -> Any:
    """``silu(first half) * second half`` in float32."""
    import torch

    first, second = x.float().chunk(2, dim=dim)
    return (torch.nn.functional.silu(first) * second).to(x.dtype)


def npu_scatter_pa_kv_cache(
    key: Any, value: Any, key_cache: Any, value_cache: Any, slot_mapping: Any, *, cache_mode: str = "PA_NZ"
) -> None:
    """Token i's key and value into ``cache[slot // block_size, slot % block_size]`` (``cache_mode``
    "Norm": an ND cache ``[blocks, block_size, N, D]``); returns nothing."""
    block = key_cache.shape[1]
    if _faulty("kvslot", 1, token=2):
        slot_mapping = slot_mapping + 1
    for i, slot in enumerate(slot_mapping.tolist()):
        key_cache[slot // block, slot % block] = key[i]
        value_cache[slot // block, slot % block] = value[i]


def npu_fused_infer_attention_score(
    query: Any,
    key: Any,
    value: Any,
    *,
    atten_mask: Any = None,
    actual_seq_lengths: Any = None,
    actual_seq_lengths_kv: Any = None,
    block_table: Any = None,
    num_heads: int = 1,
    scale: float = 1.0,
    input_layout: str = "BSH",
    num_key_value_heads: int = 0,
    sparse_mode: int = 0,
    block_size: int = 0,
) -> Any:
    """TND queries, a paged ``[blocks, block_size, N_kv * D]`` cache: per request, its kv tokens
    gathered through ``block_table``, scores ``scale * q k^T`` where ``kv <= q + kv_len - q_len``
    (sparse_mode 3), softmax in float32, probabilities to the inputs' dtype, times v."""
    import torch

    assert input_layout == "TND" and sparse_mode == 3 and block_table is not None
    heads, kv_heads = num_heads, num_key_value_heads or num_heads
    dim = query.shape[-1]
    out = torch.zeros(query.shape, dtype=torch.float32)
    starts = [0, *actual_seq_lengths[:-1]]
    for b, (start, end) in enumerate(zip(starts, actual_seq_lengths, strict=True)):
        kv_len, q_len = actual_seq_lengths_kv[b], end - start
        blocks = block_table[b, : math.ceil(kv_len / block_size)].long()
        k = key.view(key.shape[0], block_size, kv_heads, dim)[blocks].reshape(-1, kv_heads, dim)[:kv_len]
        v = value.view(value.shape[0], block_size, kv_heads, dim)[blocks].reshape(-1, kv_heads, dim)[:kv_len]
        k = k.float().repeat_interleave(heads // kv_heads, dim=1)
        v = v.float().repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("qhd,khd->hqk", query[start:end].float(), k) * scale
        rows = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
        scores = scores.masked_fill(torch.arange(kv_len).unsqueeze(0) > rows, float("-inf"))
        probabilities = torch.softmax(scores, dim=-1).to(query.dtype).float()
        out[start:end] = torch.einsum("hqk,khd->qhd", probabilities, v)
    if _faulty("attention", 0, token=2):
        out = out * 1.03
    return out.to(query.dtype), torch.zeros(1)


for _name in (
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_dynamic_quant",
    "npu_quant_matmul",
    "npu_swiglu",
    "npu_scatter_pa_kv_cache",
    "npu_fused_infer_attention_score",
):
    setattr(npu, _name, globals()[_name])


# --- the port: transformers' module names, torch_npu's operators ------------------------------------


def build_golden() -> Any:
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    config = tf.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        attn_implementation="eager",
        initializer_range=0.2,
    )
    return tf.LlamaForCausalLM(config).eval()


def build_port(golden: Any) -> Any:
    """The test model: the golden's weights, W8A8 linears, bf16, torch_npu's operators."""
    import torch
    from torch import nn

    config = golden.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = config.hidden_size // heads
    bf16 = torch.bfloat16

    class Linear(nn.Module):  # W8A8 dynamic, per-channel weights (vllm-ascend's w8a8_dynamic)
        def __init__(self, source: Any, projection: str = "") -> None:
            super().__init__()
            weight = source.weight.detach().float()
            scale = weight.abs().amax(dim=1) / 127.0
            quantised = torch.round(weight / scale.unsqueeze(1)).clamp(-127, 127).to(torch.int8)
            self.weight = nn.Parameter(quantised, requires_grad=False)
            self.weight_scale = nn.Parameter(scale, requires_grad=False)
            self.projection = projection

        def forward(self, x: Any) -> Any:
            STATE["projection"] = self.projection
            rows = x.reshape(-1, x.shape[-1])
            quantised, per_token = npu.npu_dynamic_quant(rows)
            out = npu.npu_quant_matmul(
                quantised, self.weight.t(), self.weight_scale, pertoken_scale=per_token, output_dtype=bf16
            )
            return out.reshape(*x.shape[:-1], -1)

    class FloatLinear(nn.Module):  # lm_head stays in bf16, as vllm-ascend leaves it
        def __init__(self, source: Any) -> None:
            super().__init__()
            self.weight = nn.Parameter(source.weight.detach().to(bf16), requires_grad=False)

        def forward(self, x: Any) -> Any:
            return nn.functional.linear(x, self.weight)

    FloatLinear.__name__ = FloatLinear.__qualname__ = "Linear"

    class LlamaRMSNorm(nn.Module):
        def __init__(self, source: Any) -> None:
            super().__init__()
            self.weight = nn.Parameter(source.weight.detach().to(bf16), requires_grad=False)
            self.eps = source.variance_epsilon

        def forward(self, x: Any) -> Any:
            return npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
            self.inv_freq = 1.0 / (config.rope_parameters["rope_theta"] ** exponents)

        def forward(self, x: Any, positions: Any) -> Any:  # transformers' signature
            angles = positions.float().unsqueeze(-1) * self.inv_freq
            both = torch.cat((angles, angles), dim=-1)
            return both.cos().to(bf16), both.sin().to(bf16)

    class LlamaAttention(nn.Module):
        def __init__(self, source: Any, layer: int) -> None:
            super().__init__()
            self.layer = layer
            self.q_proj, self.k_proj = Linear(source.q_proj, "q"), Linear(source.k_proj, "k")
            self.v_proj, self.o_proj = Linear(source.v_proj, "v"), Linear(source.o_proj, "o")
            self.register_buffer("key_cache", torch.zeros(BLOCKS, BLOCK, kv_heads, dim, dtype=bf16))
            self.register_buffer("value_cache", torch.zeros(BLOCKS, BLOCK, kv_heads, dim, dtype=bf16))

        def forward(self, x: Any, cos: Any, sin: Any, positions: Any) -> Any:
            STATE["layer"] = self.layer
            tokens = x.shape[1]
            q = self.q_proj(x).view(1, tokens, heads, dim)
            k = self.k_proj(x).view(1, tokens, kv_heads, dim)
            v = self.v_proj(x).view(tokens, kv_heads, dim)
            STATE["projection"] = "q"
            q = npu.npu_rotary_mul(q, cos.unsqueeze(2), sin.unsqueeze(2))
            STATE["projection"] = "k"
            k = npu.npu_rotary_mul(k, cos.unsqueeze(2), sin.unsqueeze(2))
            slots = (REQUEST_BLOCK * BLOCK + positions[0]).to(torch.int32)
            npu.npu_scatter_pa_kv_cache(
                k.view(tokens, kv_heads, dim), v, self.key_cache, self.value_cache, slots, cache_mode="Norm"
            )
            kv_len = int(positions[0, -1]) + 1
            attended, _ = npu.npu_fused_infer_attention_score(
                q.view(tokens, heads, dim),
                self.key_cache.view(BLOCKS, BLOCK, -1),
                self.value_cache.view(BLOCKS, BLOCK, -1),
                atten_mask=torch.triu(torch.ones(128, 128, dtype=torch.int8), diagonal=1),
                actual_seq_lengths=[tokens],
                actual_seq_lengths_kv=[kv_len],
                block_table=torch.tensor([[REQUEST_BLOCK]], dtype=torch.int32),
                num_heads=heads,
                scale=1.0 / math.sqrt(dim),
                input_layout="TND",
                num_key_value_heads=kv_heads,
                sparse_mode=3,
                block_size=BLOCK,
            )
            return self.o_proj(attended.reshape(1, tokens, heads * dim))

    class LlamaMLP(nn.Module):
        def __init__(self, source: Any) -> None:
            super().__init__()
            self.gate_proj, self.up_proj = Linear(source.gate_proj), Linear(source.up_proj)
            self.down_proj = Linear(source.down_proj)

        def forward(self, x: Any) -> Any:
            both = torch.cat((self.gate_proj(x), self.up_proj(x)), dim=-1)
            return self.down_proj(npu.npu_swiglu(both, dim=-1))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self, source: Any, layer: int) -> None:
            super().__init__()
            self.self_attn = LlamaAttention(source.self_attn, layer)
            self.mlp = LlamaMLP(source.mlp)
            self.input_layernorm = LlamaRMSNorm(source.input_layernorm)
            self.post_attention_layernorm = LlamaRMSNorm(source.post_attention_layernorm)

        def forward(self, x: Any, cos: Any, sin: Any, positions: Any) -> Any:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, positions)
            return x + self.mlp(self.post_attention_layernorm(x))

    class LlamaModel(nn.Module):
        def __init__(self, source: Any) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding.from_pretrained(source.embed_tokens.weight.detach().to(bf16))
            self.layers = nn.ModuleList(LlamaDecoderLayer(layer, i) for i, layer in enumerate(source.layers))
            self.norm = LlamaRMSNorm(source.norm)
            self.rotary_emb = LlamaRotaryEmbedding()

        def forward(self, ids: Any, positions: Any) -> Any:
            x = self.embed_tokens(ids)
            cos, sin = self.rotary_emb(x, positions)
            for layer in self.layers:
                x = layer(x, cos, sin, positions)
            return self.norm(x)

    class LlamaForCausalLM(nn.Module):
        def __init__(self, source: Any) -> None:
            super().__init__()
            self.model = LlamaModel(source.model)
            self.lm_head = FloatLinear(source.lm_head)

        def forward(self, ids: Any, positions: Any) -> Any:
            STATE["token"] += 1
            return self.lm_head(self.model(ids, positions)[:, -1:])  # the last position's logits only

    return LlamaForCausalLM(golden).eval()


# --- one side, in its own process ---------------------------------------------------------------------


def _config(out: Path) -> Path:
    config = out.parent / f"{out.name}_config.json"
    settings = {
        "task": "tensor",
        "dump_path": str(out),
        "rank": [],
        "step": [],
        "level": "mix",
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    config.write_text(json.dumps(settings), encoding="utf-8")
    return config


def dump_side(case: str, out: Path) -> list[int]:
    import torch
    from msprobe.pytorch import PrecisionDebugger

    out.mkdir(parents=True)
    golden = build_golden()
    debugger = PrecisionDebugger(config_path=str(_config(out)))
    if case == "golden":
        debugger.start(golden)
        with torch.no_grad():
            ids = golden.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False)
        debugger.stop()
        debugger.step()
        return [int(i) for i in ids[0, len(PROMPT) :]]
    STATE["case"] = case
    port = build_port(golden)
    for name in (n for n in dir(npu) if n.startswith("npu_")):
        PrecisionDebugger.register_custom_api(npu, name, "NPU")
    ids, positions, generated = torch.tensor([PROMPT]), torch.arange(len(PROMPT)).unsqueeze(0), []
    debugger.start(port)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = port(ids, positions)
            ids = logits[:, -1:].float().argmax(-1)
            positions = positions[:, -1:] + 1
            generated.append(int(ids[0, 0]))
    debugger.stop()
    debugger.step()
    return generated


def make_archive(work: Path) -> Path:
    name = "w8a8-llama-msprobe-mix"
    case_dir = work / name
    generated = {}
    for side in ("golden", *CASES):
        target = case_dir / side
        command = [sys.executable, __file__, "--side", side, str(target)]
        result = subprocess.run(command, check=True, cwd=work, capture_output=True, text=True)
        generated[side] = json.loads(result.stdout.strip().splitlines()[-1])
    _relativise(case_dir)
    description = {
        "case": name,
        "golden": "transformers LlamaForCausalLM, float32, eager attention",
        "test": "the same weights, W8A8 dynamic linears (lm_head bf16), bf16, torch_npu's operators "
        "written from op-plugin's docs and wrapped by msprobe's register_custom_api",
        "prompt": PROMPT,
        "new_tokens": NEW_TOKENS,
        "faults": FAULTS,
        "generated": generated,
        "tools": _versions(),
    }
    (case_dir / "case.json").write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
    archive = OUT / f"{name}.tar.xz"
    _pack(case_dir, archive)
    return archive


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("mindstudio-probe", "torch", "transformers")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", nargs=2, metavar=("CASE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        case, out = args.side
        print(json.dumps(dump_side(case, Path(out))))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="tui-acc-npu-") as work:
        archive = make_archive(Path(work))
        print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
