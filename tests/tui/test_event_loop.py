"""Nothing that touches the disk runs on the event loop: each test records the
thread that reads the row cache, writes it, opens a dump or signals a re-dump, and checks it is not
the loop's. The test coroutine runs on the loop's thread, so that is ``threading.get_ident()`` here.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from tests.tui.conftest import settle
from tests.tui.test_redump import _app, _gate, _infer, _start
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import DumpError
from tui_acc.metrics import tensor_rows as tensor_rows_module
from tui_acc.metrics.cache import RowCache
from tui_acc.redump import RedumpSettings, SideSettings
from tui_acc.redump import runner as runner_module
from tui_acc.redump.runner import RedumpRun
from tui_acc.redump.select import plan_for
from tui_acc.session import Comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.tui.widgets.threshold_strip import ThresholdStrip


async def _handled(screen: TokenScreen) -> None:
    """Wait until the messages posted to ``screen`` so far are handled (its queue is in order)."""
    done = asyncio.Event()
    screen.call_later(done.set)
    await done.wait()


async def test_token_rows_arriving_ask_nothing_of_the_row_cache_or_the_files(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each computed token used to make the summary and the strip look every token up in the engine:
    a row cache read and, once per uncomputed token, a stat of its files, for every message."""
    monkeypatch.chdir(demo_pair.out)
    uncached = open_comparison("golden", "test", CompareOptions(cache=False))
    rows = uncached.engine.token_rows()  # the app's engine has none
    comparison = open_comparison("golden", "test")
    for token in comparison.pairing.tokens:
        comparison.pairing.node_pairs(token)  # paired, as the token worker pairs them before computing
    monkeypatch.setattr(TokenScreen, "compute_tokens", lambda self: None)  # the test sends the rows
    lookups: list[object] = []
    real_get, real_identity = RowCache.get, tensor_rows_module.identity
    monkeypatch.setattr(RowCache, "get", lambda cache, key: lookups.append(key) or real_get(cache, key))
    monkeypatch.setattr(tensor_rows_module, "identity", lambda ref: lookups.append(ref) or real_identity(ref))
    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, TokenScreen)
        for row in rows:
            screen.post_message(TokenScreen.TokenComputed(row))
        await _handled(screen)
        assert lookups == []
        summary = str(screen.query_one("#summary", Static).render())
        assert f"{len(rows)}/{len(rows)} tokens compared" in summary
        assert f"first failing: {demo_pair.fault_token}" in summary
        strip = screen.query_one("#kl-strip", ThresholdStrip).levels
        fault = comparison.pairing.tokens.index(demo_pair.fault_token)
        assert strip[fault] > strip[0]  # the fault stands out from a clean token
        screen.post_message(TokenScreen.TokenComputed(rows[fault]))  # the same token again: counted once
        await _handled(screen)
        assert f"{len(rows)}/{len(rows)} tokens compared" in str(
            screen.query_one("#summary", Static).render()
        )
        screen.action_first_failure()  # the cursor to the first failing token (f also opens it)
        assert screen.cursor_key() == str(demo_pair.fault_token)
    assert lookups == []


async def test_rows_are_saved_off_the_event_loop_and_the_last_ones_at_exit(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(demo_pair.out)
    flushed_on: list[int] = []
    real_flush = RowCache.flush
    monkeypatch.setattr(
        RowCache, "flush", lambda cache: flushed_on.append(threading.get_ident()) or real_flush(cache)
    )
    loop_thread = threading.get_ident()
    app = AccApp(open_comparison("golden", "test"), export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)  # the token list (and the prefetch of its first failure) computed and saved
        engine = app.comparison.engine
        clean = next(t for t in app.comparison.pairing.tokens if t != demo_pair.fault_token)
        engine.node_rows(clean)  # computed by no worker: only the save at exit can keep them
        assert engine.computed > 0
    assert flushed_on and loop_thread not in flushed_on
    again = open_comparison("golden", "test").engine
    again.node_rows(clean)
    assert again.computed == 0 and again.from_cache > 0  # every row of that token was saved at exit


def _succeeded_run(comparison: Comparison, tmp_path: Path, token: int) -> RedumpRun:
    """A finished re-dump of the test side at ``token`` (the test's opener decides what it read)."""
    settings = RedumpSettings(
        test=SideSettings("torch", "python infer.py"), golden=SideSettings("torch", None)
    )
    run = RedumpRun(plan_for(comparison, settings, "test", token, None, datetime(2026, 1, 1), tmp_path))
    run.status = "succeeded"
    return run


@pytest.mark.parametrize("readable", [True, False])
async def test_a_redump_is_read_off_the_event_loop_and_the_screens_switch_after(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readable: bool
) -> None:
    monkeypatch.chdir(demo_pair.out)
    opened_on: list[int] = []

    def opener(golden: Path, test: Path) -> Comparison:
        opened_on.append(threading.get_ident())
        if not readable:
            raise DumpError(f"{test}: no dump there")
        return open_comparison("golden", "test")

    loop_thread = threading.get_ident()
    before = open_comparison("golden", "test")
    app = AccApp(before, export_dir=tmp_path, opener=opener)
    app.redump_run = _succeeded_run(before, tmp_path, demo_pair.fault_token)
    notes: list[tuple[str, Any]] = []
    real_notify = app.notify
    monkeypatch.setattr(
        app, "notify", lambda text, **kw: notes.append((text, kw.get("title"))) or real_notify(text, **kw)
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("L", "o")
        await settle(pilot)
        assert opened_on and loop_thread not in opened_on
        if readable:
            assert app.comparison is not before
            assert isinstance(app.screen, OperatorScreen) and app.screen.token == demo_pair.fault_token
            assert any(title == "Re-dump opened" for _, title in notes)
        else:
            assert app.comparison is before
            assert any(
                title == "Cannot open the re-dump" and "no dump there" in text for text, title in notes
            )


@pytest.mark.parametrize("how", ["stop key", "quit, stop", "exit"])
async def test_a_redump_is_stopped_off_the_event_loop(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Stopping waits up to the grace for the dumper to end: that wait is on a thread, whichever way
    the stop came (the log's x, quitting with "stop", the app ending with the run going)."""
    signalled_on: list[int] = []
    real_signal = runner_module._signal_group
    monkeypatch.setattr(
        runner_module,
        "_signal_group",
        lambda pid, sig: signalled_on.append(threading.get_ident()) or real_signal(pid, sig),
    )
    loop_thread = threading.get_ident()
    with _gate(tmp_path) as (gate, _):
        app = _app(demo_pair, tmp_path, _infer(demo_pair, "--gate", str(gate)), monkeypatch)
        async with app.run_test(size=(100, 30)) as pilot:
            run = await _start(app, pilot)  # held at its gate: only a stop ends it
            if how == "stop key":
                await pilot.press("L", "x")
            elif how == "quit, stop":
                await pilot.press("q", "s")
            else:
                app.exit()
            if how != "exit":  # the run ends while the app runs (for "quit, stop": then the app ends)
                ended = functools.partial(run.wait, 60)
                assert await asyncio.get_running_loop().run_in_executor(None, ended)
        assert run.wait(60) and run.status == "cancelled"
    assert signalled_on and loop_thread not in signalled_on
