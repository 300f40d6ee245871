"""``m`` on the operator screen: where the selected tensor's error sits, drawn at 80 columns, with
and without colour, computed off the UI thread (Pilot, and a snapshot)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from rich.console import Console
from textual.pilot import Pilot

from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.metrics.error_map import error_map
from tui_acc.tui import formatting as fmt
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.help import KEYS
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.error_map import ErrorMapView
from tui_acc.tui.widgets.error_picture import SHADES, picture
from tui_acc.tui.widgets.tensor_detail import TensorDetail


async def _map_of_first_failing_op(pilot: Pilot[None]) -> ErrorMapView:
    await settle(pilot)
    await pilot.press("f")  # the first failing token, at its first failing op
    await settle(pilot)
    await pilot.press("m")
    await settle(pilot)  # the map's worker, then its message
    screen = pilot.app.screen
    assert isinstance(screen, OperatorScreen)
    return screen.query_one(ErrorMapView)


HEAT_ROW = re.compile(rf"\s*(\d+) ([{SHADES}!]+)")


def _heat_rows(lines: list[str]) -> list[str]:
    """The heatmap's rows: a row label, then one glyph a cell (the label left out)."""
    return [match[2] for line in lines if (match := HEAT_ROW.fullmatch(line))]


def _lines(view: ErrorMapView, styles: bool = False) -> list[str]:
    console = Console(width=view.content_size.width, record=True, color_system="truecolor")
    console.print(view.content)
    return console.export_text(styles=styles).splitlines()


async def test_m_pictures_the_culprits_output_at_80_columns(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        view = await _map_of_first_failing_op(pilot)
        screen = demo_app.screen
        assert view.display and not screen.query_one(TensorDetail).display  # in place of the numbers
        assert view.pair is not None and view.pair.golden_node == demo_pair.fault_module
        assert view.pair.role == "output"  # the failing output first
        lines = _lines(view)
        assert all(len(line) <= 78 for line in lines)  # the panel's width at 80 columns, padding aside
        # the demo's fault: the last 48 of 64 output columns wrong
        assert any("channels 16-63 (48 of 64)" in line for line in lines), lines
        (cells,) = _heat_rows(lines)  # one row: the token's [1, 1, 64] output
        assert len(cells) == 64 and set(cells) <= set(SHADES)
        assert max(cells[:16], key=SHADES.index) < min(cells[16:], key=SHADES.index)  # quiet, then off
        assert any("below u = 2^-8" in line for line in lines)
        assert any("^u" in line for line in lines)  # u marked under the histogram
        assert view.region.bottom <= 23  # the footer keeps its line
        await pilot.press("m")
        assert not view.display and screen.query_one(TensorDetail).display


async def test_brackets_walk_the_operators_tensors_and_the_cursor_follows(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        view = await _map_of_first_failing_op(pilot)
        assert view.pair is not None and view.pair.slot == "output"
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert view.pair is not None and view.pair.slot == "input_0"
        assert "tensor 1/2" in _lines(view)[0]
        assert any("channels 0" in line for line in _lines(view))  # drawn, not still reading
        await pilot.press("right_square_bracket")
        assert view.pair is not None and view.pair.slot == "output"
        await pilot.press("k")  # the operator above: its own tensors, its map computed on demand
        await settle(pilot)
        assert view.pair is not None and view.pair.golden_node.endswith("mlp.up_proj")
        assert not any("reading" in line for line in _lines(view))


async def test_without_colour_the_glyphs_carry_the_picture(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = AccApp(open_comparison(demo_pair.golden, demo_pair.test), export_dir=tmp_path)
    assert app.no_color
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            view = await _map_of_first_failing_op(pilot)
            styled = "\n".join(_lines(view, styles=True))
            plain = _lines(view)
    finally:
        fmt.use_monochrome(False)
    assert "38;2" not in styled and "\x1b[3" not in styled  # no colour at all, only weight
    (heat,) = _heat_rows(plain)
    assert "█" in heat and (" " in heat[:16] or "·" in heat[:16] or "░" in heat[:16])


async def test_a_pair_that_cannot_be_read_says_why_in_the_panel(demo_pair, tmp_path: Path) -> None:
    for side in ("golden", "test"):  # a copy: the session's demo pair stays whole for other tests
        shutil.copytree(getattr(demo_pair, side), tmp_path / side)
    app = AccApp(open_comparison(tmp_path / "golden", tmp_path / "test"), export_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, OperatorScreen)
        view = screen.query_one(ErrorMapView)
        node = screen._pairs[demo_pair.fault_module]
        output = next(pair for pair in node.tensors if pair.role == "output")
        output.test.path.write_bytes(b"not a tensor")  # damaged after the rows were computed
        await pilot.press("m")
        await settle(pilot)
        text = "".join(_lines(view))
    assert f"{output.test.path}: unreadable torch file" in text and "channels" not in text


@pytest.mark.parametrize("width", [60, 78, 158])
def test_a_tall_tensor_is_drawn_in_the_rows_it_is_given(width: int) -> None:
    golden = np.random.default_rng(0).standard_normal((4096, 1000), dtype=np.float32)
    test = golden.copy()
    test[2050] += 1.0  # one token
    test[100, 7] = np.nan
    emap = error_map(golden, test.astype(ml_dtypes.bfloat16))
    console = Console(width=width, record=True, color_system=None)
    for line in picture(emap, width, heat_rows=6):
        console.print(line, no_wrap=True, crop=False)
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), [len(line) for line in lines]
    rows = _heat_rows(lines)
    labels = [int(match[1]) for line in lines if (match := HEAT_ROW.fullmatch(line))]
    assert len(rows) == 6 and labels[0] == 0 and labels == sorted(labels)
    band = max(i for i, first in enumerate(labels) if first <= 2050)  # the heat row holding row 2050
    assert set(rows[band]) == {"█"}  # the whole token at the top level
    assert all("█" not in row for i, row in enumerate(rows) if i != band)
    assert "!" in rows[0]  # the NaN's cell, marked
    assert len(rows[0]) == (55 if width == 60 else 64 * ((width - 5) // 64))  # as many blocks as fit
    assert any("NaN/Inf" in line for line in lines)


def test_the_help_lists_the_keys() -> None:
    keys = dict(KEYS)
    assert "m  [ ]" in keys and "rows x channels" in keys["m  [ ]"]


def test_error_map_snapshot_at_80x24(snap_compare, demo_app: AccApp) -> None:
    async def mapped(pilot: Pilot[None]) -> None:
        await _map_of_first_failing_op(pilot)
        await pilot.press("f")  # ◆ in the middle of the table as the picture left it (its height)
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(demo_app, terminal_size=(80, 24), run_before=mapped)
