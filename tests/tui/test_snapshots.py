"""How the main screens look at 80x24 and 160x48 (pytest-textual-snapshot; -n 0 --snapshot-update)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.tui.app import AccApp

SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES)
def test_token_screen(snap_compare, demo_app: AccApp, size: tuple[int, int]) -> None:
    async def computed(pilot: Pilot[None]) -> None:
        await settle(pilot)  # the cursor starts on the first failing token

    assert snap_compare(demo_app, terminal_size=size, run_before=computed)


@pytest.mark.parametrize("size", SIZES)
def test_operator_screen_at_first_failing_op(snap_compare, demo_app: AccApp, size: tuple[int, int]) -> None:
    async def drilled(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()  # the tree scrolls to ◆ animated

    assert snap_compare(demo_app, terminal_size=size, run_before=drilled)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare, demo_app: AccApp, size: tuple[int, int]) -> None:
    async def help_open(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(demo_app, terminal_size=size, run_before=help_open)


@pytest.mark.parametrize("size", SIZES)
def test_export_dialog(snap_compare, demo_app: AccApp, size: tuple[int, int]) -> None:
    demo_app.export_dir = Path.cwd()  # a relative name in the dialog, the same on every machine
    demo_app.clock = lambda: datetime(2026, 11, 21, 12, 0, 0)

    async def dialog_open(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("enter")  # the first failing token (where the cursor starts), at its top
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)  # the table behind the dialog too: under load its rows come in late

    assert snap_compare(demo_app, terminal_size=size, run_before=dialog_open)


async def _at_first_failing_op(pilot: Pilot[None]) -> None:
    await settle(pilot)
    await pilot.press("f")  # from the tokens: the first failing token, at its first failing op
    await settle(pilot)
    await pilot.press("f")
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()  # the tree scrolls to ◆ animated


def test_torch_against_atb_operator_screen_at_80x24(
    snap_compare, atb_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the tree shown: verdicts and cosines on screen, both sides named in the title."""
    golden, plain, _ = atb_pair
    work = tmp_path / "work"
    work.mkdir()
    (work / "golden").symlink_to(golden)
    (work / "test").symlink_to(plain)
    monkeypatch.chdir(work)  # relative paths keep the title line stable
    app = AccApp(open_comparison("golden", "test"), export_dir=tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_at_first_failing_op)


def test_msprobe_operator_screen_at_80x24(
    snap_compare, model_case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """msprobe's long names: rows told apart by layer, the detail panel's verdicts and digits whole."""
    monkeypatch.chdir(model_case("llama-msprobe-mix"))
    app = AccApp(open_comparison("golden", "test"), export_dir=tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_at_first_failing_op)
