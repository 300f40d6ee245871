"""How well the rounding model predicts a correct operator's local error: a tool for calibrating.

    python scripts/calibrate_verdicts.py GOLDEN TEST [GOLDEN TEST ...] [--all-tokens]

For every operator of the given pairs (clean ports: nothing injected) that the verdicts replay, the
ratio of its measured local error (the test's output against its own replay) to the error
``tolerances/rounding.py`` expects of a correct operator, grouped by operator kind: the median and the
largest. A largest ratio well under ``MARGIN`` (3) is what keeps correct operators from being
blamed; a median near 1 (or somewhat under: values spread over binades round more finely than u/√3)
says the model is neither loose nor tight. Prints a markdown table; not a test
(tests/unit/test_sensitivity_verdicts.py holds the clean sweep to the margin).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tui_acc import CompareOptions, open_comparison  # noqa: E402
from tui_acc.dumps.msprobe.passes import api_of  # noqa: E402
from tui_acc.tolerances.rounding import MARGIN  # noqa: E402


def ratios(golden: Path, test: Path, all_tokens: bool) -> dict[str, list[float]]:
    """Local error over expected, by operator kind, for every replayed operator of the pair."""
    comparison = open_comparison(golden, test, CompareOptions(cache=False))
    checks = comparison.verdicts.judging.checks
    found: dict[str, list[float]] = defaultdict(list)
    tokens = comparison.pairing.tokens if all_tokens else comparison.pairing.tokens[:1]
    for token in tokens:
        for node in comparison.pairing.node_pairs(token):
            replay = checks.replay(node) if checks is not None else None
            side = replay.test if replay is not None else None
            if side is None or side.local_error is None or not side.expected:
                continue
            kind = (
                api_of(node.golden)
                if node.golden.startswith(("Functional.", "Tensor.", "Torch."))
                else node.golden_type
            )
            found[kind or "?"].append(side.local_error / side.expected)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dumps", nargs="+", type=Path, help="GOLDEN TEST pairs")
    parser.add_argument("--all-tokens", action="store_true", help="every token (default: the first)")
    args = parser.parse_args(argv)
    if len(args.dumps) % 2:
        parser.error("give the dumps in GOLDEN TEST pairs")
    merged: dict[str, list[float]] = defaultdict(list)
    for golden, test in zip(args.dumps[::2], args.dumps[1::2], strict=True):
        for kind, values in ratios(golden, test, args.all_tokens).items():
            merged[kind] += values
    print(f"| operator kind | replayed | median local/expected | largest | largest/margin ({MARGIN:g}) |")
    print("|---|---|---|---|---|")
    for kind, values in sorted(merged.items(), key=lambda item: -max(item[1])):
        print(
            f"| {kind} | {len(values)} | {statistics.median(values):.2f} | {max(values):.2f} "
            f"| {max(values) / MARGIN:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
