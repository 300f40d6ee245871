"""What every headless report shares: its exit codes, strict JSON, and how it is written out.

A report (pair.py's PairReport, single.py's SingleReport, collectives.py's RanksReport) is a frozen dataclass
that says itself as ``json()`` and ``text()``, gives its table as ``frame()`` and knows its
``exit_code``: :func:`exported` writes its table where ``--csv`` says, and :func:`emit` prints it.
"""

from __future__ import annotations

import json
import math
import sys
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TextIO, TypeVar

if TYPE_CHECKING:
    import polars as pl

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class Report(Protocol):
    """A headless report: a dataclass, ``csv`` the file its table went to (None before)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def csv(self) -> str | None:
        """The file ``--csv`` wrote its table to (None: not asked for, or not yet written)."""
        ...

    @property
    def exit_code(self) -> int:
        """What the command leaves with: EXIT_PASS, EXIT_FAIL (a fault found, or something not
        judged) or EXIT_USAGE (something asked for not done)."""
        ...

    @property
    def problems(self) -> list[str]:
        """What was asked for and not done, said on stderr after the report."""
        ...

    def json(self) -> dict[str, Any]:
        """What ``--json`` prints: strict JSON (no NaN or infinity), one object."""
        ...

    def text(self) -> str:
        """What the command prints without ``--json``, ending in a newline."""
        ...

    def frame(self) -> pl.DataFrame:
        """Its table as ``--csv`` writes it (each report says what a row is)."""
        ...


R = TypeVar("R", bound=Report)


class Said(ABC):
    """What every report shares: its JSON is its body made strict; where ``--csv`` wrote its table;
    nothing went unsaid by default."""

    csv: str | None  # each report's field: the file ``--csv`` wrote, once written (``exported``)

    def csv_said(self) -> dict[str, str]:
        """The body's ``csv`` key once the table is written, else nothing."""
        return {} if self.csv is None else {"csv": self.csv}

    def csv_line(self) -> str:
        """The text's line saying where the table went, once written, else nothing."""
        return "" if self.csv is None else f"csv: {self.csv}\n"

    @abstractmethod
    def body(self) -> dict[str, Any]:
        """The report as ``--json`` gives it, NaN and infinities as they are (the text shows them)."""

    def json(self) -> dict[str, Any]:
        """What ``--json`` prints: the body in strict JSON."""
        return strict_json(self.body())

    @property
    def problems(self) -> list[str]:
        """What was asked for and not done, said on stderr after the report."""
        return []


def exported(report: R, path: Path | None, overwrite: bool = False, frame: pl.DataFrame | None = None) -> R:
    """``--csv PATH``: the report's table (or ``frame``) written as the name's extension says, and the
    report that says where (ExportError: not written). Without ``path``, the report as it was."""
    if path is None:
        return report
    from tui_acc.reports.export import write_export

    written = write_export(report.frame() if frame is None else frame, path, overwrite=overwrite)
    return replace(report, csv=str(written))


def emit(report: Report, as_json: bool, out: TextIO | None = None) -> int:
    """Print ``report`` to ``out`` (stdout by default; ``--json``: one strict JSON object; else its
    text), then its problems on stderr; the exit code to leave with."""
    if as_json:
        print(json.dumps(report.json(), indent=2, allow_nan=False), file=out or sys.stdout)
    else:
        print(report.text(), end="", file=out or sys.stdout)
    for problem in report.problems:
        print(f"tui-acc: error: {problem}", file=sys.stderr)
    return report.exit_code


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity made ``null`` (strict JSON readers reject them); each
    object that held one says which in ``non_finite`` (``{"rel_euclidean": "inf"}``: an all-zero golden
    makes relative errors infinite)."""
    if isinstance(value, dict):
        cleaned = {key: strict_json(item) for key, item in value.items()}
        lost = {key: _spelled(item) for key, item in value.items() if _non_finite(item)}
        if lost:
            cleaned["non_finite"] = lost
        return cleaned
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return None if _non_finite(value) else value


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _spelled(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
