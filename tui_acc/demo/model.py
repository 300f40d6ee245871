"""A tiny Llama-style causal LM in plain torch, seeded, with Hugging Face module names.

Attribute order follows Hugging Face's (``self_attn, mlp, input_layernorm, ...``), which is not
the execution order: a dump of it exercises the same ordering problem real dumps have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


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


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the model dtype, as Hugging Face's LlamaRMSNorm does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        dim = config.head_dim
        self.register_buffer(
            "inv_freq", 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2).float() / dim)), persistent=False
        )

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]  # a registered buffer
        freqs = position_ids[..., None].float() * inv_freq  # [B, S, dim/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class SiLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(x)


class Attention(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, config.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, config.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(config.num_heads * hd, config.hidden_size, bias=False)

    def forward(
        self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: list[torch.Tensor]
    ) -> torch.Tensor:
        c = self.config
        b, s, _ = hidden.shape
        q = self.q_proj(hidden).view(b, s, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(hidden).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(hidden).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        cos_, sin_ = cos[:, None], sin[:, None]
        q = q * cos_ + _rotate_half(q) * sin_
        k = k * cos_ + _rotate_half(k) * sin_
        if cache:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        cache[:] = [k, v]
        groups = c.num_heads // c.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) / c.head_dim**0.5
        total = k.shape[2]
        causal = torch.ones(s, total, dtype=torch.bool).tril(total - s)
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        context = (probs @ v).transpose(1, 2).reshape(b, s, c.num_heads * c.head_dim)
        return self.o_proj(context)


class MLP(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


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
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


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
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, caches: list[list[torch.Tensor]]
    ) -> torch.Tensor:
        hidden = self.model(input_ids, position_ids, caches)
        # Like transformers' generate(): logits of the last position only.
        return self.lm_head(hidden[:, -1:, :])


def build_model(seed: int, config: TinyConfig | None = None) -> TinyLlamaForCausalLM:
    """The same weights for every caller with the same seed."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = TinyLlamaForCausalLM(config or TinyConfig())
        with torch.no_grad():
            model.model.embed_tokens.weight.normal_(0.0, 1.0)
    finally:
        torch.random.set_rng_state(generator_state)
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
