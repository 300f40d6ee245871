"""The seeded random-weight 7B-shaped Llama the benchmarks dump with the real tools
(bench_vs_msit.py, bench_msprobe_7b.py): hidden 4096, FFN 11008, 32 heads, vocab 32,000; float32
weights (transformers' own initialisation under one seed), the same on both sides, the test's cast
to bfloat16; one prompt of seeded token ids. Imported in the tools venv (torch, transformers)."""

from __future__ import annotations

from typing import Any

SEED = 1234
HIDDEN, FFN, HEADS, VOCAB = 4096, 11008, 32, 32000


def seeded_llama(layers: int, prompt: int, side: str, **config: Any) -> tuple[Any, Any]:
    """(the model of ``side``, "golden" or "test", in eval mode; the prompt's ids, shape [1, prompt]);
    ``config``: more LlamaConfig fields (``attn_implementation``)."""
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    model_config = tf.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=max(4096, prompt + 1),
        tie_word_embeddings=False,
        **config,
    )
    model = tf.LlamaForCausalLM(model_config).eval()
    if side == "test":
        model = model.to(torch.bfloat16)
    ids = torch.randint(1, VOCAB, (1, prompt), generator=torch.Generator().manual_seed(SEED))
    return model, ids
