"""A tensor-parallel test against a one-device golden: the report's time and memory, against the
same comparison without sharding, whole processes as a user runs them.

    python scripts/bench_tp.py [--ranks 8] [--layers 2] [--prompt 256] [--repeats 3]

Generates (seeded, in a temporary folder) the demo model at 7B shapes (hidden 4096, FFN 11008, 32
heads, vocabulary 32,000), one prefill: its float32 golden in msit's torch layout, the same model
in bfloat16 as an ATB dump of ``--ranks`` tensor-parallel ranks (o_proj and down_proj row-parallel,
each followed by an all-reduce), and again on one rank (the same ATB layout, nothing to gather).
Then, alternating, ``tui-acc report GOLDEN TEST --json --no-cache --all-tokens`` on each test in a
process of its own, and prints the times, the peak RSS of each, the sharded/unsharded ratio, and the
memory bound the sharding issue sets: 300 MiB plus three times the largest unsharded tensor pair.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from settle import settle  # noqa: E402  (scripts/settle.py, beside this one)

# the report in a process of its own, its peak RSS (KiB, Linux: VmHWM, which starts again at exec,
# where ru_maxrss keeps the forking parent's) printed last
RUN = (
    "import contextlib, io, pathlib, sys\n"
    "from tui_acc.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    code = main(sys.argv[1:])\n"
    "status = pathlib.Path('/proc/self/status').read_text().splitlines()\n"
    "print(code, next(line.split()[1] for line in status if line.startswith('VmHWM')))\n"
)


def report(golden: Path, test: Path) -> tuple[float, int, int]:
    """(seconds, exit code, peak RSS in KiB) of one ``report`` process."""
    argv = [sys.executable, "-c", RUN, "report", str(golden), str(test)]
    argv += ["--json", "--no-cache", "--all-tokens"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    seconds = time.perf_counter() - start
    code, rss = done.stdout.strip().splitlines()[-1].split()
    return seconds, int(code), int(rss)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from bench_7b import seven_b_config

    from tui_acc.demo.tensor_parallel import run_tensor_parallel, write_golden

    config = seven_b_config(args.layers)
    prompt = random.Random(0).sample(range(1, 30000), args.prompt)
    with tempfile.TemporaryDirectory(prefix="tui-acc-tp-") as name:
        tmp = Path(name)
        start = time.perf_counter()
        write_golden(tmp / "golden", 0, prompt, config, new_tokens=1)
        run_tensor_parallel(tmp / "sharded", 0, prompt, 1, args.ranks, None, config)
        run_tensor_parallel(tmp / "whole", 0, prompt, 1, 1, None, config)
        settle(tmp)
        print(f"generated in {time.perf_counter() - start:.0f} s")
        golden_files = [p for p in (tmp / "golden").rglob("*.pth") if "weight" not in p.parts[-2]]
        largest = max(p.stat().st_size for p in golden_files)
        bound = 300 * 2**20 + 3 * (largest + largest // 2)  # the float32 tensor and its bfloat16 pair
        times: dict[str, list[float]] = {"sharded": [], "whole": []}
        peaks: dict[str, int] = {"sharded": 0, "whole": 0}
        for _ in range(args.repeats):
            for kind in ("sharded", "whole"):
                seconds, code, rss = report(tmp / "golden", tmp / kind)
                if code not in (0, 1):
                    raise SystemExit(f"report on {kind} exited {code}")
                times[kind].append(seconds)
                peaks[kind] = max(peaks[kind], rss * 1024)
        for kind in ("sharded", "whole"):
            spread = ", ".join(f"{t:.2f}" for t in times[kind])
            print(f"{kind:8} report: {spread} s; peak RSS {peaks[kind] / 2**20:.0f} MiB")
        ratio = statistics.median(times["sharded"]) / statistics.median(times["whole"])
        print(f"{args.ranks} ranks against 1, median time: {ratio:.2f}x (target: within 2x)")
        print(
            f"peak RSS sharded {peaks['sharded'] / 2**20:.0f} MiB against the bound "
            f"{bound / 2**20:.0f} MiB (300 MiB + 3 x the largest pair, {largest * 1.5 / 2**20:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
