"""What `tui-acc hunt` dumps against one full dump of both sides, and how long each step takes.

    python scripts/bench_hunt.py [--layers 4 12]

For each depth it builds the demo (golden float32, test bfloat16 with the injected fault; the full
dump of both sides is the baseline, measured in the same run), runs `tui-acc hunt --yes --no-tui
--json` as a user would (a whole process, start-up included), and prints the culprit, every step's
seconds and bytes, and the hunt's bytes as a fraction of the full dump (the goal: at most 1/4).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 12])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for layers in args.layers:
            demo = Path(tmp) / f"demo-{layers}"
            started = time.monotonic()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tui_acc",
                    "demo",
                    "--no-tui",
                    "--layers",
                    str(layers),
                    "--out",
                    str(demo),
                ],
                check=True,
                capture_output=True,
            )
            full_seconds = time.monotonic() - started
            full = _bytes(demo / "golden") + _bytes(demo / "test")
            work = Path(tmp) / f"hunt-{layers}"
            work.mkdir()
            started = time.monotonic()
            hunt = ["hunt", "--config", str(demo / "tui-acc.toml"), "--yes", "--no-tui", "--json"]
            done = subprocess.run(
                [sys.executable, "-m", "tui_acc", *hunt],
                cwd=work,
                capture_output=True,
                text=True,
            )
            seconds = time.monotonic() - started
            result = json.loads(done.stdout)
            op = result["first_failing_op"] or {}
            culprit = f"token {result['first_failing_token']}, {op.get('golden')}"
            print(f"{layers} layers: culprit {culprit} (exit {done.returncode})")
            for step in result["steps"]:
                sides = ", ".join(f"{s['side']} {s['seconds']:.2f} s {s['bytes']:,} B" for s in step["sides"])
                print(f"  {step['step']:<10} {sides}")
            print(
                f"  hunt: {result['bytes_dumped']:,} B in {seconds:.1f} s; one full dump of both sides: "
                f"{full:,} B (written with the demo in {full_seconds:.1f} s); "
                f"ratio {result['bytes_dumped'] / full:.3f}"
            )


if __name__ == "__main__":
    main()
