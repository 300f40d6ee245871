"""What ``tui-acc demo`` prints works as printed, re-dump included, for each of its layouts: the
printed command finds the demo's tui-acc.toml, and ``r`` gets a runnable plan from it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.redump.select import plan_for
from tui_acc.tui.app import AccApp


def _printed_app(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> AccApp:
    """Run ``tui-acc demo ... --no-tui``, then the command it printed, from a folder with no
    tui-acc.toml; return the app that command would run."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["demo", *argv, "--no-tui"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("compare them:")]
    printed = shlex.split(line.removeprefix("compare them:"))
    assert printed[0] == "tui-acc"
    opened: list[AccApp] = []
    monkeypatch.setattr(AccApp, "run", lambda app, *a, **k: opened.append(app))
    assert main(printed[1:]) == 0
    (app,) = opened
    return app


def _test_plan(app: AccApp, tmp_path: Path):
    cmp = app.comparison
    token = cmp.engine.first_failing_token()
    assert token is not None
    op = cmp.verdicts.culprit(token)
    assert op is not None
    return plan_for(cmp, app.redump_settings, "test", token, op["golden_node"], datetime.now(), tmp_path)


def test_the_printed_command_of_the_torch_demo_gets_a_redump_plan(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    app = _printed_app(["--out", str(demo_pair.out)], tmp_path, monkeypatch, capsys)
    assert app.config_file == demo_pair.out / "tui-acc.toml"  # a command typed for r is kept there
    plan = _test_plan(app, tmp_path)
    assert plan.dumper == "torch"
    assert plan.argv[:3] == (sys.executable, "-m", "tui_acc.demo.infer")
    assert str(demo_pair.out.resolve()) in plan.argv and "test" in plan.argv
    golden = plan_for(app.comparison, app.redump_settings, "golden", 3, None, datetime.now(), tmp_path)
    assert "golden" in golden.argv


@pytest.mark.parametrize("layout", ["atb", "mindie"])
def test_the_atb_demos_write_a_config_and_their_redump_reopens_at_the_fault(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    app = _printed_app(["--out", str(out), f"--{layout}"], tmp_path, monkeypatch, capsys)
    assert (out / "tui-acc.toml").is_file()
    assert app.comparison.test.format == "msit-atb"
    plan = _test_plan(app, tmp_path / "redumps")
    assert plan.dumper == "custom" and plan.argv[-2:] == ("--layout", layout)
    if layout == "mindie":
        return  # the same script as atb's; one run is enough
    # run it as `r` does (its environment, no shell), and open what it wrote as the TUI would
    plan.folder.mkdir(parents=True)
    done = subprocess.run(
        plan.argv, env={**os.environ, **plan.env}, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    reopened = app.opener(app.comparison.golden.root, plan.out)
    token = plan.selection.token
    assert reopened.test.format == "msit-atb" and reopened.pairing.tokens == [token]
    found = reopened.verdicts.culprit(token)
    assert found is not None and found["golden_node"] == "root.model.layers.2.mlp.down_proj"
