"""The token list warns when the golden is the less precise side, with the command that swaps them;
the right way round shows nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.tui.app import AccApp


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_pair_opened_the_wrong_way_round_is_warned_in_the_header(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    monkeypatch.chdir(demo_pair.out)
    app = AccApp(
        open_comparison("test", "golden", CompareOptions(cache=False)),
        export_dir=tmp_path,
        swap="tui-acc golden test",
    )
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        warning = app.screen.query_one("#swapped", Static)
        said = str(warning.render())
        assert warning.display and warning.region.height >= 1 and warning.region.y == 1  # under the header
        assert said.startswith("⚠ golden is bfloat16, test is float32: the reference is less precise")
        assert said.endswith("To swap them: tui-acc golden test")
        # the whole line is on screen at 80 columns: it wraps, nothing is cut
        shown = "".join(str(line.text).rstrip() for line in warning.render_lines(warning.region.reset_offset))
        assert shown.replace(" ", "") == said.replace(" ", "")


async def test_the_right_way_round_shows_no_warning(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert not demo_app.screen.query_one("#swapped", Static).display
