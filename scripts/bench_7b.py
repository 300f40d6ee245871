"""The engine on a 7B-shaped dump pair, against the physical floor and an msit-style baseline.

    python scripts/bench_7b.py [--layers 2] [--prompt 256] [--index-files 100000]

Generates (seeded, in a temporary folder) a golden fp32 / test bf16 pair of a Llama with hidden
4096 and FFN 11008, one 256-token prefill, in msit's torch layout, and the test again in ATB
layout; then reports, in one run:

- time to first screen: indexing both dumps (names only), and indexing a synthetic dump of
  ``--index-files`` tensor files;
- raw read rate: reading every byte of the files (page cache warm: the floor on this machine);
- the engine: the full operator table of the token, bytes of tensor files per second;
- the baseline: each pair loaded and compared one by one in torch fp32 the way msit does
  (``tui_acc.metrics.compat.msit_metrics``), and the ratio;
- peak memory of the engine's run above what was resident before it, and the largest pair.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from settle import settle  # noqa: E402  (scripts/settle.py, beside this one)

if TYPE_CHECKING:
    from tui_acc.demo.model import TinyConfig


def kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def synthetic_index(root: Path, files: int) -> float:
    """An msit torch layout with ``files`` tiny .pth files; returns the time to index it."""
    import torch

    from tui_acc.dumps import open_dump

    device = root / "msit_dump_20250101_000000" / "torch_tensors" / "cpu_1"
    modules = [f"root.model.layers.{i}.{m}" for i in range(32) for m in ("self_attn.q_proj", "mlp.up_proj")]
    tree = {
        "name": "root",
        "type": "M",
        "children": [{"name": m, "type": "Linear", "children": []} for m in modules],
    }
    device.mkdir(parents=True)
    (device / "model_tree.json").write_text(json.dumps(tree))
    blob_path = root / "blob.pth"
    torch.save(torch.zeros(1), blob_path)
    blob = blob_path.read_bytes()
    tokens = max(1, files // (2 * len(modules)))
    for token in range(tokens):
        for module in modules:
            folder = device / str(token) / module
            folder.mkdir(parents=True)
            for name in ("input_0.pth", "output.pth"):
                (folder / name).write_bytes(blob)
    start = time.perf_counter()
    index = open_dump(device.parent.parent.parent)
    elapsed = time.perf_counter() - start
    assert sum(len(r) for nodes in index.tokens.values() for r in nodes.values()) == tokens * len(modules) * 2
    return elapsed


def _can_drop_caches() -> bool:
    try:
        _drop_caches()
    except OSError:
        return False
    return True


def _drop_caches() -> None:
    """Empty the page cache (root only) so reads come from the disk, as on a first look at a dump."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")


def _read_all(files: list[Path]) -> float:
    start = time.perf_counter()
    for path in files:
        with path.open("rb", buffering=0) as handle:
            while handle.read(1 << 24):
                pass
    return time.perf_counter() - start


def seven_b_config(layers: int) -> TinyConfig:
    """The demo model at 7B shapes: hidden 4096, FFN 11008, 32 heads, vocabulary 32,000."""
    from tui_acc.demo.model import TinyConfig

    return TinyConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=layers,
        num_heads=32,
        num_kv_heads=32,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--index-files", type=int, default=100_000)
    args = parser.parse_args()

    import numpy as np
    import torch

    from tui_acc import CompareOptions, open_comparison
    from tui_acc.demo.atb_export import export_atb
    from tui_acc.demo.run import run_pair
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.dumps.torchfile.arrays import from_torch
    from tui_acc.metrics.compat import msit_metrics

    figures: dict[str, object] = {}
    config = seven_b_config(args.layers)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        start = time.perf_counter()
        prompt = random.Random(0).sample(range(1, 30000), args.prompt)
        run_pair(
            tmp,
            0,
            prompt,
            1,
            fault_module=f"root.model.layers.{args.layers - 1}.mlp.down_proj",
            fault_token=99,
            say=lambda _m: None,
            config=config,
        )
        export_atb(tmp / "test", tmp / "test_atb")
        settle(tmp)
        figures["generate s"] = round(time.perf_counter() - start, 1)
        files = sorted(p for p in (tmp / "golden").rglob("*.pth")) + sorted((tmp / "test").rglob("*.pth"))
        size = sum(p.stat().st_size for p in files)
        shape = f"{args.layers} layers, hidden 4096, FFN 11008, {args.prompt}-token prefill"
        figures["dump"] = f"{shape}: {len(files)} files, {size / 2**30:.2f} GiB"

        figures["index 100k files s"] = round(synthetic_index(tmp / "index", args.index_files), 3)
        start = time.perf_counter()
        cmp = open_comparison(tmp / "golden", tmp / "test", CompareOptions(cache=False))
        figures["index this pair s"] = round(time.perf_counter() - start, 3)

        from tui_acc.metrics.engine import MetricsEngine
        from tui_acc.metrics.kernels import compare_tensors

        start = time.perf_counter()
        compare_tensors(np.zeros((2, 2)), np.zeros((2, 2)))  # the compiled kernel's one-time load
        figures["kernel warm-up s (once per process)"] = round(time.perf_counter() - start, 2)
        pairs = [p for node in cmp.pairing.node_pairs(0) for p in node.tensors]
        largest = max(p.golden.path.stat().st_size + p.test.path.stat().st_size for p in pairs)
        figures["largest pair MiB"] = round(largest / 2**20, 1)
        mib = size / 2**20

        def engine_run() -> float:
            engine = MetricsEngine(
                open_comparison(tmp / "golden", tmp / "test", CompareOptions(cache=False)).pairing
            )
            start = time.perf_counter()
            engine.node_rows(0)
            return time.perf_counter() - start

        def baseline_run() -> float:
            start = time.perf_counter()
            for pair in pairs:
                golden = torch.load(pair.golden.path, weights_only=True, map_location="cpu")
                test = torch.load(pair.test.path, weights_only=True, map_location="cpu")
                if golden.numel() == test.numel():  # msit's arithmetic, in torch as msit runs it
                    msit_metrics(from_torch(golden), from_torch(test))
            return time.perf_counter() - start

        cold = _can_drop_caches()
        for state in ("cold", "warm") if cold else ("warm",):
            if state == "cold":
                _drop_caches()
            raw = _read_all(files) if state == "cold" else min(_read_all(files) for _ in range(3))
            if state == "cold":
                _drop_caches()
            resident = kib("VmRSS:")
            reset_peak()
            engine = engine_run()
            peak = kib("VmHWM:") - resident
            if state == "cold":
                _drop_caches()
            baseline = baseline_run()
            figures[f"{state}: raw read MiB/s"] = round(mib / raw, 1)
            figures[f"{state}: engine MiB/s"] = round(mib / engine, 1)
            figures[f"{state}: engine / raw read rate"] = round(raw / engine, 2)
            figures[f"{state}: msit-style baseline / engine"] = round(baseline / engine, 2)
            figures[f"{state}: engine peak above resident MiB"] = round(peak / 1024, 1)
        for workers in (1, 2):
            engine_n = MetricsEngine(
                open_comparison(tmp / "golden", tmp / "test", CompareOptions(cache=False)).pairing,
                workers=workers,
            )
            start = time.perf_counter()
            engine_n.node_rows(0)
            figures[f"warm: engine with {workers} worker thread(s) s"] = round(time.perf_counter() - start, 2)
        atb = open_comparison(tmp / "golden", tmp / "test_atb", CompareOptions(cache=False))
        start = time.perf_counter()
        atb.verdicts.token(0)
        figures["engine vs ATB layout s"] = round(time.perf_counter() - start, 2)
        del load_tensor
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
