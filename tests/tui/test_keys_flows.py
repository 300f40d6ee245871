"""Pilot: the keys and flows a keyboard user relies on (f from launch to ◆, Tab, filter as you type,
the palette, back from a re-dump, the re-dump dialog at 80x24)."""

from __future__ import annotations

import html
import io
import re
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from textual import events
from textual.widgets import DataTable, Input, Static

from tests.tui.conftest import cursor_key, settle
from tui_acc import open_comparison
from tui_acc.redump import RedumpSettings, SideSettings
from tui_acc.tui.app import AccApp
from tui_acc.tui.palette import TITLES, declared_bindings
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.redump_dialog import RedumpDialog
from tui_acc.tui.screens.redump_log import RedumpLogScreen
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.tui.widgets.layer_tree import LayerTree


def _text(app: AccApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def _screen_lines(app: AccApp) -> str:
    """What the terminal shows, as text (from the screenshot: only what is on screen)."""
    svg = app.export_screenshot()
    texts = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return "".join(html.unescape(t) for t in texts).replace("\xa0", " ")


@pytest.fixture
def gated_tokens(demo_app: AccApp) -> Iterator[threading.Event]:
    """The token comparison waits until the test sets the event: `f` is pressed while it runs."""
    engine = demo_app.comparison.engine
    original = engine.token_rows
    gate = threading.Event()

    def token_rows(*args: object, **kwargs: object) -> object:
        gate.wait()
        return original(*args, **kwargs)  # type: ignore[arg-type]

    engine.token_rows = token_rows  # type: ignore[method-assign]
    yield gate
    gate.set()


# --- 4: f from launch -------------------------------------------------------------------------------


async def test_f_from_launch_opens_the_first_failing_token_at_its_culprit(
    demo_app: AccApp, demo_pair
) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == demo_pair.fault_token
        assert cursor_key(demo_app, "#ops") == demo_pair.fault_module
        tree = screen.query_one(LayerTree)
        assert tree.cursor_node is not None and tree.cursor_node.data == demo_pair.fault_module
        await pilot.press("escape", "k", "enter")  # Enter still opens the selected token, at its top
        await settle(pilot)
        assert (
            isinstance(demo_app.screen, OperatorScreen) and demo_app.screen.token == demo_pair.fault_token - 1
        )
        assert demo_app.screen.query_one("#ops", DataTable).cursor_row == 0


async def test_f_while_comparing_shows_progress_and_jumps_when_known(
    demo_app: AccApp, demo_pair, gated_tokens: threading.Event
) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        try:
            assert isinstance(demo_app.screen, TokenScreen)
            assert "finding the first failing token… 0/8" in _text(demo_app, "#status")
        finally:  # the app ends only once its workers do
            gated_tokens.set()
        await settle(pilot)
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == demo_pair.fault_token
        assert cursor_key(demo_app, "#ops") == demo_pair.fault_module


async def test_the_strip_names_no_bound_before_the_logits_dtype_is_known(
    demo_app: AccApp, gated_tokens: threading.Event
) -> None:
    """.pth dumps say their dtype once a token is read: until then the strip's label says no bound,
    rather than float32's 1e-5 that turns into bfloat16's 5e-3 as the first token arrives."""
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        before = _text(demo_app, "#strip-label")
        gated_tokens.set()  # before asserting: the app ends only once its token worker can
        assert before.startswith("KL / threshold … "), before
        await settle(pilot)
        assert _text(demo_app, "#strip-label").startswith("KL / threshold 5e-3 ")


async def test_any_key_cancels_the_pending_jump(demo_app: AccApp, gated_tokens: threading.Event) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("f", "j")
        try:
            assert "cancelled" in _text(demo_app, "#status")
        finally:  # the app ends only once its workers do
            gated_tokens.set()
        await settle(pilot)
        assert isinstance(demo_app.screen, TokenScreen)


# --- 5: Tab -----------------------------------------------------------------------------------------


async def test_tab_moves_focus_on_the_operator_screen(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        table = demo_app.screen.query_one("#ops", DataTable)
        assert demo_app.focused is table
        await pilot.press("tab")
        moved = demo_app.focused
        assert moved is not table and moved is not None
        await pilot.press("shift+tab")
        assert demo_app.focused is table


# --- 11: the re-dump dialog -------------------------------------------------------------------------


def _ticking_clock() -> object:
    """A clock a few seconds later at every reading (as a slow user sees it)."""
    now = [datetime(2026, 1, 2, 3, 4, 5)]

    def clock() -> datetime:
        now[0] += timedelta(seconds=7)
        return now[0]

    return clock


async def test_redump_dialog_creates_the_folder_it_shows_and_fits_80x24(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = RedumpSettings(test=SideSettings("torch", "true"), golden=SideSettings("torch", None))
    app = AccApp(
        open_comparison(demo_pair.golden, demo_pair.test),
        export_dir=tmp_path,
        redump=settings,
        clock=_ticking_clock(),  # type: ignore[arg-type]
    )
    app.config_file = tmp_path / "tui-acc.toml"
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RedumpDialog)
        shown = _screen_lines(app)
        assert "# log:" in shown and "Enter: run" in shown
        folder = re.search(
            r"# new folder: (\S+)", str(app.screen.query_one("#redump-where", Static).render())
        )
        assert folder is not None
        await pilot.press("space", "backspace")  # typing rebuilds the plan
        await pilot.press("enter")
        run = app.redump_run
        assert run is not None
        assert str(run.plan.folder) == folder.group(1) and run.plan.folder.is_dir()


async def test_redump_dialog_scrolls_its_command_from_the_keyboard_at_80x24(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of the command that do not fit are counted in the hint and reached with ↓ (a scrollbar
    is a colour: without colour, or without a mouse over SSH, it is no help)."""
    monkeypatch.chdir(tmp_path)
    command = f"{sys.executable} -m tui_acc.demo.infer --demo {demo_pair.out} --side test"
    settings = RedumpSettings(test=SideSettings("torch", command), golden=SideSettings("torch", None))
    app = AccApp(open_comparison(demo_pair.golden, demo_pair.test), export_dir=tmp_path, redump=settings)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RedumpDialog)
        assert "{exec}" not in _screen_lines(app)  # the template's placeholder means nothing here
        await pilot.pause()  # the command's box is fitted to what the rest leaves, once laid out
        assert re.search(r"↓ \d+ more lines$", _text(app, "#redump-hint")), _text(app, "#redump-hint")
        assert "TUI_ACC_EXEC" not in _screen_lines(app)
        for _ in range(40):  # a bound: each ↓ scrolls one line
            if "below" not in _text(app, "#redump-hint") and "more" not in _text(app, "#redump-hint"):
                break
            await pilot.press("down")
        assert re.search(r"↑ \d+ lines above$", _text(app, "#redump-hint")), _text(app, "#redump-hint")
        assert "TUI_ACC_EXEC" in _screen_lines(app)
        await pilot.press("escape")


# --- 14: / filters as you type; Esc clears it; a token reopens as it was left -----------------------


async def test_filter_as_you_type_says_when_nothing_matches_and_esc_clears_it(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        table = demo_app.screen.query_one("#ops", DataTable)
        everything = table.row_count
        await pilot.press("slash", *"down_pro")  # no Enter
        await pilot.pause()
        keys = [str(k.value) for k in table.rows]
        assert keys and len(keys) < everything and all(k.endswith("down_proj") for k in keys)
        await pilot.press(*"xyz")
        await pilot.pause()
        assert table.row_count == 0
        assert "no operator matches 'down_proxyz'" in _text(demo_app, "#summary")
        await pilot.press(*["backspace"] * 3, "enter")  # applied: the box closes, the filter stays
        assert 0 < table.row_count < everything
        await pilot.press("escape")  # clears the filter, stays on the token
        assert isinstance(demo_app.screen, OperatorScreen) and table.row_count == everything
        await pilot.press("escape")
        assert isinstance(demo_app.screen, TokenScreen)


async def test_reopening_a_token_keeps_its_filter_tree_and_cursor(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = demo_app.screen
        tree = screen.query_one(LayerTree)
        layer = "root.model.layers.2"
        tree.reveal(layer)
        await pilot.pause()
        tree.focus()
        await pilot.press("enter")  # scope the table to layer 2
        await pilot.pause()
        await pilot.press("slash", *"proj", "enter", "G")
        cursor = cursor_key(demo_app, "#ops")
        expanded = tree.expanded_names()
        assert cursor.endswith("proj") and expanded != {"root"}
        await pilot.press("backspace")  # back, keeping the filter (Esc would clear it first)
        assert isinstance(demo_app.screen, TokenScreen)
        await pilot.press("enter")
        await settle(pilot)
        again = demo_app.screen
        assert isinstance(again, OperatorScreen) and again is not screen
        assert "filter 'proj'" in _text(demo_app, "#summary") and "in model.layers.2" in _text(
            demo_app, "#summary"
        )
        assert cursor_key(demo_app, "#ops") == cursor
        reopened = again.query_one(LayerTree).expanded_names()
        # as left, and the path to the cursor's operator opened to show it
        assert expanded <= reopened and all(cursor.startswith(name) for name in reopened - expanded)


# --- 12: the command palette ------------------------------------------------------------------------


def test_every_key_of_every_screen_has_a_palette_title() -> None:
    for node in (AccApp, TokenScreen, OperatorScreen, RedumpLogScreen):
        for binding in declared_bindings(node):
            assert binding.id in TITLES, (
                f"{node.__name__}: {binding.key} ({binding.action}) has no palette title"
            )
    assert all(re.fullmatch(r"[a-z-]+: \S.*", title) for title, _ in TITLES.values())


async def test_the_palette_offers_every_key_and_runs_it(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("enter")  # the first failing token, at its first operator
        await settle(pilot)
        screen = demo_app.screen
        offered = {command.title for command in demo_app.get_system_commands(screen)}
        for node in (screen, demo_app):
            for binding in declared_bindings(type(node)):
                assert TITLES[binding.id or ""][0] in offered
        assert {"sort: reverse", "filter: by name or type", "re-dump: what is under the cursor"} <= offered
        await pilot.press("ctrl+p")
        await pilot.press(*"go: first failing operator")
        await pilot.pause()
        await demo_app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert demo_app.screen is screen and cursor_key(demo_app, "#ops") == demo_pair.fault_module


# --- 19: back from a re-dump; its title; its expected gaps --------------------------------------------


async def test_back_to_the_original_dump_after_opening_a_redump(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.tui.test_redump import _app, _infer, _to_fault, _wait_run

    app = _app(demo_pair, tmp_path, _infer(demo_pair), monkeypatch)
    original_test = app.comparison.test.root
    async with app.run_test(size=(80, 24)) as pilot:
        await _to_fault(pilot)
        await pilot.press("r", "enter")
        await _wait_run(app, pilot)
        run = app.redump_run
        assert run is not None and run.status == "succeeded", run.lines
        await pilot.press("L", "o")
        await settle(pilot)
        assert app.comparison.test.root == run.plan.out
        # the title is fitted to 80 columns, elided in the middle: the new path's end is kept
        title = app.format_title(app.title, app.sub_title).plain
        assert (
            len(title) <= 80 - AccApp._HEADER_ROOM
            and title.endswith(str(run.plan.out)[-12:])
            and "…" in title
        )
        await pilot.press("u")
        listing = _static(app)
        problems, _, gaps = listing.partition("Expected gaps of the re-dump")
        assert gaps and "root.model.embed_tokens" in gaps and "root.model.embed_tokens" not in problems
        assert "7 other tokens (0–2, 4–7)" in gaps and "Unmatched (0" in problems
        await pilot.press("escape", "O")
        await settle(pilot)
        assert app.comparison.test.root == original_test
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == demo_pair.fault_token
        assert cursor_key(app, "#ops") == demo_pair.fault_module
        assert len(screen.query_one("#ops", DataTable).rows) > 20  # every operator again


def _static(app: AccApp) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(app.screen.query_one(Static).content)
    return console.export_text()


async def test_keys_typed_at_once_after_slash_go_to_the_filter(demo_app: AccApp) -> None:
    """Pasted or lag-bunched keys arrive together: every one after ``/`` is the filter's, none runs
    as a command (``p`` would open the replay dialog) until Enter or Esc."""
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        driver = demo_app._driver
        assert driver is not None
        for key, char in (("slash", "/"), ("m", "m"), ("l", "l"), ("p", "p")):  # no wait in between
            driver.send_message(events.Key(key, char))
        await pilot.pause()
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen), "a key after / ran as a command"
        assert screen.query_one("#filter", Input).value == "mlp"
        await settle(pilot)
        keys = [str(k.value) for k in screen.query_one("#ops", DataTable).rows]
        assert keys and all(".mlp" in key for key in keys)
        await pilot.press("slash")  # a / inside the filter is typed, not a new filter
        assert screen.query_one("#filter", Input).value == "mlp/"
