"""Scale: a dump pair of 100,000+ tensor files, and one of a few large tensors.

    python scripts/bench_scale.py [--files 100000] [--large-elements 50000000] [--baseline-tree DIR]

1. Many files: an msit torch pair with real structure (tokens x modules x input/output, small real
   tensors; token folders beyond the first few are hard links, so generating is quick). Figures:
   the time to index both sides, and ``tui-acc report`` run as a user runs it, in a subprocess:
   its time, peak RSS, and how many tensor pairs it read out of how many there are.
   Then every token's operator rows (100,000 tensor rows, 50,000 node rows: the engine's node
   derivation at scale). With ``--baseline-tree`` (another checkout of tui-acc, e.g. a worktree of
   an earlier commit), both report runs are repeated with that tree's code, in the same run, and
   their ratios printed: how a change to the engine moved whole-process time and memory.
2. A few large tensors: an msit torch pair of three modules whose outputs are ``--large-elements``
   fp32 values (golden) vs bf16 (test); ``report``'s peak RSS against the bound of the engine
   issue (300 MB + 3 x the largest pair).

Nothing here is a test: machines are noisy. The figures go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from settle import settle  # noqa: E402  (scripts/settle.py, beside this one)


def many_files(root: Path, files: int, seed: int) -> int:
    """An msit torch dump of about ``files`` .pth files; returns the number written or linked."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    device = root / "msit_dump_20250101_000000" / "torch_tensors" / "cpu_1"
    modules = ["root.model.embed_tokens"]
    for layer in range(32):
        modules += [
            f"root.model.layers.{layer}.{m}"
            for m in (
                "input_layernorm",
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.gate_proj",
                "mlp.up_proj",
                "mlp.down_proj",
            )
        ]
    modules += ["root.model.norm", "root.lm_head"]
    per_token = 2 * len(modules)
    tokens = max(2, files // per_token)
    written = 0
    first = device / "0"
    for name in modules:
        folder = first / name
        folder.mkdir(parents=True)
        size = 512 if name == "root.lm_head" else 64
        torch.save(torch.randn(1, 1, size, generator=gen), folder / "input_0.pth")
        torch.save(torch.randn(1, 1, size, generator=gen), folder / "output.pth")
        written += 2
    (device / "model_tree.json").write_text(json.dumps(_tree(modules)))
    for token in range(1, tokens):
        for name in modules:
            folder = device / str(token) / name
            folder.mkdir(parents=True)
            for file in ("input_0.pth", "output.pth"):
                os.link(first / name / file, folder / file)
                written += 1
    return written


def _tree(modules: list[str]) -> dict[str, object]:
    """model_tree.json for ``modules``: every dotted prefix a module, children in the given order."""
    nodes: dict[str, dict[str, object]] = {"root": {"name": "root", "type": "Model", "children": []}}
    for name in modules:
        parts = name.split(".")
        for depth in range(2, len(parts) + 1):
            full = ".".join(parts[:depth])
            if full not in nodes:
                nodes[full] = {"name": full, "type": "Module", "children": []}
                nodes[".".join(parts[: depth - 1])]["children"].append(nodes[full])  # type: ignore[union-attr]
    return nodes["root"]


def large(root: Path, elements: int, dtype: str) -> None:
    import torch

    gen = torch.Generator().manual_seed(7)
    device = root / "msit_dump_20250101_000000" / "torch_tensors" / "cpu_1" / "0"
    for name in ("root.model.layers.0.mlp", "root.model.layers.1.mlp", "root.lm_head"):
        (device / name).mkdir(parents=True)
        tensor = torch.randn(elements, generator=gen)
        if dtype == "bf16":
            tensor = tensor.to(torch.bfloat16)
        torch.save(tensor, device / name / "output.pth")
    names = ["root.model.layers.0.mlp", "root.model.layers.1.mlp", "root.lm_head"]
    (device.parent / "model_tree.json").write_text(json.dumps(_tree(names)))


def report(golden: Path, test: Path, tree: Path = REPO, every_token: bool = False) -> dict[str, object]:
    """``tui-acc report --json`` in a child (the code of ``tree``): wall time, its peak RSS, the pairs
    it read; with ``every_token``, every token's operator rows instead."""
    work = (
        "[cmp.verdicts.token(t) for t in cmp.pairing.tokens]\n"
        if every_token
        else "build_report(cmp, None)\n"
    )
    code = (
        "import json, sys, resource\n"
        "from tui_acc import CompareOptions, open_comparison\n"
        "from tui_acc.reports.pair import build_report\n"
        f"cmp = open_comparison({str(golden)!r}, {str(test)!r}, CompareOptions(cache=False))\n"
        f"{work}"
        "total = sum(len(n.tensors) for t in cmp.pairing.tokens for n in cmp.pairing.node_pairs(t))\n"
        "print(json.dumps({'read': cmp.engine.computed, 'pairs': total,"
        " 'rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))\n"
    )
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tree)
    elapsed = time.perf_counter() - start
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return {"s": round(elapsed, 2), "peak_rss_mib": round(figures["rss"] / 1024), **figures}


def app_peak(golden: Path, test: Path, tokens: int) -> int:
    """Peak RSS of ``tui-acc`` in a real terminal, after every token and the first failing one's ops."""
    name = "tui-acc-bench-scale"
    command = f"{sys.executable} -m tui_acc {golden} {test} --no-cache"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "40", command], check=True)
    try:
        pid = int(
            subprocess.run(
                ["tmux", "display", "-p", "-t", name, "#{pane_pid}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )

        def wait_for(*texts: str) -> None:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                screen = subprocess.run(
                    ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
                )
                if any(text in screen.stdout for text in texts):
                    return
                time.sleep(0.2)
            raise SystemExit(f"timed out waiting for {texts!r}")

        wait_for(f"{tokens}/{tokens} tokens compared")
        subprocess.run(["tmux", "send-keys", "-t", name, "f", "Enter"], check=True)
        # the whole token is compared once its verdict on the first failing operator is shown
        wait_for("◆", "no op fails with passing inputs")
        status = Path(f"/proc/{pid}/status").read_text()
        return round(
            int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024
        )
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False)


def baseline_rss() -> int:
    code = (
        "import resource, tui_acc, torch, polars\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return round(int(out.stdout.strip()) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000, help="tensor files per side")
    parser.add_argument("--large-elements", type=int, default=50_000_000)
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to compare the engine with")
    parser.add_argument("--skip-large", action="store_true", help="only the many-files figures")
    args = parser.parse_args()
    from tui_acc import CompareOptions, open_comparison

    figures: dict[str, object] = {"python + torch + tui_acc imported, peak RSS MiB": baseline_rss()}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        start = time.perf_counter()
        files = many_files(tmp / "golden", args.files, seed=1)
        many_files(tmp / "test", args.files, seed=2)
        settle(tmp)
        figures["many: files per side"] = files
        figures["many: generate s"] = round(time.perf_counter() - start, 1)
        start = time.perf_counter()
        cmp = open_comparison(tmp / "golden", tmp / "test", CompareOptions(cache=False))
        figures["many: index both sides s"] = round(time.perf_counter() - start, 3)
        figures["many: tokens"] = len(cmp.pairing.tokens)
        result = report(tmp / "golden", tmp / "test")
        figures["many: report s"] = result["s"]
        figures["many: report peak RSS MiB"] = result["peak_rss_mib"]
        figures["many: tensor pairs read / present"] = f"{result['read']} / {result['pairs']}"
        if not args.baseline_tree:  # with one, each is measured twice against it below
            every = report(tmp / "golden", tmp / "test", every_token=True)
            figures["many: every token's operator rows s"] = every["s"]
            figures["many: every token's operator rows peak RSS MiB"] = every["peak_rss_mib"]
        else:
            for name, every_token in (("report", False), ("every token's operator rows", True)):
                ours_s, theirs_s, ours_rss, theirs_rss = [], [], [], []
                # ours, theirs, theirs, ours: neither side always runs on the warmer caches
                for tree in (REPO, args.baseline_tree, args.baseline_tree, REPO):
                    run = report(tmp / "golden", tmp / "test", tree=tree, every_token=every_token)
                    (ours_s if tree == REPO else theirs_s).append(float(run["s"]))  # type: ignore[arg-type]
                    (ours_rss if tree == REPO else theirs_rss).append(int(run["peak_rss_mib"]))  # type: ignore[call-overload]
                figures[f"many: {name}, s (ours; baseline)"] = f"{ours_s}; {theirs_s}"
                figures[f"many: {name}, time / baseline"] = round(sum(ours_s) / sum(theirs_s), 2)
                figures[f"many: {name}, peak RSS / baseline"] = round(max(ours_rss) / max(theirs_rss), 2)
        if shutil.which("tmux"):
            figures["many: the TUI, every token and the failing token's operators, peak RSS MiB"] = app_peak(
                tmp / "golden", tmp / "test", len(cmp.pairing.tokens)
            )
    if args.skip_large:
        print(json.dumps(figures, indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        large(tmp / "golden", args.large_elements, "fp32")
        large(tmp / "test", args.large_elements, "bf16")
        settle(tmp)
        pair_mib = args.large_elements * (4 + 2) / 2**20
        result = report(tmp / "golden", tmp / "test")
        figures["large: largest pair MiB (fp32 + bf16)"] = round(pair_mib)
        figures["large: report s"] = result["s"]
        figures["large: report peak RSS MiB"] = result["peak_rss_mib"]
        figures["large: bound MiB (300 + 3 x largest pair)"] = round(300 + 3 * pair_mib)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
