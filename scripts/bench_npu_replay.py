"""What replaying torch_npu's fused operators costs, against torch running the same arithmetic.

    python scripts/bench_npu_replay.py [--repeat 5] [--blocks 600]

A decode step of a 7B-shaped model (32 query heads, 8 kv heads, head dim 128, bf16) over a paged
cache of 4,096 tokens per request, as vllm-ascend calls ``npu_fused_infer_attention_score`` (TND,
block size 128, sparse_mode 3): the cache is the layer's whole cache (``--blocks`` blocks, most of
them other requests'), as msprobe dumps it. Prints, best of ``--repeat`` (wall clock, one process):

- the replay (``replay/npu_attention.py``): the blocks gathered, widened to float32, softmax, GQA;
- the baseline measured in the same run: torch's ``scaled_dot_product_attention`` on the same
  request already gathered into dense float32 tensors (what the arithmetic alone costs here);

and their ratio. Nothing here is a test: the machine may be shared.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tui_acc.replay import npu_attention  # noqa: E402
from tui_acc.replay.call import Call  # noqa: E402

HEADS, KV_HEADS, DIM, TOKENS, BLOCK = 32, 8, 128, 4096, 128


def best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=600, help="blocks in the dumped cache (default 600)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    query = rng.standard_normal((1, HEADS, DIM)).astype(bf16)
    cache_shape = (args.blocks, BLOCK, KV_HEADS * DIM)
    key, value = (rng.standard_normal(cache_shape, dtype=np.float32).astype(bf16) for _ in range(2))
    table = rng.permutation(args.blocks)[: TOKENS // BLOCK].reshape(1, -1).astype(np.int32)
    keyword = {
        "input_layout": "TND",
        "block_table": table,
        "block_size": BLOCK,
        "actual_seq_lengths": [1],
        "actual_seq_lengths_kv": [TOKENS],
        "num_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "scale": 1 / math.sqrt(DIM),
        "sparse_mode": 3,
    }
    name = "NPU.npu_fused_infer_attention_score.0.forward"
    call = Call(name, "npu_fused_infer_attention_score", "msprobe", {0: query, 1: key, 2: value}, keyword)
    call = Call(**{**call.__dict__, "precision": np.float32})  # a bf16 output: float32 arithmetic
    replay = best(lambda: npu_attention.fused_infer_attention(call), args.repeat)

    import torch
    import torch.nn.functional as F

    def dense(cache: np.ndarray) -> torch.Tensor:
        rows = cache[table[0]].reshape(TOKENS, KV_HEADS, DIM).astype(np.float32)
        return torch.from_numpy(rows).permute(1, 0, 2).repeat_interleave(HEADS // KV_HEADS, 0)

    q = torch.from_numpy(query.astype(np.float32)).permute(1, 0, 2)
    k, v = dense(key), dense(value)
    baseline = best(lambda: F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(DIM)), args.repeat)
    print(f"decode attention, 7B-shaped ({HEADS} heads, {KV_HEADS} kv heads, {TOKENS} cached tokens,")
    print(f"  a dumped cache of {args.blocks} blocks of {BLOCK})")
    print(f"  replay (npu_attention)        {replay * 1e3:8.1f} ms")
    ratio = replay / baseline
    print(f"  torch SDPA, dense float32     {baseline * 1e3:8.1f} ms   (the replay: {ratio:.1f}x)")


if __name__ == "__main__":
    main()
