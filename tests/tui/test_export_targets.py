"""Pilot: export targets the file system refuses or that are not files keep the app up, the dialog
open with the reason, and the user's session intact (it used to exit on an OSError)."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Static

from tests.tui.conftest import export_to, settle
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.export_dialog import ExportDialog
from tui_acc.tui.screens.tokens import TokenScreen


def _hint(app: AccApp) -> str:
    return str(app.screen.query_one("#export-hint", Static).render())


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("x" * 300 + ".csv", "File name too long"),
        ("gone.csv", "a symbolic link that leads nowhere"),
        ("view.json", "tui-acc does not write .json files"),
        ("~nosuchuser-tui-acc/view.csv", "cannot write here"),
    ],
    ids=["name over 255 bytes", "link to nothing", "json extension", "unknown ~user"],
)
async def test_an_export_the_system_refuses_is_said_and_the_app_stays(
    demo_app: AccApp, name: str, reason: str
) -> None:
    (demo_app.export_dir / "gone.csv").symlink_to(demo_app.export_dir / "nowhere" / "gone.csv")
    async with demo_app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        await export_to(pilot, name)  # 304 keys typed through the pilot took 20 s
        await pilot.press("enter")  # a second Enter (the "replace it" confirmation) changes nothing
        assert isinstance(demo_app.screen, ExportDialog) and reason in _hint(demo_app)
        assert demo_app.screen.query_one("#export-path", Input).value == name  # kept, to be fixed
        await pilot.press("ctrl+a", "ctrl+k", *"fixed.csv", "enter")
        assert isinstance(demo_app.screen, TokenScreen)
    assert (demo_app.export_dir / "fixed.csv").is_file()
    assert (demo_app.export_dir / "gone.csv").is_symlink()  # the link was not replaced
    written = sorted(p.name for p in demo_app.export_dir.iterdir())
    assert written == ["fixed.csv", "fixed.thresholds.json", "gone.csv"]  # the thresholds beside the CSV
