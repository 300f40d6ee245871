"""A longer fuzzing campaign than CI's: ``python scripts/fuzz.py [--examples 5000] [--seed N] [--wall S]``.

Runs each parser's fuzz test of tests/fuzz/test_parsers.py in a process of its own, with more
examples and a random (or given) seed. Each process is under a wall bound (``--wall``, seconds per
parser; default 120 + 0.2 per example): past it the parser is reported as hanging and its process
killed, so a campaign always ends. A parser whose process ends on a signal (a crash: SIGSEGV from
a recursion in C, SIGBUS from a file cut short) is reported as crashing. A failure prints the
smallest input that breaks the parser. Not a test: it runs as long as it is asked to.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = "tests/fuzz/test_parsers.py"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=5000, help="examples per parser (CI: 60)")
    parser.add_argument("--seed", type=int, default=None, help="a seed to reproduce a campaign")
    parser.add_argument("--wall", type=float, default=None, help="seconds per parser before it is a hang")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    wall = args.wall if args.wall is not None else 120 + 0.2 * args.examples
    print(f"fuzzing with {args.examples} examples per parser, seed {seed}, {wall:.0f} s each", flush=True)
    env = {**os.environ, "TUI_ACC_FUZZ_EXAMPLES": str(args.examples), "TUI_ACC_FUZZ_SEED": str(seed)}
    broken = [test for test in _tests() if not _campaign(test, seed, wall, env)]
    if broken:
        print(f"{len(broken)} parser(s) broke, seed {seed}: {', '.join(broken)}")
    return 1 if broken else 0


def _tests() -> list[str]:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", TESTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in listed.stdout.splitlines() if line.startswith(f"{TESTS}::")]


def _campaign(test: str, seed: int, wall: float, env: dict[str, str]) -> bool:
    """One parser's campaign in its own process: True if it ended on its own and passed."""
    command = [sys.executable, "-m", "pytest", "-q", test, f"--hypothesis-seed={seed}"]
    try:
        code = subprocess.run(command, cwd=REPO, env=env, timeout=wall).returncode
    except subprocess.TimeoutExpired:  # run() has killed it (SIGKILL: a hang in C ignores SIGTERM)
        print(f"{test}: still running after {wall:.0f} s: killed (a hang)", flush=True)
        return False
    if code < 0:
        print(f"{test}: ended by {signal.Signals(-code).name} (a crash)", flush=True)
        return False
    return code == 0


if __name__ == "__main__":
    raise SystemExit(main())
