"""Pilot: with --baseline, the tables show each error over the baseline's and ``f`` finds the fault
that a bound too strict for bf16 would have hidden behind its rounding noise."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.tolerances.thresholds import Thresholds
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.tokens import TokenScreen

STRICT = Thresholds().with_bounds(ops={"cosine": 0.99999})


async def test_f_finds_the_fault_against_the_noise_floor(demo_pair, demo_baseline, tmp_path: Path) -> None:
    cmp = open_comparison(
        demo_pair.golden, demo_pair.test, CompareOptions(thresholds=STRICT, baseline=demo_baseline)
    )
    app = AccApp(cmp, export_dir=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        tokens = app.screen
        assert isinstance(tokens, TokenScreen)
        table = tokens.query_one("#tokens", DataTable)
        assert "×noise" in [str(column.label) for column in table.columns.values()]
        assert str(table.get_cell("0", "noise_ratio")).endswith("x")
        assert "noise_ratio" in tokens.view_frame().columns
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        ops = app.screen
        assert isinstance(ops, OperatorScreen) and ops.token == demo_pair.fault_token
        table = ops.query_one("#ops", DataTable)
        cursor = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        assert cursor == demo_pair.fault_module
        ratio = str(table.get_cell(demo_pair.fault_module, "noise_ratio"))
        assert ratio.endswith("x") and float(ratio.rstrip("x")) > 3
        frame = ops.view_frame()
        fault = frame.filter(frame["operator"] == demo_pair.fault_module).row(0, named=True)
        assert fault["noise_ratio"] > 3 and fault["baseline_rmse"] > 0 and fault["first_failing"]


async def test_without_a_baseline_there_is_no_noise_column(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        table = demo_app.screen.query_one("#tokens", DataTable)
        assert "×noise" not in [str(column.label) for column in table.columns.values()]
        assert "noise_ratio" not in demo_app.screen.view_frame().columns


def test_help_states_the_noise_rule(demo_pair, demo_baseline) -> None:
    from tui_acc.tui.bounds import help_lines

    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(baseline=demo_baseline))
    rule = help_lines(cmp)[-1]
    assert rule.startswith(f"Against the baseline {demo_baseline}") and "bfloat16: factor 3" in rule
    assert not any(
        "baseline" in line for line in help_lines(open_comparison(demo_pair.golden, demo_pair.test))
    )
