"""A longer fuzzing campaign than CI's: ``python scripts/fuzz.py [--examples 5000] [--seed N]``.

Runs tests/fuzz with more examples per parser and a random (or given) seed; a failure prints the
smallest input that breaks a parser. Not a test: it runs as long as it is asked to.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=5000, help="examples per parser (CI: 60)")
    parser.add_argument("--seed", type=int, default=None, help="a seed to reproduce a campaign")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"fuzzing with {args.examples} examples per parser, seed {seed}", flush=True)
    env = {**os.environ, "TUI_ACC_FUZZ_EXAMPLES": str(args.examples), "TUI_ACC_FUZZ_SEED": str(seed)}
    command = [sys.executable, "-m", "pytest", "-q", "tests/fuzz", f"--hypothesis-seed={seed}"]
    return subprocess.call(command, cwd=REPO, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
