"""A tiny Llama-style causal LM in plain torch, seeded, with Hugging Face module names.

Attribute order follows Hugging Face's (``self_attn, mlp, input_layernorm, ...``), which is not
the execution order: a dump of it exercises the same ordering problem real dumps have.

Every operator computes in float64 from its inputs as stored and rounds its result once to the
model's dtype (float32 for the golden run, bfloat16 for the test run); attention is one fused
operator (its probabilities are never rounded, as in a flash-attention kernel) whose rotated
queries and keys are. A float32 or bfloat16 kernel's summation order depends on the CPU (vector
width, oneDNN's bf16 instructions), so the same seed would give other bits, and other metrics, on
another machine. In float64 another order moves a result by a few of its ulps, some 2**-29 of a
float32 ulp: only a result that close to a rounding boundary could round the other way, and the
dumps are the same on every CPU (``tests/unit/test_demo_reproducible.py`` checks the default seed
against other code paths). The test run still carries bfloat16's rounding at every operator, as
an NPU kernel that accumulates in a wider type and writes bfloat16 does.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

EMBEDDING_STD = 0.3


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 176
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64)


# How a bfloat16 model rounds each result: to nearest even, as torch and an NPU kernel do, or
# toward zero while ``rounding_toward_zero`` is in force: the demo's baseline (``demo --baseline``),
# a clean bf16 run whose rounding differs from the test's, as another device's kernels' would.
_TOWARD_ZERO = contextvars.ContextVar("bfloat16_toward_zero", default=False)


@contextmanager
def rounding_toward_zero() -> Iterator[None]:
    token = _TOWARD_ZERO.set(True)
    try:
        yield
    finally:
        _TOWARD_ZERO.reset(token)


def _rounded(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float64) rounded once to ``dtype``."""
    if dtype is torch.bfloat16 and _TOWARD_ZERO.get():
        # bfloat16 is float32's upper half: clearing the lower 16 bits truncates, exactly (the
        # float64 -> float32 step first rounds to nearest, 2**-16 of a bfloat16 ulp at most)
        bits = x.to(torch.float32).view(torch.int32) & -0x10000
        return bits.view(torch.float32).to(torch.bfloat16)
    return x.to(dtype)


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A residual add, rounded once to the activations' dtype."""
    return _rounded(_wide(a) + _wide(b), a.dtype)


class Linear(nn.Linear):
    """``nn.Linear`` (same name in the dump) computed in float64, rounded once to the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else _wide(self.bias)
        return _rounded(nn.functional.linear(_wide(x), _wide(self.weight), bias), x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x64 = _wide(x)
        normed = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + self.eps)
        return _rounded(_wide(self.weight) * normed, x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.dim = config.head_dim
        self.theta = config.rope_theta

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Computed here rather than kept as a buffer, which ``model.to(bfloat16)`` would round.
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))
        freqs = _wide(position_ids[..., None]) * inv_freq  # [B, S, dim/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return _rounded(emb.cos(), x.dtype), _rounded(emb.sin(), x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class SiLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rounded(nn.functional.silu(_wide(x)), x.dtype)


class Attention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.q_proj = Linear(config.hidden_size, config.num_heads * hd, bias=False)
        self.k_proj = Linear(config.hidden_size, config.num_kv_heads * hd, bias=False)
        self.v_proj = Linear(config.hidden_size, config.num_kv_heads * hd, bias=False)
        self.o_proj = Linear(config.num_heads * hd, config.hidden_size, bias=False)

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list[torch.Tensor]
    ) -> torch.Tensor:
        return self.o_proj(self.context(hidden, cos, sin, cache))

    def context(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list[torch.Tensor]
    ) -> torch.Tensor:
        """The attention's output before ``o_proj`` (what a tensor-parallel rank splits), rounded once."""
        c = self.config
        b, s, _ = hidden.shape
        q = _wide(self.q_proj(hidden)).view(b, s, c.num_heads, c.head_dim).transpose(1, 2)
        k = _wide(self.k_proj(hidden)).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(hidden).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        cos_, sin_ = _wide(cos[:, None]), _wide(sin[:, None])
        # The rotary kernel writes both in the model's dtype, and the KV cache holds it.
        q = _wide(_rounded(q * cos_ + _rotate_half(q) * sin_, hidden.dtype))
        k = _rounded(k * cos_ + _rotate_half(k) * sin_, hidden.dtype)
        if cache:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        cache[:] = [k, v]
        groups = c.num_heads // c.num_kv_heads
        k64 = _wide(k).repeat_interleave(groups, dim=1)
        v64 = _wide(v).repeat_interleave(groups, dim=1)
        scores = (q @ k64.transpose(-1, -2)) / c.head_dim**0.5
        total = k64.shape[2]
        causal = torch.ones(s, total, dtype=torch.bool).tril(total - s)
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        context = (probs @ v64).transpose(1, 2).reshape(b, s, c.num_heads * c.head_dim)
        return _rounded(context, hidden.dtype)


class MLP(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.gated(x))

    def gated(self, x: torch.Tensor) -> torch.Tensor:
        """``act(gate(x)) * up(x)``, rounded once: ``down_proj``'s input (what a rank splits)."""
        return _rounded(_wide(self.act_fn(self.gate_proj(x))) * _wide(self.up_proj(x)), x.dtype)


class DecoderLayer(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list[torch.Tensor]
    ) -> torch.Tensor:
        hidden = _add(hidden, self.self_attn(self.input_layernorm(hidden), cos, sin, cache))
        return _add(hidden, self.mlp(self.post_attention_layernorm(hidden)))


class TinyModel(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.rotary_emb = RotaryEmbedding(config)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, caches: list[list[torch.Tensor]]
    ) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(hidden, position_ids)
        for layer, cache in zip(self.layers, caches, strict=True):
            hidden = layer(hidden, cos, sin, cache)
        return self.norm(hidden)


class TinyLlamaForCausalLM(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.model = TinyModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, caches: list[list[torch.Tensor]]
    ) -> torch.Tensor:
        hidden = self.model(input_ids, position_ids, caches)
        # Like transformers' generate(): logits of the last position only.
        return self.lm_head(hidden[:, -1:, :])


def build_model(seed: int, config: TinyConfig | None = None) -> TinyLlamaForCausalLM:
    """The same weights for every caller with the same seed, on every CPU.

    The weights come from numpy's seeded generator in float64, rounded once to float32: torch's
    own ``normal_`` takes a vectorised path on some CPUs and a scalar one on others.
    """
    generator_state = torch.random.get_rng_state()
    try:
        model = TinyLlamaForCausalLM(config or TinyConfig())  # torch's initialisation is overwritten
    finally:
        torch.random.set_rng_state(generator_state)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                # The blocks' outputs are then of the residual stream's size, as in a trained model,
                # so that a fault inside a block shows in the layer's output (at N(0, 1) it hardly did).
                values = EMBEDDING_STD * rng.standard_normal(tuple(module.weight.shape))
            elif isinstance(module, nn.Linear):
                bound = 1.0 / module.in_features**0.5  # nn.Linear's own default scale
                values = rng.uniform(-bound, bound, tuple(module.weight.shape))
            else:
                continue
            module.weight.copy_(torch.from_numpy(values.astype(np.float32)))
    return model.eval()


@torch.no_grad()
def generate(
    model: TinyLlamaForCausalLM,
    prompt: list[int],
    new_tokens: int,
    on_token: Callable[[int], None] | None = None,
) -> list[int]:
    """Greedy decoding with a KV cache: token 0 is the prefill, token k the k-th decode step."""
    caches: list[list[torch.Tensor]] = [[] for _ in model.model.layers]
    ids = torch.tensor([prompt])
    positions = torch.arange(len(prompt))[None]
    out: list[int] = []
    for _ in range(new_tokens):
        logits = model(ids, positions, caches)
        next_id = int(logits[0, -1].float().argmax())
        out.append(next_id)
        if on_token is not None:
            on_token(len(out) - 1)
        ids = torch.tensor([[next_id]])
        positions = positions[:, -1:] + 1
    return out
