"""The operator screen is readable at 80x24 and without colour."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable, Footer, Header
from textual.widgets._footer import FooterKey

from tests.tui.conftest import settle
from tui_acc import open_comparison
from tui_acc.tui import formatting as fmt
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.layer_tree import LayerTree
from tui_acc.tui.widgets.tensor_detail import TensorDetail
from tui_acc.verdicts.verdict import row_failing as failing

SCIENTIFIC = re.compile(r"^-?\d\.\d{3}e[+-]\d\d$")


async def _open_first_failing_op(pilot) -> OperatorScreen:  # type: ignore[no-untyped-def]
    await settle(pilot)
    await pilot.press("f")  # the first failing token, opened at its first failing op
    await settle(pilot)
    await pilot.press("f")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, OperatorScreen)
    return screen


def _column_right_edge(table: DataTable[object], key: str) -> int:
    """Where the column ``key`` ends, in cells from the table's left edge."""
    edge = 0
    for column_key, column in table.columns.items():
        edge += column.get_render_width(table)
        if column_key.value == key:
            return edge
    raise KeyError(key)


def _names(table: DataTable[object]) -> dict[str, str]:
    return {str(key.value): str(table.get_cell(key, "name")) for key in table.rows}


@pytest.mark.parametrize("size", [(64, 24), (80, 24), (200, 50)])
async def test_rows_name_their_layer_and_the_column_uses_the_width(demo_app: AccApp, size) -> None:  # type: ignore[no-untyped-def]
    async with demo_app.run_test(size=size) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        longest = max(len(fmt.qualified_name(name)) for name in screen._pairs)
        width = table.columns[next(k for k in table.columns if k.value == "name")].width
        assert _column_right_edge(table, "cosine") <= table.scrollable_content_region.width
        if size[0] >= 80:
            assert width >= longest > 17  # whole names: the 17 cells of old cut post_attention_layernorm
            assert not any("…" in label for label in _names(table).values())
        else:
            assert 12 <= width < longest
            elided = [label for label in _names(table).values() if "…" in label]
            assert elided and all(len(label) == width and label[0].isdigit() for label in elided), elided
        await pilot.press("slash", *"down_proj", "enter")
        await pilot.pause()
        names = _names(table)
        assert len(names) == 4  # one down_proj per layer of the demo
        assert len(set(names.values())) == 4, names  # filtered, the four still differ
        for key, label in names.items():
            layer = key.split(".")[3]  # root.model.layers.N.mlp.down_proj
            assert label.startswith(f"{layer}.") and label.endswith("down_proj"), label


def _cut_at_the_right_edge(table: DataTable[object]) -> list[str]:
    """The columns the table's right edge shows in part (more than their right padding cut)."""
    room, x, cut = table.scrollable_content_region.width, 0, []
    for column in table.ordered_columns:
        width = column.get_render_width(table)
        if x < room and x + width - table.cell_padding > room:
            cut.append(str(column.label))
        x += width
    return cut


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 30), (200, 50)])
@pytest.mark.parametrize("pair", ["demo", "atb"])
async def test_no_column_is_cut_at_the_right_edge(demo_app: AccApp, atb_app: AccApp, pair, size) -> None:  # type: ignore[no-untyped-def]
    """Whole columns only, with the tree and without: no "Cosine plus one stray digit", no Type
    cut to "T"; the key columns are pinned and the names whole."""
    app = demo_app if pair == "demo" else atb_app
    async with app.run_test(size=size) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        for tree_shown in (True, False):
            assert screen.query_one(LayerTree).display is tree_shown
            assert _cut_at_the_right_edge(table) == [], (size, tree_shown)
            assert table.fixed_columns == 4 and _column_right_edge(table, "cosine") <= table.size.width
            assert not any("…" in label for label in _names(table).values())
            await pilot.press("t")
            await pilot.pause()


async def test_wide_terminals_show_types_and_test_names_whole(atb_app: AccApp) -> None:
    """200 columns: no ``Linear/LinearO`` with columns to spare; each ATB operation named with its
    layer (``3_LinearOperation`` alone is in every layer)."""
    async with atb_app.run_test(size=(200, 50)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        cells = {
            str(key.value): (str(table.get_cell(key, "type")), str(table.get_cell(key, "test_name")))
            for key in table.rows
        }
        assert cells["root.model.layers.2.mlp.down_proj"][0] == "Linear/LinearOperation"
        tests = [test for _, test in cells.values()]
        assert len(set(tests)) == len(tests), tests  # every row tells its operation from the others
        down = cells["root.model.layers.2.mlp.down_proj"][1]
        assert down in ("3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation", "3/3/3_LinearOperation")
        await pilot.press("t")  # the table alone: room for every name whole
        await pilot.pause()
        assert str(table.get_cell("root.model.layers.2.mlp.down_proj", "test_name")) == (
            "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"
        )


async def test_right_scrolls_whole_columns_and_keeps_the_key_columns(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        starts, x = {}, 0
        for column in table.ordered_columns:
            starts[str(column.key.value)] = x
            x += column.get_render_width(table)
        pinned = sum(c.get_render_width(table) for c in table.ordered_columns[:4])
        seen = []
        for _ in range(3):
            await pilot.press("right")
            await pilot.pause()
            first = next(key for key, start in starts.items() if start == table.scroll_x + pinned)
            seen.append(first)  # the scrolled part starts on a column, never inside one
        assert seen[0] == "max_abs_err" and len(set(seen)) == 3
        assert "◆42" in _screen_text(pilot.app) and "2.mlp.down_proj" in _screen_text(pilot.app)
        for _ in range(3):
            await pilot.press("left")
        await pilot.pause()
        assert table.scroll_x == 0


def _screen_text(app: AccApp) -> str:
    svg = app.export_screenshot()
    texts = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    return "".join(html.unescape(t) for t in texts).replace("\xa0", " ")


async def test_elided_names_keep_their_layer_and_leaf() -> None:
    assert fmt.elide_middle("12.post_attention_layernorm", 17) == "12.po…n_layernorm"
    assert fmt.qualified_name("root.model.layers.2.mlp.down_proj") == "2.mlp.down_proj"
    assert fmt.qualified_name("Module.model.layers.0.mlp.LlamaMLP.forward.3") == "0.mlp"
    assert fmt.qualified_name("Functional.linear.5.forward", "0.mlp") == "0.mlp.linear.5"
    assert fmt.qualified_name("root.transformer.h.11.attn.c_attn") == "11.attn.c_attn"


async def test_torch_against_atb_at_80_columns_shows_verdicts_cosines_and_both_sides(atb_app: AccApp) -> None:
    async with atb_app.run_test(size=(80, 24)) as pilot:
        screen = await _open_first_failing_op(pilot)
        assert screen.query_one(LayerTree).display  # with the tree shown
        table = screen.query_one("#ops", DataTable)
        room = table.scrollable_content_region.width
        for key in ("outputs", "cosine"):
            assert _column_right_edge(table, key) <= room, key
        assert str(table.get_cell("root.model.layers.2.mlp.down_proj", "cosine")).startswith("0.")
        header = screen.query_one(Header)
        title = header.format_title().plain
        assert "golden" in title and "test" in title
        assert title.endswith("test test")  # the test side's path (relative here), whole
        assert len(title) <= 80 - 18


async def test_the_title_elides_long_paths_in_the_middle(atb_app: AccApp) -> None:
    long = "/data/runs/2026-11-23/qwen2-72b/tp8/msit_dump_20261123_101010/"
    atb_app.sub_title = f"{long}golden  vs  {long}atb-test"
    async with atb_app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        title = pilot.app.screen.query_one(Header).format_title().plain
        assert "golden /data" in title and "…" in title and title.endswith("atb-test")
        assert len(title) <= 80 - 18


async def test_detail_panel_keeps_verdicts_digits_and_the_end_of_long_names(
    model_case, tmp_path: Path
) -> None:
    folder = model_case("qwen2-msprobe-L0")
    app = AccApp(open_comparison(folder / "golden", folder / "test"), export_dir=tmp_path)
    layer = "Module.model.layers.0.Qwen2DecoderLayer.forward.0"
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.push_screen(OperatorScreen(0, select=layer))
        await settle(pilot)
        detail = app.screen.query_one(TensorDetail)
        console = Console(width=detail.content_size.width, record=True, color_system=None)
        console.print(detail.content)
        lines = console.export_text().splitlines()
    rows = [line for line in lines if re.search(r"input\.\S*embeddings\.[01] ", line)]
    assert len(rows) == 2, lines
    assert rows[0] != rows[1]
    for line in rows:
        assert line.split()[0] in ("✓", "✗"), line  # the verdict column is there
        assert re.search(r"\s-?\d\.\d{6}\s", line), line  # the whole cosine
        assert "…" not in line.split()[2:], line


@pytest.mark.parametrize("screen_keys", [(), ("f", "enter")])
async def test_the_footer_at_80_columns_ends_with_quit(demo_app: AccApp, screen_keys) -> None:  # type: ignore[no-untyped-def]
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press(*screen_keys)
        await settle(pilot)
        footer = pilot.app.screen.query_one(Footer)
        keys = list(footer.query(FooterKey))
        (palette,) = [key for key in keys if key.has_class("-command-palette")]
        shown = [key for key in keys if key is not palette]
        assert shown[-1].action == "quit"
        for key in shown:  # every key whole, left of the palette's: none cut off or drawn over
            assert key.region.right <= palette.region.x, (key.key, key.region, palette.region)
        assert palette.region.right <= 80


async def test_numbers_line_up_in_one_notation(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(120, 30)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        for column in ("max_abs_err", "rel_euclidean"):
            cells = [table.get_cell(key, column) for key in table.rows]
            texts = [c.plain for c in cells if isinstance(c, Text) and c.plain not in ("0", "-")]
            assert texts and all(SCIENTIFIC.match(t) for t in texts), texts
            assert all(c.justify == "right" for c in cells if isinstance(c, Text))
        cosines = [str(table.get_cell(key, "cosine")) for key in table.rows]
        assert all(re.fullmatch(r"-?\d\.\d{6}|-", c) for c in cosines), cosines


def test_one_rule_for_numbers_in_the_tui_and_the_report() -> None:
    from tui_acc.reports import pair_text as report

    for value in (0.29, 0.307, 1.5e-6, 12345.0, -0.0172, 3.0):
        assert fmt.num(value) == report.numbers.number(value)  # what report formats with
        assert SCIENTIFIC.match(fmt.num(value)), value
    assert fmt.num(0.29) == "2.900e-01" and fmt.num(0.307) == "3.070e-01"  # trailing zeros kept
    assert len(fmt.num(1.5e-6)) == len(fmt.num(0.29)) == len(fmt.num(12345.0))
    assert fmt.cosine(0.99999) == "0.999990"
    assert fmt.num(0.0) == "0" and fmt.num(None) == "-"


def _style(cell: object) -> Style:
    assert isinstance(cell, Text)
    style = Style.parse(cell.style) if isinstance(cell.style, str) else cell.style
    for span in cell.spans:
        style += Style.parse(span.style) if isinstance(span.style, str) else span.style
    return style


async def test_without_colour_failures_are_bold_or_reverse(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = AccApp(open_comparison(demo_pair.golden, demo_pair.test), export_dir=tmp_path)
    assert app.no_color
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        suspect = "root.model.layers.2.mlp.down_proj"
        for column in ("order", "outputs"):  # ◆42 and ✗L
            style = _style(table.get_cell(suspect, column))
            assert style.bold and style.reverse, (column, style)
            assert style.color is None  # drawn in the foreground colour: the most contrast there is
        assert _style(table.get_cell(suspect, "name")).bold
        passing = next(key for key in table.rows if failing(screen._rows.get(str(key.value))) is False)
        assert not _style(table.get_cell(passing, "name")).bold
        detail = screen.query_one(TensorDetail)
        console = Console(width=100, record=True, color_system="standard")
        console.print(detail.content)
        assert "\x1b[1;7m✗ error starts here" in console.export_text(styles=True)
    fmt.use_monochrome(False)


async def test_with_colour_failures_stay_red(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        style = _style(table.get_cell("root.model.layers.2.mlp.down_proj", "outputs"))
        assert style.color is not None and style.color.name == "red"


async def test_msprobe_rows_are_told_apart_and_the_marker_keeps_its_digits(
    model_case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(model_case("llama-msprobe-mix"))
    app = AccApp(open_comparison("golden", "test"), export_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_first_failing_op(pilot)
        table = screen.query_one("#ops", DataTable)
        suspect = str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        marker = str(table.get_cell(suspect, "order"))
        assert marker == f"◆{list(screen._pairs).index(suspect)}" and len(marker) == 4  # ◆ and 3 digits
        order_column = next(column for key, column in table.columns.items() if key.value == "order")
        assert order_column.width >= len(marker)
        assert str(table.get_cell(suspect, "name")) == "1.mlp.down_proj.linear.43"  # the call, its module
        # the filter and the name sort read the name as shown, not the record's own name
        screen._set_filter("down_proj.linear")
        await pilot.pause()
        shown = [str(key.value) for key in table.rows]
        assert suspect in shown and "Functional.linear.36.forward" in shown, shown  # by the shown name
        screen._set_filter("")
        assert _column_right_edge(table, "cosine") <= table.scrollable_content_region.width


async def test_notifications_leave_the_detail_panel_in_sight(demo_app: AccApp) -> None:
    """A notification at the culprit (the demo's greeting, then "no further failure") must not hide
    its figures: toasts sit at the top right, over the table's first rows, not over the detail."""
    from textual.widgets._toast import Toast

    demo_app.greeting = "Demo: the fault is at token 3. f jumps to its first failing operator."
    async with demo_app.run_test(size=(80, 24), notifications=True) as pilot:
        screen = await _open_first_failing_op(pilot)
        await pilot.press("G", "n")  # "No further failure that way."
        await pilot.pause()
        toasts = list(screen.query(Toast))
        assert len(toasts) == 2
        detail = screen.query_one(TensorDetail).region
        for toast in toasts:
            assert not toast.region.overlaps(detail), (toast.region, detail)
            assert toast.region.y >= 2  # under the title and the summary line
