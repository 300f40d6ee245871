"""What the command line says and where it writes: the help names every command, an empty folder is
called empty, a folder holding dumps names them, a mistyped path gets the nearest that exists, and
what tui-acc makes itself (demos, re-dumps, hunts) goes under ./tui-acc-runs."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.hints import near_path
from tui_acc.redump import RedumpSettings, SideSettings
from tui_acc.redump.select import plan_for
from tui_acc.redump.settings import RUNS_DIR, runs_dir


def test_the_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "{open,report,demo,hunt,ranks}" in out and "{open,report,demo}" not in out
    assert "tui-acc hunt" in out and "tui-acc ranks DUMP" in out


def test_demo_help_names_the_folders_it_writes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: ./tui-acc-runs/demo)" in out
    assert "(OUT/baseline)" in out and "(./baseline)" not in out  # beside golden and test, in --out
    assert "./tui-acc-runs/demo-ranks" in out


def test_an_empty_folder_is_called_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "dump"
    empty.mkdir()
    with pytest.raises(DumpError, match="this folder is empty") as raised:
        open_dump(empty)
    assert "expected" not in str(raised.value)  # not the list of every format it is not
    assert main(["report", str(empty), str(empty)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"tui-acc: error: {empty}: this folder is empty: give the folder a dumper wrote its files into\n"
    )


def test_what_tui_acc_makes_goes_under_one_folder(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert runs_dir() == tmp_path / RUNS_DIR
    assert runs_dir(tmp_path / "mine") == tmp_path / "mine"  # [redump] out_dir, where it is set
    comparison = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    settings = RedumpSettings(test=SideSettings("torch", "python run.py"))
    plan = plan_for(comparison, settings, "test", 3, None, datetime(2026, 11, 22, 3, 0, 0))
    assert plan.folder == tmp_path / "tui-acc-runs" / "redump-test-token3-20261122-030000"
    assert main(["demo", "--no-tui"]) == 0
    assert "tui-acc-runs/demo/golden" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["tui-acc-runs"]  # nothing else in the working folder
    assert (tmp_path / "tui-acc-runs" / "demo" / "golden").is_dir()


def test_a_folder_holding_two_dumps_names_them_and_the_command(
    demo_pair, capsys: pytest.CaptureFixture[str]
) -> None:
    # the demo's folder, passed for one of its dumps: golden/ and test/ are in it
    assert main(["report", str(demo_pair.out), str(demo_pair.test)]) == 2
    err = capsys.readouterr().err
    command = shlex.join(["tui-acc", str(demo_pair.golden), str(demo_pair.test)])
    assert (
        f"{demo_pair.out}: not a dump itself; it holds two, golden/ and test/: compare them with {command}"
        in err
    )
    assert "expected" not in err  # not the list of every format it is not


def test_a_mistyped_path_gets_the_nearest_that_exists(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(demo_pair.out / "goldn"), str(demo_pair.test)]) == 2
    assert f"no such file or directory; did you mean {demo_pair.golden}?" in capsys.readouterr().err
    # each missing part mended in its folder, a relative path kept relative
    (tmp_path / "runs" / "demo" / "golden").mkdir(parents=True)
    assert near_path(tmp_path / "rnus" / "demo" / "gloden") == tmp_path / "runs" / "demo" / "golden"
    assert near_path(tmp_path / "elsewhere" / "x") is None
    monkeypatch.chdir(tmp_path)
    assert near_path(Path("runs/dmeo")) == Path("runs/demo")
    with pytest.raises(DumpError) as raised:
        open_dump(tmp_path / "nothing-like-it")
    assert "did you mean" not in str(raised.value)
