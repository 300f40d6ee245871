"""Speed and memory figures, each a ratio against a baseline measured in the same run.

    python scripts/bench.py [--layers 8] [--hidden 512] [--prompt 128] [--tokens 8]

1. Opening a dump (names only) vs reading every tensor in it (what a batch compare pays first).
2. Time to the first token verdict vs comparing every tensor of every token (laziness).
3. Our float64 streaming kernel vs msit's metric definitions done the straightforward way
   (numpy, fp32, one pass per metric), on the same tensors.
4. A second look at a token (cache) vs the first.
5. Peak memory of one large pair: streamed in chunks vs a whole-tensor float64 copy.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def msit_style(golden, test) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """msit llm compare's definitions (docs/formats.md §4.4), one numpy pass per metric."""
    import numpy as np

    g = golden.reshape(-1).astype(np.float32)
    m = test.reshape(-1).astype(np.float32)
    mask = np.abs(g) > np.float32(1.1920929e-07)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mask, np.abs(m / g - 1), 0)
    out = {
        "cos": float(g.astype(np.float64) @ m.astype(np.float64))
        / max(float(np.linalg.norm(g.astype(np.float64)) * np.linalg.norm(m.astype(np.float64))), 1e-8),
        "max_rel": float(rel.max()),
        "mean_rel": float(rel.mean()),
        "max_abs": float(np.where(mask, np.abs(m - g), 0).max()),
        "mean_abs": float(np.where(mask, np.abs(m - g), 0).mean()),
    }
    p = np.exp(g - g.max())
    p /= p.sum()
    q = np.exp(m - m.max())
    q /= q.sum()
    out["kl"] = float(np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30))))
    out["red"] = float(np.sqrt(((m - g) ** 2).sum() / (g**2).sum()))
    return out


def peak_rss_of_compare(numel: int, chunked: bool) -> int:
    code = f"""
import torch
from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.metrics import kernels
if not {chunked}:
    kernels.CHUNK_ELEMENTS = 1 << 62
# Filled in slices so that making the inputs does not set the peak we want to measure.
gen = torch.Generator().manual_seed(0)
g = torch.empty({numel} // 4096, 4096, dtype=torch.bfloat16)
t = torch.empty_like(g)
for i in range(0, g.shape[0], 256):
    g[i : i + 256] = torch.randn(g[i : i + 256].shape, generator=gen)
    t[i : i + 256] = g[i : i + 256] + 0.01
def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # reset the peak: measure this call alone
base = kib("VmRSS:")
kernels.compare_tensors(from_torch(g), from_torch(t))
print(kib("VmHWM:") - base)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return int(out.stdout.strip()) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--big-numel", type=int, default=32 * 1024 * 1024)
    args = parser.parse_args()

    from tui_acc import open_comparison
    from tui_acc.demo.model import TinyConfig
    from tui_acc.demo.run import run_pair
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor

    config = TinyConfig(
        vocab_size=32000,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_layers=args.layers,
        num_heads=8,
        num_kv_heads=4,
    )
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        prompt = random.Random(0).sample(range(1, 30000), args.prompt)
        run_pair(
            Path(tmp),
            0,
            prompt,
            args.tokens,
            fault_module=f"root.model.layers.{args.layers // 2}.mlp.down_proj",
            fault_token=3,
            say=print,
            config=config,
        )
        files = sorted(Path(tmp).rglob("*.pth"))
        size = sum(f.stat().st_size for f in files)
        figures["dump"] = (
            f"{len(files)} tensor files, {size / 2**20:.0f} MiB, {args.layers} layers, {args.tokens} tokens"
        )

        t_open, cmp = timed(lambda: open_comparison(Path(tmp) / "golden", Path(tmp) / "test"))
        t_read_all, _ = timed(lambda: [load_tensor(f, ANYWHERE) for f in files])
        figures["1 open (index only) s"] = round(t_open, 3)
        figures["1 read every tensor s"] = round(t_read_all, 3)
        figures["1 ratio read-all / open"] = round(t_read_all / t_open, 1)

        t_first, _ = timed(lambda: cmp.engine.token_row(0))
        t_tokens, _ = timed(cmp.engine.token_rows)
        t_everything, _ = timed(lambda: [cmp.verdicts.token(t) for t in cmp.pairing.tokens])
        full = t_first + t_tokens + t_everything
        figures["2 first token verdict s"] = round(t_first, 4)
        figures["2 every token, every op s"] = round(full, 3)
        figures["2 ratio everything / first verdict"] = round(full / t_first, 1)

        pairs = [
            p
            for node in cmp.pairing.node_pairs(0)
            for p in node.tensors
            if "float" in str(p.golden.path) or True
        ]
        # copied: memory-mapped files would otherwise be paged in inside whichever kernel runs first
        loaded = [
            (load_tensor(p.golden.path, ANYWHERE).copy(), load_tensor(p.test.path, ANYWHERE).copy())
            for p in pairs
        ]
        from tui_acc.dumps.dtypes import is_float
        from tui_acc.metrics.kernels import compare_tensors

        loaded = [(g, t) for g, t in loaded if is_float(g) and g.size == t.size]

        t_ours, _ = timed(lambda: [compare_tensors(g, t) for g, t in loaded])
        t_msit, _ = timed(lambda: [msit_style(g, t) for g, t in loaded])
        figures["3 pairs (token 0, prefill)"] = len(loaded)
        figures["3 our kernel s"] = round(t_ours, 3)
        figures["3 msit-style numpy s"] = round(t_msit, 3)
        figures["3 ratio msit-style / ours"] = round(t_msit / t_ours, 2)

        t_again, _ = timed(lambda: cmp.verdicts.token(0))
        t_cold, _ = timed(lambda: open_comparison(Path(tmp) / "golden", Path(tmp) / "test").verdicts.token(0))
        figures["4 token 0 first look s"] = round(t_cold, 3)
        figures["4 token 0 second look s"] = round(t_again, 5)
        figures["4 ratio first / second"] = round(t_cold / max(t_again, 1e-9), 0)

    chunked = peak_rss_of_compare(args.big_numel, True)
    whole = peak_rss_of_compare(args.big_numel, False)
    figures["5 pair size"] = (
        f"{args.big_numel / 2**20:.0f}M elements, bf16 ({args.big_numel * 2 / 2**20:.0f} MiB a side)"
    )
    figures["5 extra peak RSS streamed MiB"] = round(chunked / 2**20, 1)
    figures["5 extra peak RSS whole-tensor MiB"] = round(whole / 2**20, 1)
    figures["5 ratio whole / streamed"] = round(whole / max(chunked, 2**20), 1)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
