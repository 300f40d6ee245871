"""Peak memory of ``report --compat msit|msprobe`` on one large generated pair.

    python scripts/bench_compat_memory.py [--elements 67108864] [--baseline-tree DIR]

Writes a float32 golden of ``--elements`` values (default 2**26: 256 MiB) and a test of the same
values with noise (float32, and bfloat16: half the bytes), dated back so they are memory-mapped as a
settled dump is, then builds each tool's ``--compat`` frame in a fresh process and prints its peak
RSS (VmHWM), against the RSS of the imports alone and the bytes of the pair. With
``--baseline-tree`` (another checkout, e.g. ``git worktree add /tmp/base main``) the same runs are
made with that tree first on ``PYTHONPATH``, in the same run, and the ratio printed beside each,
with the metric columns of both trees side by side: streaming must not change what is computed.

Nothing here is a test: the machine may be shared (the load is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.settle import settle  # noqa: E402

_CHILD = """
import json, sys
from pathlib import Path
from tui_acc import open_comparison
from tui_acc.reports.compat import compat_frame

golden, test, tool = sys.argv[1:4]
frame = compat_frame(open_comparison(Path(golden), Path(test), cache=False), tool)
status = Path("/proc/self/status").read_text().splitlines()
peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"peak_mib": peak / 1024, "rows": frame.to_dicts()}))
"""

_IMPORTS = """
from pathlib import Path
import tui_acc.reports.compat, tui_acc.session, torch, polars
status = Path("/proc/self/status").read_text().splitlines()
print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024)
"""

# the metric columns of each view (what streaming must leave as it was, to the tools' printing)
_METRICS = {
    "msit": ("cosine_similarity", "max_absolute_error", "mean_relative_error", "kl_divergence"),
    "msprobe": ("Cosine", "EucDist", "MaxAbsErr", "One Thousandth Err Ratio", "NPU mean", "NPU l2norm"),
}


def _pair(folder: Path, elements: int) -> dict[str, tuple[Path, Path]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    golden = torch.randn(elements // 4096, 4096, generator=generator)
    test = golden + 0.01 * torch.randn(golden.shape, generator=generator)
    torch.save(golden, folder / "golden.pth")
    torch.save(test, folder / "test_fp32.pth")
    torch.save(test.to(torch.bfloat16), folder / "test_bf16.pth")
    del golden, test
    settle(folder)  # mapped, as a dump opened minutes after its run is
    return {
        "float32": (folder / "golden.pth", folder / "test_fp32.pth"),
        "bfloat16": (folder / "golden.pth", folder / "test_bf16.pth"),
    }


def _run(tree: Path, code: str, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "TUI_ACC_CACHE_DIR": tempfile.gettempdir()}
    result = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=tree, check=True
    )
    return result.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=1 << 26, help="elements of each tensor")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to measure in the same run")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    trees = [("this tree", REPO)] + (
        [("baseline", args.baseline_tree.resolve())] if args.baseline_tree else []
    )
    with tempfile.TemporaryDirectory(prefix="tui-acc-compat-") as scratch:
        pairs = _pair(Path(scratch), args.elements)
        imports = {name: float(_run(tree, _IMPORTS)) for name, tree in trees}
        for name, mib in imports.items():
            print(f"{name}: imports alone {mib:.0f} MiB")
        for dtype, (golden, test) in pairs.items():
            size = (golden.stat().st_size + test.stat().st_size) / 2**20
            for tool in ("msit", "msprobe"):
                found = {
                    name: json.loads(_run(tree, _CHILD, str(golden), str(test), tool)) for name, tree in trees
                }
                mine = found["this tree"]
                line = f"{tool:8} float32 vs {dtype:9} ({size:.0f} MiB): peak {mine['peak_mib']:.0f} MiB"
                if "baseline" in found:
                    base = found["baseline"]
                    ratio = mine["peak_mib"] / base["peak_mib"]
                    line += f", baseline {base['peak_mib']:.0f} MiB, ratio {ratio:.2f}"
                print(line)
                for column in _METRICS[tool]:
                    values = [found[name]["rows"][0].get(column) for name, _ in trees]
                    print(f"    {column}: " + " | ".join(str(v) for v in values))


if __name__ == "__main__":
    main()
