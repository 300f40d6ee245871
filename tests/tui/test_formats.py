"""The TUI works unchanged on every format: ATB names beside torch names, statistics views."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from tests.tui.conftest import settle
from tests.tui.test_snapshots import _at_first_failing_op
from tui_acc import CompareOptions, open_comparison
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.layer_tree import LayerTree


def _cursor_key(app: AccApp) -> str:
    table = app.screen.query_one("#ops", DataTable)
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


async def test_atb_names_stand_beside_torch_names(atb_app: AccApp) -> None:
    async with atb_app.run_test(size=(120, 32)) as pilot:
        await settle(pilot)
        tokens = atb_app.screen.query_one("#tokens", DataTable)
        assert str(tokens.get_cell("3", "test_node")) == "6_LmHead"
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(atb_app.screen, OperatorScreen)
        assert _cursor_key(atb_app) == "root.model.layers.2.mlp.down_proj"
        table = atb_app.screen.query_one("#ops", DataTable)
        # with its layers: 3_LinearOperation alone is in every layer
        assert str(table.get_cell("root.model.layers.2.mlp.down_proj", "test_name")) in (
            "3/3/3_LinearOperation",
            "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation",
        )
        assert str(table.get_cell("root.model.layers.2.mlp.down_proj", "type")) == "Linear/LinearOperation"
        tree = atb_app.screen.query_one(LayerTree)
        assert tree.cursor_node is not None and "↔ 3_LinearOperation" in str(tree.cursor_node.label)
        await pilot.press("e", "enter")
        status = str(atb_app.screen.query_one("#status", Static).render())
        exported = Path(status.split(" to ", 1)[1])
        assert "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation" in exported.read_text()


def test_atb_operator_screen_snapshot(snap_compare, atb_app: AccApp) -> None:
    async def drilled(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f", "t")
        await pilot.pause()

    assert snap_compare(atb_app, terminal_size=(80, 24), run_before=drilled)


async def test_statistics_dumps_show_statistics_columns(reference: Path, tmp_path: Path) -> None:
    case = reference / "msprobe-L0" / "statistics"
    app = AccApp(open_comparison(case / "golden", case / "test"), export_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        tokens = app.screen.query_one("#tokens", DataTable)
        assert [str(c.label) for c in tokens.columns.values()][:3] == ["Token", "Verdict", "NormRel"]
        assert str(tokens.get_cell("1", "passed")) == "pass"
        # the strip plots NormRel, against the statistics tolerance, and says so (not "KL")
        label = str(app.screen.query_one("#strip-label", Static).render())
        assert label.startswith("NormRel / threshold ") and "KL" not in label
        await pilot.press("enter")
        await settle(pilot)
        ops = app.screen.query_one("#ops", DataTable)
        labels = [str(c.label) for c in ops.columns.values()]
        assert "NormRel" in labels and "Cosine" not in labels
        first = str(ops.coordinate_to_cell_key(ops.cursor_coordinate).row_key.value)
        assert first.startswith("Module.model.")


async def test_the_detail_panel_names_records_one_side_left_out(model_case, tmp_path: Path) -> None:
    from rich.console import Console

    from tui_acc.tui.widgets.tensor_detail import TensorDetail

    folder = model_case("llama-msprobe-L1-focus")  # golden dumped with risk_level ALL, test with FOCUS
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    gap_before = next(iter(comparison.pairing.absent_before(2)))
    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(120, 32)) as pilot:
        await settle(pilot)
        await pilot.press("f")  # the first failing token, 2
        await settle(pilot)
        ops = app.screen.query_one("#ops", DataTable)
        ops.move_cursor(row=ops.get_row_index(gap_before))
        await pilot.pause()
        console = Console(width=200, record=True)
        console.print(app.screen.query_one(TensorDetail).content)
        text = console.export_text()
    absent = comparison.pairing.absent_before(2)[gap_before]
    from tui_acc.tui.formatting import short_name

    assert "not in test just before it" in text
    assert short_name(absent[0].name) in text and all(u.side == "golden" for u in absent)


async def test_the_notes_that_decide_how_to_read_verdicts_are_on_screen(model_case, tmp_path: Path) -> None:
    from rich.console import Console

    from tui_acc.tui.screens.problems import ProblemsScreen

    folder = model_case("llama-msprobe-L1-xor")
    app = AccApp(
        open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False)), export_dir=tmp_path
    )
    async with app.run_test(size=(120, 32)) as pilot:
        await settle(pilot)
        await pilot.press("u")
        assert isinstance(app.screen, ProblemsScreen)
        console = Console(width=200, record=True)
        console.print(app.screen.query_one(Static).content)
        text = console.export_text()
    assert "Notes (" in text and "test: " in text and "compared by equality" in text


async def test_msprobe_l1_calls_are_read_by_layer_and_module(model_case, tmp_path: Path) -> None:
    """L1 records API calls only: the tree groups them by the layer and module their stacks name,
    the rows say where each call is (``1.mlp.linear.43``), and a layer can be looked at alone."""
    import json

    folder = model_case("llama-msprobe-L1")
    case = json.loads((folder / "case.json").read_text())
    app = AccApp(open_comparison(folder / "golden", folder / "test"), export_dir=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _at_first_failing_op(pilot)
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and _cursor_key(app) == case["fault_record"]
        table = screen.query_one("#ops", DataTable)
        assert str(table.get_cell(case["fault_record"], "name")) == "1.mlp.linear.43"
        tree = screen.query_one(LayerTree)
        assert tree.cursor_node is not None and tree.cursor_node.data == case["fault_record"]
        assert tree.cursor_node.parent is not None and tree.cursor_node.parent.data == "decoder_layer.1.mlp"
        every = table.row_count
        screen.post_message(LayerTree.LayerSelected("decoder_layer.1"))
        await pilot.pause()
        names = [str(table.get_cell(key, "name")) for key in table.rows]
        assert 0 < len(names) < every and all(name.startswith(("1.", "decoder_layer.1.")) for name in names)
