"""Pilot: one dump checked on its own (``tui-acc DUMP``): the token list, f to the first anomaly,
n to the next, the detail, export; and how the operator screen looks."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from tests.tui.conftest import settle
from tests.tui.test_snapshots import _at_first_failing_op
from tui_acc.anomalies.session import open_single
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.tokens import TokenScreen

NAN_AT = "root.model.layers.1.mlp.act_fn"  # token 2
ZEROS_AT = "root.model.layers.3.mlp.up_proj"  # token 2, later in the same token


@pytest.fixture
def anomalous(demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's test dump with a NaN and an all-zero output injected at token 2, as ./dump."""
    import torch

    dump = tmp_path / "dump"
    shutil.copytree(demo_pair.test, dump)
    (device,) = dump.glob("msit_dump_*/torch_tensors/*_*")
    for name, change in (
        (NAN_AT, lambda t: t.index_fill(-1, torch.tensor([5]), float("nan"))),
        (ZEROS_AT, lambda t: t * 0),
    ):
        path = device / "2" / name / "output.pth"
        torch.save(change(torch.load(path)), path)
    monkeypatch.chdir(tmp_path)  # a relative path keeps the title the same on every machine
    return Path("dump")


def _text(widget: Static) -> str:
    """A widget's content as plain text, as a terminal would show it."""
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def _cursor(app: AccApp, selector: str) -> str:
    table = app.screen.query_one(selector, DataTable)
    return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)


async def test_f_finds_the_first_anomaly_and_n_the_next(anomalous: Path, tmp_path: Path) -> None:
    app = AccApp(open_single(anomalous), export_dir=tmp_path)
    async with app.run_test(size=(120, 32)) as pilot:
        await settle(pilot)
        tokens = app.screen
        assert isinstance(tokens, TokenScreen)
        table = tokens.query_one("#tokens", DataTable)
        assert (
            str(table.get_cell("2", "first_anomaly")) == NAN_AT
            and str(table.get_cell("2", "anomaly")) == "nan"
        )
        assert str(table.get_cell("2", "anomalies")) == "2" and str(table.get_cell("0", "anomalies")) == "0"
        assert app.sub_title == "check of dump"
        assert not tokens.query_one("#strip").display  # no KL without a golden
        summary = _text(tokens.query_one("#summary", Static))
        assert summary.startswith(f"{table.row_count}/{table.row_count} tokens checked"), summary
        await pilot.press("f")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        ops = app.screen
        assert isinstance(ops, OperatorScreen) and ops.token == 2 and _cursor(app, "#ops") == NAN_AT
        assert "nan (1 elements)" in _text(ops.query_one("#detail", Static))
        await pilot.press("n")
        await pilot.pause()
        assert _cursor(app, "#ops") == ZEROS_AT
        frame = ops.view_frame()
        zeros = frame.filter(frame["operator"] == ZEROS_AT).row(0, named=True)
        assert zeros["anomaly"] == "zeros" and zeros["label"] == "local" and zeros["outputs_passed"] is False


def test_operator_screen_of_one_dump(snap_compare, anomalous: Path, tmp_path: Path) -> None:
    app = AccApp(open_single(anomalous), export_dir=tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=_at_first_failing_op)
