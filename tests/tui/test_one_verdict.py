"""One verdict, said the same everywhere: on every kind of fixture, the operator screen's Out and In
marks, its failing count and its ◆ are the report's labels, counts and culprit.

The report judges a token in one batch, the screen as its rows stream in (the rows on screen first,
then the rest, then the modules): each side opens its own comparison, so the two paths are checked
against each other, not one result against itself.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.reports.pair import build_report
from tui_acc.tui import formatting as fmt
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operator_table import shown_passed
from tui_acc.tui.screens.operators import OperatorScreen

# (fixture, case): msit torch, msprobe L0 (MoE), L1 (read by a grouped tree), mix with statistics
# only, a decode-step attention, an output-only SGLang dump, msit with its logits' operator at fault,
# a W8A8 port on torch_npu's operators
CASES = [
    ("model_case", "qwen2moe-msprobe-L0"),
    ("model_case", "llama-msprobe-L1"),
    ("model_case", "llama-msprobe-mix-statistics"),
    ("family_case", "qwen3-msprobe-L0-kvcache"),
    ("family_case", "qwen3-sglang-outputs"),
    ("family_case", "qwen3-msit-lmhead"),
    # a port on torch_npu's operators: the culprit module named by the test's own operator inside it
    ("npu_case", "w8a8-llama-msprobe-mix/attention"),
]


async def _screen_says(golden: Path, test: Path, token: int) -> tuple[dict[str, tuple[str, str]], str]:
    """Each row's (In, Out) cells and the summary line of ``token``'s operator screen, once judged."""
    app = AccApp(open_comparison(golden, test, CompareOptions(cache=False)), start_at=token)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, OperatorScreen) and screen.token == token
        table = screen.query_one("#ops", DataTable)
        cells = {
            str(key.value): (str(table.get_cell(key, "inputs")), str(table.get_cell(key, "outputs")))
            for key in table.rows
        }
        return cells, str(screen.query_one("#summary", Static).render())


def _report_says(golden: Path, test: Path) -> tuple[int, dict, dict[str, tuple[str, str]]]:
    """The analysed token, the report's body, and each operator's (In, Out) as the report's rows
    would be drawn."""
    report = build_report(open_comparison(golden, test, CompareOptions(cache=False)), all_tokens=True)
    assert report.analysed_token is not None
    marks = {
        row["golden_node"]: (
            str(fmt.input_mark(row.get("inputs_effective"), row.get("inputs_from"))),
            str(fmt.output_mark(shown_passed(row), row.get("label"), bool(row.get("error")))),
        )
        for row in report.node_table.iter_rows(named=True)
    }
    return report.analysed_token, report.body(), marks


@pytest.mark.parametrize(("kind", "name"), CASES)
async def test_the_screen_and_the_report_say_the_same(
    request: pytest.FixtureRequest, kind: str, name: str
) -> None:
    unpack: Callable[[str], Path] = request.getfixturevalue(kind)
    archive, _, which = name.partition("/")  # an archive of several test dumps names the one
    folder = unpack(archive)
    golden, test = folder / "golden", folder / (which or "test")
    token, body, marks = _report_says(golden, test)
    cells, summary = await _screen_says(golden, test, token)
    assert cells == marks
    counts = body["counts"]
    assert f"{counts['failing']} failing" in summary
    culprit = body["first_failing_op"]
    if culprit is not None and culprit["token"] == token:
        shown = fmt.display_name(culprit["golden"])
        assert f"◆ {shown[:16]}" in summary  # at 160 columns whole, or elided in the middle
    else:
        assert "no operator adds more error" in summary


async def test_the_demo_screen_and_report_agree(demo_pair) -> None:
    token, body, marks = _report_says(demo_pair.golden, demo_pair.test)
    cells, summary = await _screen_says(demo_pair.golden, demo_pair.test, token)
    assert cells == marks
    assert f"{body['counts']['failing']} failing" in summary
    assert "◆ model.layers.2.mlp.down_proj" in summary
