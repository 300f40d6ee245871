"""Pilot: tokens -> operators -> first failing op -> export, with the keyboard only."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from textual.widgets import DataTable, Static

from tests.tui.conftest import cursor_key, settle
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.help import HelpScreen
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.tui.widgets.layer_tree import LayerTree


def _text(app: AccApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def _static_text(app: AccApp) -> str:
    """The plain text of the first Static on the current screen, as a terminal would show it."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(app.screen.query_one(Static).content)
    return console.export_text()


def _render(app: AccApp, selector: str) -> str:
    """A widget's content as plain text, as a terminal would show it."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(app.screen.query_one(selector, Static).content)
    return console.export_text()


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


async def test_token_list_shows_verdicts_and_first_failing_token(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(demo_app.screen, TokenScreen)
        table = demo_app.screen.query_one("#tokens", DataTable)
        verdicts = [str(table.get_cell(str(t), "passed")) for t in range(8)]
        assert verdicts == ["pass"] * 3 + ["FAIL"] * 5
        assert "first failing: 3" in _text(demo_app, "#summary")
        assert cursor_key(demo_app, "#tokens") == str(demo_pair.fault_token)  # where it starts


async def test_drill_down_to_the_injected_fault_and_back(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == demo_pair.fault_token
        assert "◆ model.layers.2.mlp.down_proj" in _text(demo_app, "#summary")
        await pilot.press("f")
        await pilot.pause()
        assert cursor_key(demo_app, "#ops") == demo_pair.fault_module
        detail = str(screen.query_one("#detail", Static).render())
        tree = screen.query_one(LayerTree)
        assert tree.cursor_node is not None and tree.cursor_node.data == demo_pair.fault_module
        assert detail  # the tensor detail of the highlighted node is rendered
        await pilot.press("escape")
        assert isinstance(demo_app.screen, TokenScreen)


async def test_export_operator_view_writes_what_is_shown(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("e", "enter")
        status = _text(demo_app, "#status")
        assert status.startswith("exported 58 rows to ")
        path = Path(status.removeprefix("exported 58 rows to "))
        assert path.parent == demo_app.export_dir and path.name.startswith("tui-acc-token3-ops-")
        rows = _read_csv(path)
        table = demo_app.screen.query_one("#ops", DataTable)
        assert [r["operator"] for r in rows] == [str(k.value) for k in table.rows]
        fault = next(r for r in rows if r["operator"] == demo_pair.fault_module)
        assert fault["first_failing"] == "true" and fault["outputs_passed"] == "false"
        assert fault["inputs_passed"] == "true" and float(fault["cosine"]) < 0.99
        # a second export never replaces the first
        await pilot.press("e", "enter")
        second = Path(_text(demo_app, "#status").removeprefix("exported 58 rows to "))
        assert second != path and path.exists()


async def test_layer_tree_scopes_the_table_and_the_export(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        tree = demo_app.screen.query_one(LayerTree)
        tree.focus()
        tree.reveal("root.model.layers.1")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        keys = [str(k.value) for k in demo_app.screen.query_one("#ops", DataTable).rows]
        assert keys[0] == "root.model.layers.1" and len(keys) == 13
        assert all(k.startswith("root.model.layers.1") for k in keys)
        # the layer in scope says what fails inside it (before the fault: nothing), not a cosine of
        # everything inside that reads as passing where one operator fails
        assert re.search(r"in \S*layers\.1: ✓ nothing inside fails \(a: all\)", _text(demo_app, "#summary"))
        assert demo_app.screen.cursor_key() == "root.model.layers.1"
        assert "all 10 outputs inside: cosine" in _render(demo_app, "#detail")
        await pilot.press("e", "enter")
        path = Path(_text(demo_app, "#status").removeprefix("exported 13 rows to "))
        assert "-ops-root.model.layers.1-" in path.name and len(_read_csv(path)) == 13
        await pilot.press("a")
        assert demo_app.screen.query_one("#ops", DataTable).row_count == 58


async def test_export_token_view(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("e", "enter")
        path = Path(_text(demo_app, "#status").removeprefix("exported 8 rows to "))
        rows = _read_csv(path)
        assert [r["verdict"] for r in rows] == ["pass"] * 3 + ["fail"] * 5
        assert rows[3]["golden_top1"] != rows[3]["test_top1"]


async def test_export_failure_is_shown_and_nothing_crashes(demo_app: AccApp, tmp_path: Path) -> None:
    demo_app.export_dir = tmp_path / "no" / "such" / "dir"
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("e", "enter")
        # the dialog stays open with the path as typed, the reason in its hint, for the user to fix
        from textual.widgets import Input

        from tui_acc.tui.screens.export_dialog import ExportDialog

        assert isinstance(demo_app.screen, ExportDialog)
        hint = demo_app.screen.query_one("#export-hint", Static)
        assert "cannot write here" in str(hint.render()) and hint.has_class("warning")
        typed = demo_app.screen.query_one("#export-path", Input).value
        assert typed.startswith(str(demo_app.export_dir)) and typed.endswith(".csv")
        await pilot.press("ctrl+a", "ctrl+k", *str(tmp_path / "fixed.csv"), "enter")
        assert isinstance(demo_app.screen, TokenScreen) and (tmp_path / "fixed.csv").exists()


async def test_help_tree_toggle_and_vim_keys(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(demo_app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("g", "j", "j")  # the cursor starts on the first failing token
        assert cursor_key(demo_app, "#tokens") == "2"
        await pilot.press("k")
        assert cursor_key(demo_app, "#tokens") == "1"
        await pilot.press("enter")
        await settle(pilot)
        tree = demo_app.screen.query_one(LayerTree)
        await pilot.press("t")
        assert not tree.display
        await pilot.press("t")
        assert tree.display


async def test_damaged_input_is_shown_not_hidden(damaged_copy: tuple[Path, Path], tmp_path: Path) -> None:
    from tui_acc import open_comparison
    from tui_acc.tui.screens.problems import ProblemsScreen

    app = AccApp(open_comparison(*damaged_copy), export_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert "⚠ 4 unmatched/unreadable (u)" in _text(app, "#summary")
        await pilot.press("u")
        assert isinstance(app.screen, ProblemsScreen)
        listing = _render(app, "Static")
        for name in ("root.model.layers.0.mlp.act_fn", "root.model.norm/output_5", "root.model.norm/output"):
            assert name in listing
        await pilot.press("escape", "g", "enter")  # token 0 holds the damaged file
        await settle(pilot)
        table = app.screen.query_one("#ops", DataTable)
        assert "!" in str(table.get_cell("root.model.layers.1.mlp.up_proj", "outputs"))
        await pilot.press("u")
        listing = _render(app, "Static")
        assert "up_proj/output.pth" in listing and "unreadable torch file" in listing


async def test_next_previous_failure_edges_and_filter(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        # the first failing token is selected at start
        assert cursor_key(demo_app, "#tokens") == str(demo_pair.fault_token)
        await pilot.press("n")
        assert cursor_key(demo_app, "#tokens") == str(demo_pair.fault_token + 1)
        await pilot.press("N", "N")
        assert cursor_key(demo_app, "#tokens") == str(demo_pair.fault_token)  # nothing earlier fails
        await pilot.press("G")
        assert cursor_key(demo_app, "#tokens") == "7"
        await pilot.press("g")
        assert cursor_key(demo_app, "#tokens") == "0"
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("g", "n")
        first = cursor_key(demo_app, "#ops")
        rows = {r["golden_node"]: r for r in demo_app.comparison.verdicts.token(demo_pair.fault_token).rows}
        assert rows[first]["outputs_passed"] is False
        await pilot.press("n")
        assert cursor_key(demo_app, "#ops") != first
        await pilot.press("slash")
        await pilot.press(*"down_proj", "enter")
        table = demo_app.screen.query_one("#ops", DataTable)
        keys = [str(k.value) for k in table.rows]
        assert keys and all(k.endswith("down_proj") for k in keys)
        assert "filter 'down_proj'" in _text(demo_app, "#summary")
        await pilot.press("slash", "escape")
        assert table.row_count == 58 and isinstance(demo_app.screen, OperatorScreen)


async def _sort_by(pilot, column: str) -> None:
    """``s``, then pick ``column`` in the dialog with the keyboard (None: the natural order)."""
    from tui_acc.tui.screens.sort_dialog import SortDialog

    screen = pilot.app.screen
    keys = [None, *(c.key for c in screen.sort_columns())]
    await pilot.press("s")
    assert isinstance(pilot.app.screen, SortDialog)
    await pilot.press("home")
    await pilot.press(*["down"] * keys.index(column), "enter")
    assert pilot.app.screen is screen


async def test_sort_by_any_column_puts_the_worst_rows_first(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        table = demo_app.screen.query_one("#ops", DataTable)
        rows = {r["golden_node"]: r for r in demo_app.comparison.verdicts.token(demo_pair.fault_token).rows}

        def shown(metric: str) -> list:
            return [rows[str(k.value)][metric] for k in table.rows if rows[str(k.value)][metric] is not None]

        await _sort_by(pilot, "cosine")  # worst first: lowest cosine
        assert shown("cosine") == sorted(shown("cosine")) and len(shown("cosine")) > 10
        assert table.cursor_row == 0 and table.scroll_y == 0  # the worst rows in view, the cursor on top
        assert "sorted: Cosine ▲" in _text(demo_app, "#summary")
        await pilot.press("S")  # reverse
        assert shown("cosine") == sorted(shown("cosine"), reverse=True)
        await _sort_by(pilot, "max_abs_err")  # worst first: largest error
        assert shown("max_abs_err") == sorted(shown("max_abs_err"), reverse=True)
        await _sort_by(pilot, "max_abs_err")  # the same column again reverses
        assert shown("max_abs_err") == sorted(shown("max_abs_err"))
        await _sort_by(pilot, "outputs")  # failures first, those where the error starts leading
        outs = [rows[str(k.value)] for k in table.rows]
        assert outs[0]["label"] == "local" and all(r["outputs_passed"] for r in outs[-5:])
        await _sort_by(pilot, "name")  # A to Z by the names shown (layer first: 0.mlp before 1.mlp)
        by_label = sorted(rows, key=lambda name: demo_app.screen._labels[name])
        assert [str(k.value) for k in table.rows] == by_label
        await pilot.press("e", "enter")  # the export is the view as shown: in this order
        await settle(pilot)
        written = next(demo_app.export_dir.glob("*.csv"))
        assert [r["operator"] for r in _read_csv(written)] == by_label
        await _sort_by(pilot, None)
        assert [str(k.value) for k in table.rows] == list(rows)  # back to execution order
        await pilot.press("s", "escape")  # Esc leaves the order alone
        assert [str(k.value) for k in table.rows] == list(rows)


async def test_token_list_sorts_by_kl_and_exports_in_that_order(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await _sort_by(pilot, "kl")
        engine = demo_app.comparison.engine
        kls = [engine.cached_token_row(int(str(k.value)))["kl"] for k in demo_app.screen.main_table().rows]
        assert kls == sorted(kls, reverse=True) and kls[0] > kls[-1]
        assert "sorted: KL ▼" in _text(demo_app, "#summary")
        await _sort_by(pilot, "passed")  # failing tokens first
        first = cursor_key(demo_app, "#tokens")
        await pilot.press("e", "enter")
        await settle(pilot)
        exported = _read_csv(next(demo_app.export_dir.glob("*.csv")))
        assert [r["verdict"] for r in exported][:5] == ["fail"] * 5
        assert exported[-1]["verdict"] == "pass" and first == cursor_key(demo_app, "#tokens")


async def test_export_dialog_takes_a_typed_path_and_asks_before_replacing(demo_app: AccApp) -> None:
    from tui_acc.tui.screens.export_dialog import ExportDialog

    mine = demo_app.export_dir / "mine.csv"
    mine.write_text("keep me\n")
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        assert isinstance(demo_app.screen, ExportDialog)
        await pilot.press("ctrl+a", "ctrl+k", *"mine.csv", "enter")
        # first Enter on an existing file only warns; the user's file is untouched
        assert isinstance(demo_app.screen, ExportDialog)
        assert "exists" in _text(demo_app, "#export-hint") and mine.read_text() == "keep me\n"
        await pilot.press("enter")
        assert isinstance(demo_app.screen, TokenScreen)
        assert _text(demo_app, "#status") == f"exported 8 rows to {mine.resolve()}"
        assert mine.read_text().startswith("token,verdict,")


async def test_export_dialog_escape_writes_nothing(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("e", "escape")
        assert isinstance(demo_app.screen, TokenScreen)
        assert _text(demo_app, "#status") == "export cancelled"
        assert list(demo_app.export_dir.iterdir()) == []


async def test_export_dialog_refuses_a_folder_and_an_empty_name(demo_app: AccApp) -> None:
    (demo_app.export_dir / "sub").mkdir()
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("e", "ctrl+a", "ctrl+k", *"sub", "enter")
        assert "is a folder" in _text(demo_app, "#export-hint")
        await pilot.press("ctrl+a", "ctrl+k", "enter")
        assert "Type a file name" in _text(demo_app, "#export-hint")
        await pilot.press(*"sub/t.csv", "enter")
        assert (demo_app.export_dir / "sub" / "t.csv").exists()


async def test_detail_panel_warns_about_an_in_place_op(in_place_copy, demo_pair, tmp_path: Path) -> None:
    from tui_acc import open_comparison

    app = AccApp(open_comparison(*in_place_copy), export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        assert cursor_key(app, "#ops") == demo_pair.fault_module
        detail = _render(app, "#detail")
        assert "⚠ in place: input_0=output (golden) identical, inputs judged by up_proj" in detail
        assert "error starts here" in detail


async def test_kl_strip_makes_the_first_divergence_stand_out(demo_app: AccApp, demo_pair) -> None:
    """Scaled against the threshold in force, and labelled with it: the passing tokens stay below the
    over-threshold bars, the first failing token rises above them."""
    from tui_acc.tolerances.thresholds import precision_class
    from tui_acc.tui.bounds import number
    from tui_acc.tui.token_tally import OVER
    from tui_acc.tui.widgets.threshold_strip import ThresholdStrip

    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = demo_app.screen
        assert isinstance(screen, TokenScreen)
        levels = screen.query_one("#kl-strip", ThresholdStrip).levels
        first = demo_pair.fault_token
        assert len(levels) == 8 and None not in levels
        assert max(levels[:first]) < OVER <= levels[first]  # type: ignore[type-var, operator]
        row = screen.tally.get(first)
        assert row is not None
        dtype = precision_class(row["golden_dtype"], row["test_dtype"])
        bound = demo_app.comparison.engine.thresholds.logits[dtype]["kl"]
        assert _text(demo_app, "#strip-label") == f"KL / threshold {number(bound)} "


async def test_resizing_keeps_the_view_and_the_cursor_on_screen(demo_app: AccApp, demo_pair) -> None:
    async with demo_app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        await _sort_by(pilot, "max_abs_err")
        await pilot.press("f", "t")
        screen = demo_app.screen
        before = [str(k.value) for k in screen.main_table().rows]
        for size in ((80, 24), (60, 16), (200, 60), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            table = screen.main_table()
            assert demo_app.screen is screen and [str(k.value) for k in table.rows] == before
            assert cursor_key(demo_app, "#ops") == demo_pair.fault_module
            assert not screen.query_one(LayerTree).display and screen.sort.column == "max_abs_err"
            top, visible = int(table.scroll_y), table.scrollable_content_region.height - 1  # minus header
            assert top <= table.cursor_row < top + visible, (size, top, table.cursor_row)


async def test_the_rows_on_screen_are_computed_first_and_leaving_cancels_the_rest(
    demo_app: AccApp,
) -> None:
    """Each of token 0's tensor pairs waits for a permit from the test: the order is observable."""
    import asyncio
    import threading

    from tui_acc.metrics.scheduling import Scheduler

    engine = demo_app.comparison.engine
    engine.scheduler = Scheduler(workers=2)
    nodes = demo_app.comparison.pairing.node_pairs(0)
    permits, finished = threading.Semaphore(0), threading.Semaphore(0)
    computed: list[str] = []
    compute = engine.tensors.compute  # a pair read, compared and judged

    logits = demo_app.comparison.pairing.logits_pair(0)  # the token list's: not held back

    def gated(pair):  # type: ignore[no-untyped-def]
        if pair.token != 0 or pair == logits:
            return compute(pair)
        assert permits.acquire(timeout=60), "never released"
        try:
            return compute(pair)
        finally:
            computed.append(pair.golden_node)
            finished.release()

    engine.tensors.compute = gated  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()

    async def let_one_through() -> None:
        permits.release()
        assert await loop.run_in_executor(None, finished.acquire, True, 60)
        await pilot.pause()

    try:
        async with demo_app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            await pilot.press("g", "enter")  # token 0
            screen = demo_app.screen
            assert isinstance(screen, OperatorScreen) and screen.token == 0
            await pilot.press("G")  # the bottom rows are what the user looks at now
            bottom = screen._on_screen
            assert nodes[-2].golden in bottom and nodes[1].golden not in bottom
            for _ in range(12):
                await let_one_through()
            # up to 3 pairs were in the workers' hands before G (the top rows); then only the bottom
            assert computed[3:] and set(computed[3:]) <= bottom, computed
            shown = [name for name, row in screen._rows.items() if row.get("provisional")]
            assert shown and set(shown) <= bottom  # metrics on screen before the rows above them
            assert len(computed) == 12 < sum(len(n.tensors) for n in nodes) // 2
            before = len(computed)
            await pilot.press("escape")  # leave with most of the token not computed
            assert isinstance(demo_app.screen, TokenScreen)
            for _ in range(1000):
                permits.release()
            await settle(pilot)
    finally:
        for _ in range(1000):
            permits.release()
    assert len(computed) <= before + 3  # only the pairs already in the workers' hands


async def test_a_fallback_order_is_said_where_first_failing_is_shown(demo_pair, tmp_path: Path) -> None:
    """A copy without file times leaves msit's model_tree.json order where data flow cannot tell
    (the demo's attention and post-attention norm: no module's output is the other's input), which
    is not execution order: "first failing" is then first in that order, and the header says so."""
    import os
    import shutil

    from tui_acc import CompareOptions, open_comparison

    golden = tmp_path / "golden"
    shutil.copytree(demo_pair.golden, golden)
    for i, path in enumerate(sorted(golden.rglob("*"))):  # stamped as a copy stamps them
        os.utime(path, ns=(1_700_000_000_000_000_000 + i * 1000,) * 2)
    comparison = open_comparison(golden, demo_pair.test, CompareOptions(cache=False))
    assert not comparison.golden.order_is_execution
    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert "⚠ order: data flow and model_tree.json, not execution" in _text(app, "#summary")
        assert app.screen.natural_order == "dump order (data flow and model_tree.json)"
        # the culprit's name comes first: at 80 columns the line is cut at its end
        summary = _text(app, "#summary")
        assert summary.index("◆ model.layers.") < summary.index("⚠ order")
        assert summary.index(" (f)") + len(" (f)") <= 80 - 2
    plain = AccApp(
        open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False)), export_dir=tmp_path
    )
    async with plain.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert "order" not in _text(plain, "#summary")


async def test_the_app_can_open_at_a_tokens_first_failing_operator(demo_pair, tmp_path: Path) -> None:
    """What ``tui-acc hunt`` opens: the culprit's token, the cursor on ◆; Esc goes to the tokens."""
    from tui_acc import open_comparison

    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    app = AccApp(cmp, export_dir=tmp_path, start_at=3, greeting="hunt: first failing operator")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert [n.message for n in app._notifications] == ["hunt: first failing operator"]
        assert isinstance(app.screen, OperatorScreen) and app.screen.token == demo_pair.fault_token
        assert cursor_key(app, "#ops") == demo_pair.fault_module
        await pilot.press("escape")
        assert isinstance(app.screen, TokenScreen)
