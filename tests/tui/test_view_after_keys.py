"""What stays in view after a key at 80x24: the operator under the cursor when a filter is cleared,
the worst rows after a sort, every tensor of an operator in the detail panel."""

from __future__ import annotations

import html
import re

from textual.widgets import DataTable

from tests.tui.conftest import settle
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.tensor_detail import TensorDetail, TensorPanel


def _cursor_key(table: DataTable[object]) -> str:
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


def _cursor_in_view(table: DataTable[object]) -> bool:
    top, visible = int(table.scroll_y), table.scrollable_content_region.height - 1  # minus the header
    return top <= table.cursor_row < top + visible


def _screen_lines(app: AccApp) -> list[str]:
    """What the terminal shows, a line per row (from the screenshot: only what is on screen)."""
    svg = app.export_screenshot()
    lines: dict[float, str] = {}
    for y, text in re.findall(r'<text[^>]* y="([\d.]+)"[^>]*>(.*?)</text>', svg, flags=re.S):
        lines[float(y)] = lines.get(float(y), "") + html.unescape(text).replace("\xa0", " ")
    return [lines[y] for y in sorted(lines)]


def _tensor_rows_shown(app: AccApp, slots: list[str]) -> set[str]:
    """The tensors of ``slots`` whose row of the detail panel (✓/✗, slot, shape) is on screen."""
    shown = _screen_lines(app)  # the spaces of a styled cell's edge are not text in the screenshot
    return {slot for slot in slots if any(re.search(rf"[✓✗] ?{slot} *\[", line) for line in shown)}


async def test_clearing_the_filter_keeps_the_cursor_on_its_operator(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")  # the first failing token's operators
        await settle(pilot)
        table = demo_app.screen.query_one("#ops", DataTable)
        everything = table.row_count
        await pilot.press("slash", *"proj", "enter", "G")  # the last projection: layer 3's
        await pilot.pause()
        chosen = _cursor_key(table)
        assert chosen.endswith("proj") and table.row_count < everything
        await pilot.press("escape")  # clears the filter
        await pilot.pause()
        assert table.row_count == everything
        assert _cursor_key(table) == chosen and table.cursor_row > 0
        assert _cursor_in_view(table)
        assert demo_app.screen.query_one(TensorDetail)._shown[0].golden == chosen  # the detail is its


async def test_a_sort_shows_the_worst_rows_with_the_cursor_on_the_first(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("G")  # the bottom of the table: its top is scrolled out of view
        await pilot.pause()
        screen = demo_app.screen
        table = screen.query_one("#ops", DataTable)
        assert table.scroll_y > 0
        rows = {r["golden_node"]: r for r in demo_app.comparison.engine.node_rows(screen.token)}
        columns = [None, *(c.key for c in screen.sort_columns())]  # the dialog's lines
        await pilot.press("s", "home", *["down"] * columns.index("max_abs_err"), "enter")
        await pilot.pause()
        assert "sorted: MaxAbsErr ▼" in str(screen.query_one("#summary").render())
        keys = [str(k.value) for k in table.rows]
        worst = max(rows.values(), key=lambda r: r["max_abs_err"] or 0)["max_abs_err"]
        assert rows[keys[0]]["max_abs_err"] == worst  # the worst row first
        assert table.cursor_row == 0 and table.scroll_y == 0  # ... on screen, under the cursor
        assert screen.query_one(TensorDetail)._shown[0].golden == keys[0]
        await pilot.press("S")  # reversed: still from the top
        await pilot.pause()
        assert table.cursor_row == 0 and table.scroll_y == 0


async def test_every_tensor_of_an_operator_can_be_seen_at_80x24(demo_app: AccApp, demo_pair) -> None:
    """An attention module's inputs and output take more lines than the panel has under the table:
    the panel scrolls (Tab reaches it, End shows its last tensor) and d gives it the table's room."""
    name = "root.model.layers.3.self_attn"
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        demo_app.push_screen(OperatorScreen(demo_pair.fault_token, select=name))
        await settle(pilot)
        screen = demo_app.screen
        slots = [pair.slot for pair in screen._pairs[name].tensors]
        assert len(slots) == 4
        assert _tensor_rows_shown(demo_app, slots) < set(slots)  # under the table: cut off
        await pilot.press("d")  # the panel takes the room
        await pilot.pause()
        assert _tensor_rows_shown(demo_app, slots) == set(slots)
        table = screen.query_one("#ops", DataTable)
        assert _cursor_key(table) == name and _cursor_in_view(table)  # the row stays in sight
        await pilot.press("j")  # j / k still walk the operators, the detail follows
        await pilot.pause()
        assert screen.query_one(TensorDetail)._shown[0].golden != name
        await pilot.press("k", "escape")  # Esc gives the room back first
        await pilot.pause()
        assert isinstance(demo_app.screen, OperatorScreen)
        assert _tensor_rows_shown(demo_app, slots) < set(slots)
        panel = screen.query_one(TensorPanel)
        for _ in range(3):  # Tab: tree, table, then the panel (it holds more than it shows)
            if demo_app.focused is panel:
                break
            await pilot.press("tab")
        assert demo_app.focused is panel
        await pilot.press("end")
        await pilot.pause()
        assert "output" in _tensor_rows_shown(demo_app, slots)
