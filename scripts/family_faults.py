"""The models and the bugs of ``make_family_fixtures.py``: tiny random-weight models from transformers
configs, and faults injected inside their computation (never by editing a dump).

A fault wraps the faulty module's ``forward`` (L0, msit, SGLang: every dumper's module hook sees
the faulty output), or the ``torch.nn.functional`` call inside that module (L1 and mix: the fault
sits inside msprobe's API record, and the tensors it touches are not recorded, since msprobe skips
API calls nested in another). Runs in the tools' environment only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# weights at std 0.2, not transformers' 0.02, so that a faulty operator's error reaches the logits
# (make_model_fixtures.py's build_model says why)
COMMON = {"vocab_size": 256, "attn_implementation": "eager", "initializer_range": 0.2}
LLAMA_LIKE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
    **COMMON,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,
    "qwen3": {**LLAMA_LIKE, "head_dim": 8},
    "gemma3": {**LLAMA_LIKE, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh"},
    "phi3": {**LLAMA_LIKE, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
    "mixtral": {**LLAMA_LIKE, "num_local_experts": 4, "num_experts_per_tok": 2},
    # a sliding window shorter than the 9 positions a run reaches (the defaults, 4096, never slide)
    "mistral": {**LLAMA_LIKE, "sliding_window": 4},
    "gemma2": {**LLAMA_LIKE, "head_dim": 8, "sliding_window": 4},  # soft-capping: the defaults
    # Olmo2Config's defaults would have generate() mask the prompt's first token as padding (pad 1)
    # and name an end-of-text token past the vocabulary (eos 50279)
    "olmo2": {**LLAMA_LIKE, "eos_token_id": None, "pad_token_id": 0},
    "qwen2_moe": {
        **LLAMA_LIKE,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
    },
    "qwen3_moe": {
        **LLAMA_LIKE,
        "head_dim": 8,
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
    },
    "gpt_neox": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
        **COMMON,
    },
    "deepseek_v3": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "moe_intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,  # layer 0 dense, layer 1 MoE with a shared expert
        "q_lora_rank": 16,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 4,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
        "tie_word_embeddings": False,
        **COMMON,
    },
}
# family -> (config class, model class) in transformers
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM"),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
}


@dataclass(frozen=True)
class Fault:
    """One bug: ``kind`` in ``module`` at ``tokens`` (None: every token), inside the module's
    ``torch.nn.functional.<api>`` call where ``api`` is set."""

    kind: str  # scale | tile_scale | fp8 | kv_scale | kv_stale | quick_gelu | router_swap | head_scale
    module: str
    tokens: tuple[int, ...] | None
    api: str = ""
    factor: float = 1.0
    columns: int = 8  # tile_scale: how many of the last output columns; head_scale: the head
    positions: int = 4  # kv_scale: the cache block, from position 0


def family_config(family: str) -> dict[str, Any]:
    """The family's transformers config, as the case builds it (before the case's overrides)."""
    return dict(CONFIGS[family])


def build_model(family: str, seed: int, overrides: dict[str, Any], checkpoint_dtype: str) -> Any:
    """The family's tiny model, seeded, in float32, in eval mode, its weights on ``checkpoint_dtype``'s
    grid: a checkpoint in the test's precision (as released checkpoints are) makes the golden's
    float32 weights the test's exactly, and its archive smaller; ``float32`` keeps every bit, and
    the test's weights are then a cast of the golden's."""
    import torch
    import transformers

    config_class, model_class = CLASSES[family]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**CONFIGS[family], **overrides})
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():  # float32: a no-op
        for parameter in model.parameters():
            parameter.copy_(parameter.to(getattr(torch, checkpoint_dtype)).float())
    return model


def describe(fault: Fault) -> str:
    """The fault in a sentence, for case.json."""
    where = f"{fault.module}'s F.{fault.api} call" if fault.api else fault.module
    when = "at every token" if fault.tokens is None else f"at token {', '.join(map(str, fault.tokens))}"
    what = {
        "scale": f"its output multiplied by {fault.factor}",
        "tile_scale": f"its last {fault.columns} output columns multiplied by {fault.factor}",
        "fp8": "its output rounded through float8_e4m3fn",
        "kv_scale": f"the value cache rows of positions 0-{fault.positions - 1} (the first cache block) "
        f"read multiplied by {fault.factor}, a dequantisation scale read from the wrong block "
        "(the stored cache stays right)",
        "kv_stale": "the newest position's value row read as the previous position's (read before it "
        "was written; the stored cache stays right)",
        "quick_gelu": "x*sigmoid(1.702x) computed instead of the tanh GELU",
        "router_swap": "its last kept expert replaced by the lowest-numbered expert it did not keep "
        "(its logits and scores right)",
        "head_scale": f"the attention output of head {fault.columns} (before o_proj) multiplied by "
        f"{fault.factor}",
    }[fault.kind]
    return f"{where} {when}: {what}"


def culprit_names(model: Any, fault: Fault, dumper: str) -> dict[str, Any]:
    """How the dumper names the faulty module's record: ``node`` (what tui-acc shows) and ``record``
    (the dumper's own name), templates of ``{call}``; ``calls`` (token -> the module's call index at
    that token, msprobe's counter) is filled as the model runs. API faults name their record when
    they fire (``install``'s ``api_records``)."""
    module = model.get_submodule(fault.module)
    calls: dict[str, int] = {}
    counter = {"n": 0, "token": -1}

    def count(*_: Any) -> None:
        calls[str(counter["token"])] = counter["n"]
        counter["n"] += 1

    model.register_forward_pre_hook(lambda *_: counter.update(token=counter["token"] + 1))
    module.register_forward_pre_hook(count)
    if dumper == "msit":
        node = record = f"root.{fault.module}"
    elif dumper == "sglang":
        node, record = fault.module, f"non_intrusive__{fault.module}.output"
    else:
        node = record = f"Module.{fault.module}.{type(module).__name__}.forward.{{call}}"
    return {"node": node, "record": record, "calls": calls}


def install(model: Any, fault: Fault, tokens: Any, record: dict[str, Any]) -> None:
    """Make the model's computation go wrong as ``fault`` says (``tokens``: make_model_fixtures'
    TokenCounter). ``record["api_records"]``: token -> the faulty API call's msprobe name;
    ``record["fault_detail"]``: token -> what the fault changed there, where that is not fixed in
    advance (which expert a router swapped)."""
    import torch

    module = model.get_submodule(fault.module)
    at = (lambda: True) if fault.tokens is None else (lambda: tokens.token in fault.tokens)
    # msprobe replaces torch's functions when it starts: the bug computes with the originals
    originals = {"sigmoid": torch.sigmoid, "mul": torch.mul}
    if fault.api:
        _install_api(module, fault, at, record, tokens)
    elif fault.kind == "kv_scale":
        _install_cache_read(module, at, lambda values: values[:, :, : fault.positions].mul_(fault.factor))
    elif fault.kind == "kv_stale":
        _install_cache_read(module, at, lambda values: values[:, :, -1].copy_(values[:, :, -2]))
    elif fault.kind == "router_swap":
        _install_router_swap(module, at, record, tokens)
    elif fault.kind == "head_scale":
        _install_head_scale(module, fault, at)
    elif fault.kind == "quick_gelu":
        forward = module.forward
        sigmoid, mul = originals["sigmoid"], originals["mul"]
        module.forward = lambda x: mul(x, sigmoid(mul(x, 1.702))) if at() else forward(x)
    else:
        forward = module.forward

        def faulty(*args: Any, **kwargs: Any) -> Any:
            out = forward(*args, **kwargs)
            if not at():
                return out
            if isinstance(out, tuple):
                return (_wrong(fault, out[0]), *out[1:])
            return _wrong(fault, out)

        module.forward = faulty


def _wrong(fault: Fault, out: Any) -> Any:
    """The faulty operator's output, from the right one."""
    import torch

    if fault.kind == "scale":
        return out * fault.factor
    if fault.kind == "fp8":
        return out.to(torch.float8_e4m3fn).to(out.dtype)
    if fault.kind == "tile_scale":
        patched = out.clone()
        patched[..., -fault.columns :] *= fault.factor
        return patched
    raise ValueError(f"no output fault {fault.kind!r}")


def _install_api(module: Any, fault: Fault, at: Any, record: dict[str, Any], tokens: Any) -> None:
    """The module's ``F.<api>`` call goes wrong (before msprobe wraps F.<api>, so msprobe's record of
    the call holds the faulty output). msprobe numbers ``Functional.<api>.{n}.forward`` by every
    call since the dump started, as counted here."""
    import torch.nn.functional as F

    plain = getattr(F, fault.api)
    inside = {"on": False, "calls": 0}
    named = record.setdefault("api_records", {})
    module.register_forward_pre_hook(lambda *_: inside.update(on=True))
    module.register_forward_hook(lambda *_: inside.update(on=False))

    def faulty(*args: Any, **kwargs: Any) -> Any:
        n = inside["calls"]
        inside["calls"] += 1
        out = plain(*args, **kwargs)
        if not inside["on"] or not at():
            return out
        named[str(tokens.token)] = f"Functional.{fault.api}.{n}.forward"
        return _wrong(fault, out)

    setattr(F, fault.api, faulty)


def _install_head_scale(attention: Any, fault: Fault, at: Any) -> None:
    """One head of ``attention``'s output scaled, between its score arithmetic and its o_proj: in the
    module's own code (transformers' ``eager_attention_forward``, which the module calls by name from
    its modeling file, replaced there while this module runs)."""
    import sys

    modeling = sys.modules[type(attention).__module__]
    plain = modeling.eager_attention_forward
    inside = {"on": False}
    attention.register_forward_pre_hook(lambda *_: inside.update(on=True))
    attention.register_forward_hook(lambda *_: inside.update(on=False))

    def scaled(*args: Any, **kwargs: Any) -> Any:
        out, weights = plain(*args, **kwargs)
        if inside["on"] and at():
            out = out.clone()
            out[:, :, fault.columns] *= fault.factor  # [batch, seq, heads, head_dim]
        return out, weights

    modeling.eager_attention_forward = scaled


def _install_cache_read(attention: Any, at: Any, misread: Any) -> None:
    """The attention reads its value cache wrong (``misread`` edits, in place, a copy of the values
    the cache returns: ``[batch, kv heads, positions, head dim]``); what it writes into the cache
    stays right, so later tokens read it right."""
    forward = attention.forward

    def faulty(*args: Any, **kwargs: Any) -> Any:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is None or not at():
            return forward(*args, **kwargs)
        update = cache.update

        def read_wrong(key: Any, value: Any, *rest: Any, **options: Any) -> Any:
            keys, values = update(key, value, *rest, **options)
            values = values.clone()  # the cache's own tensor stays as written
            misread(values)
            return keys, values

        cache.update = read_wrong
        try:
            return forward(*args, **kwargs)
        finally:
            del cache.update

    attention.forward = faulty


def _install_router_swap(router: Any, at: Any, record: dict[str, Any], tokens: Any) -> None:
    """A top-k router (``(logits, scores, indices)``, transformers' ``*TopKRouter``) keeps a wrong
    expert for the step's last row: its last kept expert becomes the lowest-numbered one it did not
    keep, weighted by the score of the one it replaced. Its logits and scores stay right."""
    forward = router.forward
    detail = record.setdefault("fault_detail", {})

    def faulty(hidden_states: Any) -> Any:
        logits, scores, indices = forward(hidden_states)
        if not at():
            return logits, scores, indices
        kept = indices[-1].tolist()
        indices = indices.clone()
        indices[-1, -1] = min(set(range(router.num_experts)) - set(kept))
        detail[str(tokens.token)] = {"kept": kept, "now": indices[-1].tolist()}
        return logits, scores, indices

    router.forward = faulty
