"""The three headless reports as objects: each says itself as ``json()`` and ``text()``, gives its table
as ``frame()`` and knows its ``exit_code``; ``exported`` records where its table went and ``emit``
prints it, as ``tui-acc report`` does."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.ranks_dumps import write_atb_run
from tui_acc.anomalies.session import open_single
from tui_acc.cli.main import main
from tui_acc.collectives.check import RanksCheck
from tui_acc.collectives.rank_set import open_ranks
from tui_acc.reports import collectives, pair, single
from tui_acc.reports.output import EXIT_FAIL, EXIT_USAGE, emit, exported
from tui_acc.session import open_comparison


@dataclass
class _Drawn:
    """Plots as plots/ticket.py gives them, one picture not drawn."""

    problems: list[str] = field(default_factory=lambda: ["x.svg: already exists"])

    def as_dict(self) -> dict[str, Any]:
        return {"dir": "d", "problems": self.problems}

    def lines(self) -> list[str]:
        return ["plots: d", *(f"  error: {p}" for p in self.problems)]


def test_the_pair_report_prints_what_the_command_line_prints(
    demo_pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = pair.build_report(open_comparison(demo_pair.golden, demo_pair.test))
    said = report.json()
    assert not [key for key in said if key.startswith("_")]  # the tables stay out of the JSON
    assert list(said)[:2] == ["tool", "version"] and list(said)[-1] == "tensor"
    assert report.exit_code == EXIT_FAIL
    frame = report.frame()
    assert frame.height == report.node_table.height  # the analysed token's operators
    assert frame.columns[-1] == "source_tui_acc" and "source_golden" in frame.columns

    target = tmp_path / "ops.csv"
    written = exported(report, target)
    assert written.csv == str(target.resolve()) and report.csv is None  # a new report, the old unchanged
    assert target.is_file() and list(written.json())[-1] == "csv"
    assert written.text() == report.text() + f"csv: {target.resolve()}\n"
    assert emit(written, as_json=True) == EXIT_FAIL
    assert json.loads(capsys.readouterr().out) == written.json()

    assert main(["report", str(demo_pair.golden), str(demo_pair.test)]) == EXIT_FAIL
    assert capsys.readouterr().out == report.text()


def test_a_picture_not_drawn_is_said_on_stderr_and_is_no_pass(
    demo_pair, capsys: pytest.CaptureFixture[str]
) -> None:
    report = replace(pair.build_report(open_comparison(demo_pair.golden, demo_pair.test)), plots=_Drawn())
    assert report.exit_code == EXIT_USAGE and report.problems == ["--plot: x.svg: already exists"]
    assert report.json()["plots"] == {"dir": "d", "problems": ["x.svg: already exists"]}
    assert emit(report, as_json=False) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out.endswith("plots: d\n  error: x.svg: already exists\n")
    assert err == "tui-acc: error: --plot: x.svg: already exists\n"


def test_the_swapped_command_is_part_of_the_report(demo_pair) -> None:
    swapped = pair.build_report(open_comparison(demo_pair.test, demo_pair.golden), swap_command="tui-acc G T")
    assert swapped.swapped is not None and swapped.swapped["command"] == "tui-acc G T"
    assert "tui-acc G T" in swapped.text()
    plain = pair.build_report(open_comparison(demo_pair.golden, demo_pair.test), swap_command="tui-acc G T")
    assert plain.swapped is None  # said only where the sides look the wrong way round


def test_the_single_dump_report(demo_pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = single.build_report(open_single(demo_pair.golden))
    assert report.anomalies == [] and report.exit_code == 0 and report.frame().height == 0
    assert list(report.json()) == [
        "tool",
        "version",
        "dump",
        "rules",
        "tokens",
        "anomalies",
        "first_anomaly",
        "checked_tokens",
        "errors",
        "notes",
    ]
    assert main(["report", str(demo_pair.golden)]) == 0
    assert capsys.readouterr().out == report.text()
    written = exported(report, tmp_path / "a.csv")
    assert written.text().endswith(f"csv: {(tmp_path / 'a.csv').resolve()}\n")


def test_the_ranks_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_atb_run(tmp_path / "run", 2, tokens=1)
    report = collectives.build_report(RanksCheck(open_ranks(str(run)), 3.0))
    assert report.exit_code == 0 and report.collectives and report.first_bad is None
    frame = report.frame()
    assert frame.height == len(report.collectives)
    assert frame.columns == [*collectives.COLUMNS, "source_dump", "source_margin", "source_tui_acc"]
    assert main(["report", "--ranks", str(run), "--margin", "3"]) == 0
    assert capsys.readouterr().out == report.text()
    assert main(["report", "--ranks", str(run), "--margin", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report.json()
