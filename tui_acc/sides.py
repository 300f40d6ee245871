"""Golden and test given the wrong way round.

The golden is the reference run, so it is the more precise one (float32 against a bfloat16 or
float16 port, bfloat16 against an fp8 one). When a token's logits are less precise on the golden
side than on the test side, the paths were most likely given in the wrong order: every metric is
then the test's error measured from the port, and the failing operators point at the reference.
This says so, with the user's own command line and the two paths swapped. Nothing here imports
numpy: the token list calls it on the event loop, as its first rows arrive.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The significand's stored bits of each floating type, as torch names it (IEEE 754's binary64, 32
# and 16; bfloat16 and the OCP fp8 types as ml_dtypes defines them): more bits, more precise.
MANTISSA_BITS = {
    "float64": 52,
    "complex128": 52,
    "float32": 23,
    "complex64": 23,
    "float16": 10,
    "bfloat16": 7,
    "float8_e4m3fn": 3,
    "float8_e4m3fnuz": 3,
    "float8_e5m2": 2,
    "float8_e5m2fnuz": 2,
}


@dataclass(frozen=True)
class Swapped:
    """The golden's logits are less precise than the test's; ``command``: the one that swaps them."""

    golden_dtype: str
    test_dtype: str
    command: str | None = None

    def headline(self) -> str:
        """The warning's first line: both dtypes, and that the reference is the less precise side."""
        return (
            f"golden is {self.golden_dtype}, test is {self.test_dtype}: the reference is less precise "
            "than the run under test. Swapped?"
        )

    def how_to_swap(self) -> str:
        """The line that says how to swap the sides: the swapped command line when it is known, else the
        rule."""
        return f"To swap them: {self.command}" if self.command else "To swap them, give TEST before GOLDEN."

    def as_dict(self) -> dict[str, Any]:
        """The warning for ``report --json`` (both dtypes, the swapping command or None)."""
        return {"golden_dtype": self.golden_dtype, "test_dtype": self.test_dtype, "command": self.command}


def less_precise(golden_dtype: str | None, test_dtype: str | None) -> bool | None:
    """Whether the golden's type holds fewer significand bits than the test's; None where either
    is not a floating type this knows (integers, unknown names, a side without the tensor)."""
    golden, test = MANTISSA_BITS.get(golden_dtype or ""), MANTISSA_BITS.get(test_dtype or "")
    if golden is None or test is None:
        return None
    return golden < test


def swapped_sides(rows: Iterable[Mapping[str, Any]]) -> Swapped | None:
    """From token rows (``golden_dtype``, ``test_dtype`` of the logits): the golden is less precise
    at some token and never more precise at another. The first rows suffice: a run keeps its types."""
    found = None
    for row in rows:
        verdict = less_precise(row.get("golden_dtype"), row.get("test_dtype"))
        if verdict is None:
            continue
        if not verdict and row.get("golden_dtype") != row.get("test_dtype"):
            return None
        if verdict and found is None:
            found = Swapped(row["golden_dtype"], row["test_dtype"])
    return found


def swapped_command(argv: Sequence[str], golden: Path, test: Path, program: str = "tui-acc") -> str | None:
    """``program argv`` with the golden's and the test's path swapped (the first argument naming each,
    as written); None when either cannot be found in ``argv``."""
    args = list(argv)
    at_golden = next((i for i, a in enumerate(args) if Path(a) == golden), None)
    at_test = next((i for i, a in enumerate(args) if i != at_golden and Path(a) == test), None)
    if at_golden is None or at_test is None:
        return None
    args[at_golden], args[at_test] = args[at_test], args[at_golden]
    return shlex.join([program, *args])
