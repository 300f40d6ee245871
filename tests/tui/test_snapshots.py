"""How the main screens look at 80x24 (pytest-textual-snapshot; update with --snapshot-update)."""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import settle
from tui_acc.tui.app import AccApp


def test_token_screen(snap_compare, demo_app: AccApp) -> None:
    async def computed(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f")

    assert snap_compare(demo_app, terminal_size=(80, 24), run_before=computed)


def test_operator_screen_at_first_failing_op(snap_compare, demo_app: AccApp) -> None:
    async def drilled(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f", "enter")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()

    assert snap_compare(demo_app, terminal_size=(80, 24), run_before=drilled)


def test_help_screen(snap_compare, demo_app: AccApp) -> None:
    async def help_open(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(demo_app, terminal_size=(80, 24), run_before=help_open)
