"""A tiny Llama-style causal LM in numpy, seeded, with Hugging Face module names.

Attribute order follows Hugging Face's (``self_attn, mlp, input_layernorm, ...``), which is not
the execution order: a dump of it exercises the same ordering problem real dumps have. The modules
are modules.py's, which hook like torch's: the demo needs no torch (``pip install tui-acc`` does
not bring it) and writes torch's file format all the same (dumps/writers/torch_file.py).

Every operator computes in float64 from its inputs as stored and rounds its result once to the
model's dtype (float32 for the golden run, bfloat16 for the test run); attention is one fused
operator (its probabilities are never rounded, as in a flash-attention kernel) whose rotated
queries and keys are. A float32 or bfloat16 kernel's summation order depends on the CPU (vector
width, BLAS's kernels), so the same seed would give other bits, and other metrics, on another
machine. In float64 another order moves a result by a few of its ulps, some 2**-29 of a float32
ulp: only a result that close to a rounding boundary could round the other way, and the dumps are
the same on every CPU (``tests/unit/test_demo_reproducible.py`` checks the default seed against
other code paths). The test run still carries bfloat16's rounding at every operator, as an NPU
kernel that accumulates in a wider type and writes bfloat16 does. (Written in torch until tui-acc
0.2; this port writes the same bits.)
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import ml_dtypes
import numpy as np

from tui_acc.demo.modules import Module, ModuleList

EMBEDDING_STD = 0.3
FLOAT32 = np.dtype(np.float32)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
Cache = list[np.ndarray]


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
        """The width of one attention head (``hidden_size // num_heads``)."""
        return self.hidden_size // self.num_heads


def wide(x: np.ndarray) -> np.ndarray:
    """``x`` as float64, the precision every operator computes in before it rounds its result once."""
    return x.astype(np.float64)


# How a bfloat16 model rounds each result: to nearest even, as torch and an NPU kernel do, or
# toward zero while ``rounding_toward_zero`` is in force: the demo's baseline (``demo --baseline``),
# a clean bf16 run whose rounding differs from the test's, as another device's kernels' would.
_TOWARD_ZERO = contextvars.ContextVar("bfloat16_toward_zero", default=False)


@contextmanager
def rounding_toward_zero() -> Iterator[None]:
    """Within it, ``rounded`` truncates to bfloat16 instead of rounding to nearest even (this context only:
    a contextvar, so other threads are unaffected)."""
    token = _TOWARD_ZERO.set(True)
    try:
        yield
    finally:
        _TOWARD_ZERO.reset(token)


def rounded(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` (float64) rounded once to ``dtype``."""
    if dtype != BFLOAT16:
        return x.astype(dtype)
    # float64 -> float32 -> bfloat16, as torch converts (c10::BFloat16 is built from a float): the
    # first step moves a value by 2**-29 of a bfloat16 ulp at most
    single = x.astype(np.float32)
    if _TOWARD_ZERO.get():
        # bfloat16 is float32's upper half: clearing the lower 16 bits truncates, exactly
        return (single.view(np.int32) & np.int32(-0x10000)).view(np.float32).astype(BFLOAT16)
    return single.astype(BFLOAT16)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A residual add, rounded once to the activations' dtype."""
    return rounded(wide(a) + wide(b), a.dtype)


def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``x @ weight.T`` in float64 (torch's ``F.linear`` without bias), not rounded."""
    return np.matmul(wide(x), wide(weight).T)


class Linear(Module):
    """``nn.Linear`` without bias (same name in the dump), computed in float64, rounded once to the
    input's dtype."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.register_parameter("weight", np.zeros((out_features, in_features), np.float32))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``x @ weight.T``, rounded once to ``x``'s dtype."""
        return rounded(linear(x, self.weight), x.dtype)


class Embedding(Module):
    def __init__(self, num: int, size: int) -> None:
        super().__init__()
        self.register_parameter("weight", np.zeros((num, size), np.float32))

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``weight`` for the token ids ``ids`` (no arithmetic, so no rounding)."""
        return cast(np.ndarray, self.weight[ids])


class RMSNorm(Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.register_parameter("weight", np.ones(size, np.float32))
        self.eps = eps

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``weight * x / sqrt(mean(x²) + eps)`` over the last axis, in float64, rounded once to ``x``'s
        dtype."""
        x64 = wide(x)
        # torch.rsqrt in float64 is 1 / sqrt: both steps correctly rounded
        normed = x64 * (1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + self.eps))
        return rounded(wide(self.weight) * normed, x.dtype)


class RotaryEmbedding(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.dim = config.head_dim
        self.theta = config.rope_theta

    def forward(self, x: np.ndarray, position_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) of the rotary angles at ``position_ids`` (``[B, S, head_dim]``), each rounded to
        ``x``'s dtype."""
        # Computed here rather than kept as a parameter, which ``model.to(bfloat16)`` would round.
        inv_freq = 1.0 / (self.theta ** (np.arange(0, self.dim, 2, dtype=np.float64) / self.dim))
        freqs = wide(position_ids[..., None]) * inv_freq  # [B, S, dim/2]
        emb = np.concatenate((freqs, freqs), axis=-1)
        return rounded(np.cos(emb), x.dtype), rounded(np.sin(emb), x.dtype)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate((-x[..., half:], x[..., :half]), axis=-1)


class SiLU(Module):
    def forward(self, x: np.ndarray) -> np.ndarray:
        """``x * sigmoid(x)`` in float64, rounded once to ``x``'s dtype."""
        x64 = wide(x)
        return rounded(x64 / (1.0 + np.exp(-x64)), x.dtype)


def _softmax(scores: np.ndarray) -> np.ndarray:
    """Over the last axis, as torch's CPU kernel: exp(x - max), times the reciprocal of the sum."""
    exps = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return cast(np.ndarray, exps * (1.0 / exps.sum(axis=-1, keepdims=True)))


class Attention(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.q_proj = Linear(config.hidden_size, config.num_heads * hd)
        self.k_proj = Linear(config.hidden_size, config.num_kv_heads * hd)
        self.v_proj = Linear(config.hidden_size, config.num_kv_heads * hd)
        self.o_proj = Linear(config.num_heads * hd, config.hidden_size)

    def forward(self, hidden: np.ndarray, cos: np.ndarray, sin: np.ndarray, cache: Cache) -> np.ndarray:
        """The attention block's output: ``o_proj`` of ``context``; ``cache`` (this layer's keys and
        values) is extended in place."""
        return cast(np.ndarray, self.o_proj(self.context(hidden, cos, sin, cache)))

    def context(self, hidden: np.ndarray, cos: np.ndarray, sin: np.ndarray, cache: Cache) -> np.ndarray:
        """The attention's output before ``o_proj`` (what a tensor-parallel rank splits), rounded once."""
        c = self.config
        b, s, _ = hidden.shape
        q = wide(self.q_proj(hidden)).reshape(b, s, c.num_heads, c.head_dim).transpose(0, 2, 1, 3)
        k = wide(self.k_proj(hidden)).reshape(b, s, c.num_kv_heads, c.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(hidden).reshape(b, s, c.num_kv_heads, c.head_dim).transpose(0, 2, 1, 3)
        cos_, sin_ = wide(cos[:, None]), wide(sin[:, None])
        # The rotary kernel writes both in the model's dtype, and the KV cache holds it.
        q = wide(rounded(q * cos_ + _rotate_half(q) * sin_, hidden.dtype))
        k = rounded(k * cos_ + _rotate_half(k) * sin_, hidden.dtype)
        if cache:
            k = np.concatenate((cache[0], k), axis=2)
            v = np.concatenate((cache[1], v), axis=2)
        cache[:] = [k, v]
        groups = c.num_heads // c.num_kv_heads
        k64 = np.repeat(wide(k), groups, axis=1)
        v64 = np.repeat(wide(v), groups, axis=1)
        scores = (q @ k64.swapaxes(-1, -2)) / c.head_dim**0.5
        total = k64.shape[2]
        causal = np.tril(np.ones((s, total), dtype=bool), total - s)
        probs = _softmax(np.where(causal, scores, -np.inf))
        context = (probs @ v64).transpose(0, 2, 1, 3).reshape(b, s, c.num_heads * c.head_dim)
        return rounded(context, hidden.dtype)


class MLP(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size)
        self.act_fn = SiLU()

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``down_proj(act(gate_proj(x)) * up_proj(x))``."""
        return cast(np.ndarray, self.down_proj(self.gated(x)))

    def gated(self, x: np.ndarray) -> np.ndarray:
        """``act(gate(x)) * up(x)``, rounded once: ``down_proj``'s input (what a rank splits)."""
        return rounded(wide(self.act_fn(self.gate_proj(x))) * wide(self.up_proj(x)), x.dtype)


class DecoderLayer(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)

    def forward(self, hidden: np.ndarray, cos: np.ndarray, sin: np.ndarray, cache: Cache) -> np.ndarray:
        """One decoder layer, pre-norm: attention then MLP, each added to the residual; ``cache`` grows in
        place."""
        hidden = add(hidden, self.self_attn(self.input_layernorm(hidden), cos, sin, cache))
        return add(hidden, self.mlp(self.post_attention_layernorm(hidden)))


class TinyModel(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = ModuleList([DecoderLayer(config) for _ in range(config.num_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.rotary_emb = RotaryEmbedding(config)

    def decoder_layers(self) -> list[DecoderLayer]:
        """The decoder layers in order, typed (``layers`` iterates plain modules)."""
        return cast(list[DecoderLayer], list(self.layers))

    def forward(self, input_ids: np.ndarray, position_ids: np.ndarray, caches: list[Cache]) -> np.ndarray:
        """The final hidden states (``[B, S, hidden_size]``, normed); each layer's cache in ``caches``
        grows in place."""
        hidden = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(hidden, position_ids)
        for layer, cache in zip(self.layers, caches, strict=True):
            hidden = layer(hidden, cos, sin, cache)
        return cast(np.ndarray, self.norm(hidden))


class TinyLlamaForCausalLM(Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.model = TinyModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids: np.ndarray, position_ids: np.ndarray, caches: list[Cache]) -> np.ndarray:
        """The logits of the last position only (``[B, 1, vocab_size]``), as transformers' ``generate()``
        computes them."""
        hidden = self.model(input_ids, position_ids, caches)
        # Like transformers' generate(): logits of the last position only.
        return cast(np.ndarray, self.lm_head(hidden[:, -1:, :]))


def build_model(seed: int, config: TinyConfig | None = None) -> TinyLlamaForCausalLM:
    """The same weights for every caller with the same seed, on every CPU: numpy's seeded
    generator in float64, rounded once to float32 (``.to(BFLOAT16)`` rounds them again for a
    bfloat16 model)."""
    model = TinyLlamaForCausalLM(config or TinyConfig())
    rng = np.random.default_rng(seed)
    for module in model.modules():
        weight = module._parameters.get("weight")
        if isinstance(module, Embedding):
            # The blocks' outputs are then of the residual stream's size, as in a trained model,
            # so that a fault inside a block shows in the layer's output (at N(0, 1) it hardly did).
            values = EMBEDDING_STD * rng.standard_normal(weight.shape)
        elif isinstance(module, Linear):
            bound = 1.0 / module.in_features**0.5  # nn.Linear's own default scale
            values = rng.uniform(-bound, bound, weight.shape)
        else:
            continue
        module.register_parameter("weight", values.astype(np.float32))
    return model


def generate(
    model: TinyLlamaForCausalLM,
    prompt: list[int],
    new_tokens: int,
    on_token: Callable[[int], None] | None = None,
) -> list[int]:
    """Greedy decoding with a KV cache: token 0 is the prefill, token k the k-th decode step."""
    caches: list[Cache] = [[] for _ in model.model.layers]
    ids = np.array([prompt], dtype=np.int64)
    positions = np.arange(len(prompt), dtype=np.int64)[None]
    out: list[int] = []
    for _ in range(new_tokens):
        logits = model(ids, positions, caches)
        next_id = int(logits[0, -1].astype(np.float32).argmax())
        out.append(next_id)
        if on_token is not None:
            on_token(len(out) - 1)
        ids = np.array([[next_id]], dtype=np.int64)
        positions = positions[:, -1:] + 1
    return out
