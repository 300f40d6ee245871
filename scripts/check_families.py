"""How tui-acc's verdicts do on the real-tool fixtures: a scoreboard, not a test (exit status 0).

For every archive of tests/data/families (with ``--models``, tests/data/models too), unpacked into
a temporary folder, it runs what a user runs, ``python -m tui_acc report golden test --all-tokens
--json`` (and golden against clean where the case has a clean run), and prints one line per case:
the culprit case.json expects at each token, the operators labelled local (token, name, rule),
the culprit the report names at the first failing token, and OK or WRONG (the test: one local
at each faulty token, the expected one, and none elsewhere; clean: none at all). Then a summary.

    python scripts/check_families.py [--models] [--only CASE ...] [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FAMILIES = REPO / "tests" / "data" / "families"
MODELS = REPO / "tests" / "data" / "models"


@dataclass(frozen=True)
class Verdict:
    """One pair's report, as the scoreboard reads it."""

    local: list[tuple[int, str, str]]  # (token, operator, rule)
    named: tuple[int, str] | None  # first_failing_op: (token, operator)
    failure: str = ""  # the report could not be had: why


def expected_of(case: dict[str, Any]) -> dict[int, re.Pattern[str]]:
    """token -> the operator a correct tool labels local there. A families case says it by name;
    a models case (tests/unit/test_model_families.py's rule) by its fault record or module."""
    if "expected_local" in case:
        return {int(t): re.compile(re.escape(name) + "$") for t, name in case["expected_local"].items()}
    token = case["fault_token"]
    if case.get("fault_record"):
        return {token: re.compile(re.escape(case["fault_record"]) + "$")}
    module = re.escape(case["fault_module"])
    if case["dumper"] == "msit":
        return {token: re.compile(rf"root\.{module}$")}
    return {token: re.compile(rf"Module\.{module}\.\w+\.forward\.{token}$")}


def report(golden: Path, other: Path) -> Verdict:
    """``tui-acc report golden other --all-tokens --json``, run as a user runs it."""
    command = [sys.executable, "-m", "tui_acc", "report", str(golden), str(other), "--all-tokens", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    try:
        body = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Verdict([], None, f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
    local = [(row["token"], row["golden"], row["rule"]) for row in body["failing"] if row["label"] == "local"]
    op = body["first_failing_op"]
    return Verdict(local, (op["token"], op["golden"]) if op else None)


def judge(verdict: Verdict, expected: dict[int, re.Pattern[str]]) -> bool:
    """Exactly one local operator at each expected token, the expected one; none anywhere else."""
    if verdict.failure:
        return False
    by_token: dict[int, list[str]] = {}
    for token, name, _ in verdict.local:
        by_token.setdefault(token, []).append(name)
    if set(by_token) != set(expected):
        return False
    return all(len(names) == 1 and expected[t].match(names[0]) for t, names in by_token.items())


def _shown(pattern: re.Pattern[str]) -> str:
    """An expected name as read: the pattern without its escapes, a class name left open as ``*``."""
    return pattern.pattern.removesuffix("$").replace(r"\w+", "*").replace("\\", "")


def _locals(verdict: Verdict) -> str:
    if verdict.failure:
        return f"report failed ({verdict.failure})"
    return "; ".join(f"{t}:{name} ({rule})" for t, name, rule in verdict.local) or "none"


def check(archive: Path, work: Path) -> tuple[str, bool, bool | None]:
    """The case's line, whether its test pair is right, and its clean pair's (None: no clean run)."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(work, filter="data")
        else:  # pragma: no cover - our own archives, on an older patch release
            tar.extractall(work)
    folder = work / archive.name.removesuffix(".tar.xz")
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    expected = expected_of(case)
    test = report(folder / "golden", folder / "test")
    test_ok = judge(test, expected)
    named = f"{test.named[0]}:{test.named[1]}" if test.named else "none"
    want = "; ".join(f"{t}:{_shown(p)}" for t, p in sorted(expected.items()))
    clean_ok = None
    clean_said = "no clean run"
    if (folder / "clean").is_dir():
        clean = report(folder / "golden", folder / "clean")
        clean_ok = not clean.failure and not clean.local
        clean_said = f"clean {'OK' if clean_ok else 'WRONG'} (local: {_locals(clean)})"
    line = (
        f"{folder.name} | test {'OK' if test_ok else 'WRONG'} | {clean_said} | expected {want} | "
        f"local {_locals(test)} | named {named}"
    )
    return line, test_ok, clean_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", action="store_true", help="tests/data/models's cases too")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="only these cases (archive names)")
    parser.add_argument(
        "--dir", type=Path, default=FAMILIES, help="the archives' folder (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    archives = sorted(args.dir.glob("*.tar.xz")) + (sorted(MODELS.glob("*.tar.xz")) if args.models else [])
    if args.only:
        archives = [a for a in archives if a.name.removesuffix(".tar.xz") in args.only]
    tests: list[bool] = []
    cleans: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="tui-acc-check-") as temporary:
        for archive in archives:
            line, test_ok, clean_ok = check(archive, Path(temporary))
            print(line, flush=True)
            tests.append(test_ok)
            if clean_ok is not None:
                cleans.append(clean_ok)
    print(
        f"\nsummary: test pairs localised right {sum(tests)}/{len(tests)}; "
        f"clean pairs with nothing local {sum(cleans)}/{len(cleans)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
