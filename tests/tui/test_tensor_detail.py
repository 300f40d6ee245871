"""The detail panel draws each tensor by the rule that judges it: a weight by its cast's rounding
(verdicts/weights.py), not by the thresholds, which know nothing of a cast."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from tests.tui.conftest import settle
from tui_acc import CompareOptions, open_comparison
from tui_acc.tolerances.thresholds import Thresholds
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.widgets.tensor_detail import TensorDetail
from tui_acc.verdicts.weights import weight_error

Q_PROJ = "Module.model.layers.0.self_attn.q_proj.Linear.forward.0"


async def test_a_weight_within_its_casts_rounding_is_not_drawn_failing(model_case, tmp_path: Path) -> None:
    # msprobe L0 of Qwen2, float32 against float16: a user's rel_euclidean bound tighter than a
    # float16 cast's rounding fails q_proj's weight by the thresholds, though its cast explains it
    folder = model_case("qwen2-msprobe-L0")
    tight = Thresholds(ops={**Thresholds().ops, "float16": {"cosine": 0.99, "rel_euclidean": 1e-4}})
    comparison = open_comparison(
        folder / "golden", folder / "test", CompareOptions(thresholds=tight, cache=False)
    )
    (node,) = (n for n in comparison.pairing.node_pairs(0) if n.golden == Q_PROJ)
    (weight,) = (t for t in node.tensors if t.slot == "parameters.weight")
    row = comparison.engine.tensor_row(weight)
    judged = weight_error(row, node.golden_type)
    assert not row["passed"] and judged is not None and judged[0] <= judged[1]  # the case this test is about

    app = AccApp(comparison, export_dir=tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        app.push_screen(OperatorScreen(0, select=Q_PROJ))
        await settle(pilot)
        detail = app.screen.query_one(TensorDetail)
        console = Console(width=detail.content_size.width, record=True, color_system=None)
        console.print(detail.content)
        lines = console.export_text().splitlines()
    (shown,) = (line for line in lines if "parameters.weight" in line)
    assert shown.split()[0] == "✓", lines
