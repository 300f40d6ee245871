"""Helpers for driving the app: open the demo pair, wait for the workers."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot

from tui_acc import open_comparison
from tui_acc.tui.app import AccApp


@pytest.fixture(autouse=True)
def notifications_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notification stays until the test reads it: after Textual's 5 s a slow machine (a token
    judged between the notice and the check) found it gone, a test's result hanging on its speed."""
    monkeypatch.setattr(App, "NOTIFICATION_TIMEOUT", 3600.0)


async def settle(pilot: Pilot[None]) -> None:
    """Wait until every background computation has finished and its messages are handled."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def cursor_key(app: AccApp, selector: str) -> str:
    """The key of the row under the cursor of table ``selector`` on the screen shown."""
    from textual.widgets import DataTable

    table = app.screen.query_one(selector, DataTable)
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


async def export_to(pilot: Pilot[None], path: str) -> None:
    """``e``, the path put in the dialog's field, Enter. The path is set rather than typed: a pilot
    types a /tmp path in 5 s, a key at a time; the field's own typing is held by the tests that type
    a short name."""
    from textual.widgets import Input

    await pilot.press("e")
    pilot.app.screen.query_one("#export-path", Input).value = path
    await pilot.press("enter")


@pytest.fixture(autouse=True)
def detail_follows_every_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator detail follows each cursor move once it is drawn, however quickly the keys come:
    the same on a fast machine and a slow one (test_keys_flows holds what a held key does)."""
    from tui_acc.tui.screens.operators.detail import DetailPanel

    monkeypatch.setattr(DetailPanel, "FOLLOW_REST", 0.0)


@pytest.fixture
def demo_app(demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AccApp:
    # Relative paths keep the title line identical from run to run (snapshots compare it).
    monkeypatch.chdir(demo_pair.out)
    exports = tmp_path / "exports"
    exports.mkdir()
    return AccApp(open_comparison("golden", "test"), export_dir=exports)


@pytest.fixture
def atb_app(atb_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AccApp:
    """The demo's torch golden against its ATB export, opened by relative paths (the title line is the
    same on every machine: snapshots compare it)."""
    golden, plain, _ = atb_pair
    work = tmp_path / "work"
    work.mkdir()
    (work / "golden").symlink_to(golden)
    (work / "test").symlink_to(plain)
    monkeypatch.chdir(work)
    return AccApp(open_comparison("golden", "test"), export_dir=tmp_path)
