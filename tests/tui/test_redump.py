"""Pilot: re-dump from the TUI with a real dumper (the demo's inference script writes a real dump)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.content import Content
from textual.widgets import DataTable, Input, RichLog, Static

from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.redump import RedumpSettings, SideSettings
from tui_acc.redump.runner import RedumpRun
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.redump_dialog import QuitDialog, RedumpDialog
from tui_acc.tui.screens.redump_log import RedumpLogScreen
from tui_acc.tui.screens.tokens import TokenScreen


def _infer(demo_pair, *extra: str) -> str:
    args = [
        sys.executable,
        "-m",
        "tui_acc.demo.infer",
        "--demo",
        str(demo_pair.out),
        "--side",
        "test",
        *extra,
    ]
    return shlex.join(args)


def _app(demo_pair, tmp_path: Path, exec_: str | None, monkeypatch: pytest.MonkeyPatch) -> AccApp:
    monkeypatch.chdir(tmp_path)  # new dumps go to the working directory, beside the demo's
    settings = RedumpSettings(test=SideSettings("torch", exec_), golden=SideSettings("torch", None))
    opener = functools.partial(open_comparison)
    app = AccApp(
        open_comparison(demo_pair.golden, demo_pair.test), export_dir=tmp_path, redump=settings, opener=opener
    )
    app.config_file = tmp_path / "tui-acc.toml"
    return app


def _text(app: AccApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def _keys(app: AccApp) -> set[str]:
    """The keys the current screen offers now (what its footer can show)."""
    return set(app.screen.active_bindings)


@contextlib.contextmanager
def _gate(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None]]]:
    """A named pipe for the dumper's ``--gate``: yields it and a function that lets one token through.

    The dumper waits at the gate before each token; closing the pipe (on leaving) lets it run to
    the end. The test decides when the dumper moves on: no delay to outlast, no race.
    """
    path = tmp_path / "gate"
    os.mkfifo(path)
    # Read-write: on Linux this open never waits for the other end, whether the dumper has opened
    # its end yet, already has, or never will (a run cancelled while starting).
    held = os.open(path, os.O_RDWR)
    try:
        yield path, functools.partial(os.write, held, b"1")
    finally:
        os.close(held)


async def _wait_run(app: AccApp, pilot) -> None:  # type: ignore[no-untyped-def]
    run = app.redump_run
    assert run is not None
    assert await asyncio.get_running_loop().run_in_executor(None, run.wait, 120), "the re-dump never ended"
    await pilot.pause()
    await pilot.pause()


async def _start(app: AccApp, pilot) -> RedumpRun:  # type: ignore[no-untyped-def]
    """From the token list: `r`, Enter; the re-dump is running."""
    await settle(pilot)
    await pilot.press("r", "enter")
    run = app.redump_run
    assert run is not None and run.running
    return run


async def _to_fault(pilot) -> None:  # type: ignore[no-untyped-def]
    await settle(pilot)
    await pilot.press("f")
    await settle(pilot)
    await pilot.press("f")


async def test_redump_confirm_stream_succeed_and_reopen_at_the_same_operator(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(demo_pair, tmp_path, _infer(demo_pair), monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await _to_fault(pilot)
        await pilot.press("r")
        dialog = app.screen
        assert isinstance(dialog, RedumpDialog)
        shown = _text(app, "#redump-command")
        assert "export TUI_ACC_TOKEN=3" in shown
        assert f"export TUI_ACC_MODULES='{demo_pair.fault_module}*,root.lm_head*'" in shown
        assert "tui_acc.demo.infer" in shown and "# new folder: " in _text(app, "#redump-where")
        assert not list(tmp_path.glob("tui-acc-runs/redump-*"))  # nothing runs before Enter
        await pilot.press("enter")
        assert isinstance(app.screen, OperatorScreen)  # back to browsing while it runs
        await _wait_run(app, pilot)
        run = app.redump_run
        assert run is not None and run.status == "succeeded", run.lines
        assert "re-dump test token 3: finished" in _text(app, "#redump-bar")
        # under ./tui-acc-runs: what tui-acc makes is in one folder, not spread in the working one
        assert run.plan.folder.parent == tmp_path / "tui-acc-runs" and run.plan.folder.name.startswith(
            "redump-test-token3-"
        )
        await pilot.press("L")
        assert isinstance(app.screen, RedumpLogScreen)
        logged = "\n".join(str(line.text) for line in app.screen.query_one(RichLog).lines)
        assert "infer: token 3 done" in logged and "infer: generated" in logged
        await pilot.press("o")
        await settle(pilot)
        assert app.comparison.test.root == run.plan.out and app.comparison.golden.root == demo_pair.golden
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == 3
        table = screen.query_one("#ops", DataTable)
        key = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        assert key == demo_pair.fault_module  # reopened at the same operator
        assert table.row_count < 20  # only the re-dumped subtree (and the logits) paired
        found = app.comparison.verdicts.culprit(3)
        assert found is not None and found["golden_node"] == demo_pair.fault_module  # the fault, re-found


async def test_o_opens_the_finished_redump_where_the_status_line_offers_it(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-dump line under the operators says "o open the new dump": o there opens it, as in the
    log, whose footer offers o once the run has succeeded."""
    app = _app(demo_pair, tmp_path, _infer(demo_pair), monkeypatch)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("L")
        assert isinstance(app.screen, RedumpLogScreen) and not {"x", "o"} & _keys(app)  # no re-dump yet
        await pilot.press("escape")
        await _to_fault(pilot)
        await pilot.press("r", "enter")
        await _wait_run(app, pilot)
        run = app.redump_run
        assert run is not None and run.status == "succeeded", run.lines
        assert "o open the new dump" in _text(app, "#redump-bar")
        await pilot.press("L")
        assert "o" in _keys(app) and "x" not in _keys(app)
        await pilot.press("escape")
        assert isinstance(app.screen, OperatorScreen)
        await pilot.press("o")
        await settle(pilot)
        assert app.comparison.test.root == run.plan.out
        assert isinstance(app.screen, OperatorScreen) and app.screen.token == 3


async def test_redump_cancel_stops_it_and_keeps_the_session(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _gate(tmp_path) as (gate, let_one_token_through):
        app = _app(demo_pair, tmp_path, _infer(demo_pair, "--gate", str(gate)), monkeypatch)
        before = app.comparison
        async with app.run_test(size=(100, 30)) as pilot:
            run = await _start(app, pilot)
            assert "running" in _text(app, "#redump-bar")
            await pilot.press("L")  # the dumper waits at its gate: its token lines arrive while we watch
            assert "x" in _keys(app) and "o" not in _keys(app)  # nothing finished to open yet
            log = app.screen.query_one(RichLog)
            mounted_with = len(run.lines)
            assert not any("token 0 done" in line for line in run.lines)
            let_one_token_through()
            token_0_done = functools.partial(run.wait_for_line, lambda line: "token 0 done" in line, 120)
            assert await asyncio.get_running_loop().run_in_executor(None, token_0_done), run.lines
            await pilot.pause()  # the line's message, posted before wait_for_line returned, is handled
            assert any("token 0 done" in str(line.text) for line in log.lines), run.lines
            assert len(log.lines) > mounted_with  # streamed in, not only copied when the screen opened
            for size in ((60, 16), (160, 48)):  # an SSH window resized: the run (held at token 1) goes on
                await pilot.resize_terminal(*size)
                await pilot.pause()
                assert run.running and isinstance(app.screen, RedumpLogScreen) and log.lines
            await pilot.press("x")
            await _wait_run(app, pilot)
            assert run.status == "cancelled" and app.comparison is before
            assert "stopped after" in _text(app, "#redump-status")
            assert not {"x", "o"} & _keys(app)  # nothing runs, nothing to open: neither key is offered
            await pilot.press("o")  # nothing to open
            assert app.comparison is before


async def test_redump_failure_is_shown_and_changes_nothing(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(demo_pair, tmp_path, _infer(demo_pair, "--fail"), monkeypatch)
    before = app.comparison
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("r", "enter")
        await _wait_run(app, pilot)
        run = app.redump_run
        assert run is not None and run.status == "failed" and run.returncode == 3
        assert "failed (exit 3)" in _text(app, "#redump-bar")
        assert any("simulated device error" in line for line in run.lines)
        await pilot.press("L", "o")
        assert app.comparison is before and isinstance(app.screen, RedumpLogScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, TokenScreen)


async def test_what_a_notification_quotes_keeps_its_brackets(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path, a command or an error is shown as it is: markup would eat ``[bin]`` (and a dumper's
    JSON config, ``"step": [3]``)."""
    missing = tmp_path / "[bin]" / "infer"
    app = _app(demo_pair, tmp_path, shlex.join([str(missing), "--side", "test"]), monkeypatch)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("r", "enter")
        await pilot.pause()
        (said,) = (n for n in app._notifications if n.title == "Re-dump not started")
        # a toast renders its message as markup unless told it is plain text (textual's Toast.render)
        shown = Content(said.message) if not said.markup else Content.from_markup(said.message)
        assert str(missing) in shown.plain, shown.plain


async def test_escape_runs_nothing_and_a_typed_command_is_remembered(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(demo_pair, tmp_path, None, monkeypatch)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        assert "cannot run: no inference command for the test side" in _text(app, "#redump-command")
        await pilot.press("escape")
        assert app.redump_run is None and not list(tmp_path.glob("tui-acc-runs/redump-*"))
        assert "re-dump cancelled" in _text(app, "#status")
        await pilot.press("r")
        app.screen.query_one("#redump-exec", Input).value = _infer(demo_pair)
        await pilot.pause()
        assert "tui_acc.demo.infer" in _text(app, "#redump-command")
        await pilot.press("enter")
        await _wait_run(app, pilot)
        assert app.redump_run is not None and app.redump_run.status == "succeeded"
    remembered = (tmp_path / "tui-acc.toml").read_text()
    assert "[redump.test]" in remembered and "tui_acc.demo.infer" in remembered
    assert app.redump_settings.test.exec == _infer(demo_pair)


async def test_quitting_during_a_redump_asks_and_stop_leaves_no_process(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _gate(tmp_path) as (gate, _):
        app = _app(demo_pair, tmp_path, _infer(demo_pair, "--gate", str(gate)), monkeypatch)
        async with app.run_test(size=(100, 30)) as pilot:
            run = await _start(app, pilot)  # held at its gate until the test lets it go
            await pilot.press("q")
            assert isinstance(app.screen, QuitDialog)
            await pilot.press("escape")  # stay
            assert run.running and not isinstance(app.screen, QuitDialog)
            await pilot.press("q", "s")
        assert run.wait(60) and run.status == "cancelled" and run.returncode != 0


async def test_detach_leaves_the_redump_running_and_logging_after_quitting(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _gate(tmp_path) as (gate, _):
        app = _app(demo_pair, tmp_path, _infer(demo_pair, "--gate", str(gate)), monkeypatch)
        async with app.run_test(size=(100, 30)) as pilot:
            run = await _start(app, pilot)
            at_gate = functools.partial(run.wait_for_line, lambda line: "waits at the gate" in line, 120)
            assert await asyncio.get_running_loop().run_in_executor(None, at_gate), run.lines
            await pilot.press("q", "d")  # held at its gate: it cannot have ended before we quit
        assert run.status == "detached" and run._process is not None and run._process.poll() is None
    # the gate is gone: the dumper runs on, after tui-acc has quit
    assert run._process.wait(120) == 0
    assert "infer: generated" in run.plan.log.read_text()  # and kept its log


async def test_a_chatty_dumper_does_not_flood_the_app_with_messages(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "chatty.py"
    script.write_text("for n in range(3000):\n    print('line', n, flush=True)\n")
    app = _app(demo_pair, tmp_path, shlex.join([sys.executable, str(script)]), monkeypatch)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("L")  # the log screen, before the run: every line arrives while it is shown
        await pilot.press("escape", "r", "enter")
        await _wait_run(app, pilot)
        await pilot.press("L")
        await pilot.pause()
        log = app.screen.query_one(RichLog)
        shown = [str(line) for line in log.lines]
        assert any("line 2999" in line for line in shown) and sum("line 1500" in line for line in shown) == 1


def test_only_one_news_message_waits_however_many_lines_arrive() -> None:
    from tui_acc.tui.messages import OneInFlight

    news = OneInFlight()
    assert [news.arrive() for _ in range(1000)].count(True) == 1  # one message for a burst of lines
    news.handled()
    assert news.arrive() and not news.arrive()


async def test_a_dialog_confirmed_before_its_first_refresh_does_not_fit_itself(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`r` then Enter at once (a loaded machine, a fast typist): the fit the dialog asked for after
    its first refresh comes when it is gone, and must not look for its widgets."""
    from tui_acc.tui.screens.redump_dialog import RedumpDialog

    app = _app(demo_pair, tmp_path, _infer(demo_pair), monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        dialog = app.screen
        assert isinstance(dialog, RedumpDialog)
        await pilot.press("escape")
        await pilot.pause()
        dialog._fit()  # what call_after_refresh runs late: nothing to fit, no error
