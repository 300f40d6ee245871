"""A fault whose logits stay within their bounds: ``f`` goes on to every token's operators and lands on
the first local one; ``--all-tokens`` judges them in the background and marks each token."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import torch
from textual.widgets import DataTable, Static

from tests.conftest import device_dir
from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.verdicts.judge import Judge

BROKEN_OP = "root.model.layers.1.mlp.down_proj"  # not the logits: its token's logits still pass
BROKEN_TOKEN = 2


@pytest.fixture
def hidden_fault(demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The golden against a copy of it whose one operator's output is negated at token 2: every
    token's logits pass (the demo's last layers wash it out), the operator's error is its own."""
    work = tmp_path / "work"
    shutil.copytree(demo_pair.golden, work / "golden")
    shutil.copytree(demo_pair.golden, work / "test")
    output = device_dir(work / "test") / str(BROKEN_TOKEN) / BROKEN_OP / "output.pth"
    torch.save(-torch.load(output), output)
    monkeypatch.chdir(work)
    return work


def _text(app: AccApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def test_f_goes_on_to_the_operators_where_every_token_passes(hidden_fault: Path) -> None:
    app = AccApp(open_comparison("golden", "test"))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert "every token passes" in _text(app, "#summary")
        await pilot.press("f")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == BROKEN_TOKEN
        assert screen.cursor_key() == BROKEN_OP  # at ◆
        # the report names the same operator at the same token
        report = app.comparison.verdicts.first_local()
        assert report is not None and report.token == BROKEN_TOKEN and report.culprit is not None
        assert report.culprit.node == BROKEN_OP


async def test_f_says_so_where_no_operator_is_local(demo_pair, tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    shutil.copytree(demo_pair.golden, work / "golden")
    shutil.copytree(demo_pair.golden, work / "test")
    monkeypatch.chdir(work)
    app = AccApp(open_comparison("golden", "test"))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, TokenScreen)
        said = [n.message for n in app._notifications]
        assert any("no operator's error is its own at any token" in m for m in said), said
        assert "operators judged at 8/8 tokens, none local" in _text(app, "#summary")


async def test_a_key_cancels_the_search(hidden_fault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the operators are judged, any key calls the jump off and stops the search."""
    release, waiting = threading.Event(), threading.Event()
    judged = Judge.token

    def held(self, token, *args, **kwargs):  # type: ignore[no-untyped-def]
        if token >= 1:  # the sweep is under way when the key comes
            waiting.set()
            assert release.wait(60), "never released"
        return judged(self, token, *args, **kwargs)

    monkeypatch.setattr(Judge, "token", held)
    app = AccApp(open_comparison("golden", "test"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()  # the tokens' logits (not the sweep: not started)
        await pilot.pause()
        await pilot.press("f")
        assert waiting.wait(60)
        assert "judging each token's operators" in _text(app, "#status")
        await pilot.press("j")
        assert "cancelled" in _text(app, "#status")
        release.set()
        await settle(pilot)
        assert isinstance(app.screen, TokenScreen)  # no token opened behind the user's back


async def test_all_tokens_marks_each_tokens_local_operators(hidden_fault: Path) -> None:
    app = AccApp(open_comparison("golden", "test"), all_tokens=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)  # the logits; the sweep starts once they are in
        await settle(pilot)  # the sweep
        table = app.screen.query_one("#tokens", DataTable)
        cells = {str(key.value): str(table.get_cell(key, "local_ops")) for key in table.rows}
        assert cells == {str(t): ("1 L" if t == BROKEN_TOKEN else "-") for t in range(8)}
        assert f"first local at token {BROKEN_TOKEN}" in _text(app, "#summary")
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.screen, OperatorScreen) and app.screen.token == BROKEN_TOKEN
        assert app.screen.cursor_key() == BROKEN_OP


async def test_f_goes_back_to_an_earlier_tokens_culprit(family_case, monkeypatch) -> None:
    """The first failing token (3) has no operator of its own to blame: its error comes from the
    prefill's embedding through the KV cache. ``f`` lands there, as the report names it."""
    folder = family_case("llama-msprobe-L0-embedding")
    monkeypatch.chdir(folder)
    app = AccApp(open_comparison("golden", "test"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)  # token 3's operators: no culprit there, so the tokens before it
        await settle(pilot)  # the earlier token opened, judged, the cursor at its culprit
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == 0
        assert screen.cursor_key() == "Module.model.embed_tokens.Embedding.forward.0"
        said = [n.message for n in app._notifications]
        assert any("No operator at token 3 adds error of its own" in m for m in said), said
