"""The token list is drawn before anything it does not need is imported or listed (so that a
100,000-file dump's token list is on screen in under 0.5 s): the engine and its polars, numpy, torch and
numba come after the first frame, as do the screens behind a key and the rows below the screen's
edge; then all works as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.tokens import TokenScreen

REPO = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter (this one has imported everything already): the app on the demo pair,
# and at its first frame, which of these packages are loaded and how many rows are listed; then
# what the token list holds once every token is compared.
_FIRST_FRAME = """
import asyncio, json, sys
from tui_acc.tui import app as app_module
from tui_acc.tui.screens.tokens import TokenScreen

HEAVY = {"polars", "numpy", "torch", "numba", "ml_dtypes", "pyarrow", "pandas"}
LATER_SCREENS = ("tui_acc.tui.screens.operators", "tui_acc.tui.screens.redump_log")
seen = {}
after_first_frame = TokenScreen._after_first_frame

def observed(screen):
    seen["imported"] = sorted(HEAVY & {name.split(".")[0] for name in sys.modules})
    seen["screens"] = [name for name in LATER_SCREENS if name in sys.modules]
    seen["listed"] = screen.query_one("#tokens").row_count
    after_first_frame(screen)

def run_headless(app):
    async def main():
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            screen = app.screen
            seen["listed after"] = screen.query_one("#tokens").row_count
            seen["compared after"] = screen.tally.compared
            seen["tokens"] = len(app.comparison.pairing.tokens)
            seen["imported after"] = sorted(HEAVY & {name.split(".")[0] for name in sys.modules})
            seen["screens after"] = [name for name in LATER_SCREENS if name in sys.modules]

    asyncio.run(main())

TokenScreen._after_first_frame = observed
app_module.AccApp.run = run_headless  # the rest is what `tui-acc GOLDEN TEST` does
from tui_acc.cli.main import main

assert main([sys.argv[1], sys.argv[2], "--no-cache"]) == 0
print(json.dumps(seen))
"""


def test_the_first_frame_imports_no_engine_and_all_works_after(demo_pair) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _FIRST_FRAME, str(demo_pair.golden), str(demo_pair.test)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["imported"] == []  # none of them before the token list is drawn
    assert "polars" in seen["imported after"]  # the engine's, once its worker compares the tokens
    # nor the screens behind a key (Enter's operators, L's re-dump log); Enter's is ready by then
    assert seen["screens"] == []
    assert seen["screens after"] == ["tui_acc.tui.screens.operators"]
    assert seen["listed"] == seen["listed after"] == seen["compared after"] == seen["tokens"]


async def test_rows_below_the_screen_are_listed_after_the_first_frame(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A screen too short for every token lists those it shows first; the rest follow at once, in
    the token order, and every one of them is compared."""
    monkeypatch.chdir(demo_pair.out)
    comparison = open_comparison("golden", "test", CompareOptions(cache=False))
    tokens = [str(t) for t in comparison.pairing.tokens]
    height = 6
    assert len(tokens) > height  # the demo has more tokens than this screen has lines
    listed: list[int] = []
    after_first_frame = TokenScreen._after_first_frame

    def observed(screen: TokenScreen) -> None:
        listed.append(screen.query_one("#tokens", DataTable).row_count)
        after_first_frame(screen)

    monkeypatch.setattr(TokenScreen, "_after_first_frame", observed)
    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(100, height)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TokenScreen)
        table = screen.query_one("#tokens", DataTable)
        assert listed == [height]
        assert [str(key.value) for key in table.rows] == tokens
        assert screen.tally.compared == len(tokens)
        assert str(table.get_cell(tokens[-1], "passed")) != "…"  # the last row has its verdict


def test_what_the_ui_thread_asks_before_the_first_comparison_never_builds_the_engine(demo_pair) -> None:
    """Help's bounds, the problems list and saving rows at quit: building the engine there would import
    polars and numpy on the event loop, or wait for the worker that is building it."""
    from tui_acc import CompareOptions, open_comparison
    from tui_acc.tui.bounds import help_lines
    from tui_acc.tui.screens.help import _logits_dtypes

    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    assert help_lines(cmp) and _logits_dtypes(cmp) is None
    assert cmp.built_engine is None
    assert cmp.engine is cmp.built_engine is not None  # built on first use, then the same one
