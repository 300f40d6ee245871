"""Pilot: what an export carries besides the columns on screen (labels, the effective input verdict,
where it came from), and the formats a path's extension picks (.csv, .parquet, .xlsx)."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import zipfile
from pathlib import Path

import polars as pl
import pytest
from textual.widgets import Static

from tests.tui.conftest import export_to, settle
from tui_acc import __version__
from tui_acc.reports.export import PARQUET_KEY, XLSX_HINT, ExportError, write_export
from tui_acc.tui.app import AccApp
from tui_acc.tui.screens.export_dialog import ExportDialog


def _status(app: AccApp) -> str:
    return str(app.screen.query_one("#status", Static).render())


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


async def _export_fault_token_ops(app: AccApp, name: str) -> Path:
    """Open the first failing token's operators and export them to ``name`` in the export folder."""
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("f")  # the first failing token, opened at its first failing op
        await settle(pilot)
        await pilot.press("e", "ctrl+a", "ctrl+k", *name, "enter")
        status = _status(app)
        assert status.startswith("exported "), status
        return Path(status.split(" to ", 1)[1])


async def test_csv_carries_labels_effective_inputs_and_provenance(
    in_place_copy, demo_pair, tmp_path: Path
) -> None:
    from tui_acc import open_comparison

    comparison = open_comparison(*in_place_copy)
    app = AccApp(comparison, export_dir=tmp_path)
    rows = _read_csv(await _export_fault_token_ops(app, "ops.csv"))
    fault = next(r for r in rows if r["operator"] == demo_pair.fault_module)
    # its dumped input is its own output (in place): judged by what fed it, as the In column shows
    assert fault["inputs_passed"] == "false" and fault["inputs_effective"] == "true"
    assert fault["inputs_from"] not in ("", "files") and fault["label"] == "local"
    labels = {r["label"] for r in rows if r["outputs_passed"] == "false"}
    assert "local" in labels and labels <= {"local", "contains", "inherited"}
    assert {r["inputs_from"] for r in rows if r["inputs_effective"]} >= {"files"}
    # provenance: constant columns, so any CSV reader parses the file and keeps them per row
    assert {r["source_golden"] for r in rows} == {str(comparison.golden.root.resolve())}
    assert {r["source_test"] for r in rows} == {str(comparison.test.root.resolve())}
    assert {r["source_tui_acc"] for r in rows} == {__version__}
    # the thresholds once, beside the CSV, not a JSON object in every row: each row names the file
    sidecar = tmp_path / "ops.thresholds.json"
    assert {r["source_thresholds"] for r in rows} == {sidecar.name}
    assert json.loads(sidecar.read_text()) == json.loads(json.dumps(comparison.engine.thresholds.as_dict()))


async def test_parquet_by_extension(demo_app: AccApp, demo_pair) -> None:
    path = await _export_fault_token_ops(demo_app, "ops.parquet")
    frame = pl.read_parquet(path)
    fault = frame.filter(pl.col("operator") == demo_pair.fault_module).row(0, named=True)
    assert fault["first_failing"] is True and fault["outputs_passed"] is False and fault["label"] == "local"
    assert frame["source_tui_acc"].unique().to_list() == [__version__]
    # the thresholds once, in the file's metadata
    assert frame["source_thresholds"].unique().to_list() == [f"parquet metadata {PARQUET_KEY}"]
    thresholds = json.loads(pl.read_parquet_metadata(path)[PARQUET_KEY])
    assert thresholds == json.loads(json.dumps(demo_app.comparison.engine.thresholds.as_dict()))


@pytest.mark.skipif(importlib.util.find_spec("xlsxwriter") is None, reason="needs tui-acc[xlsx]")
async def test_xlsx_by_extension_with_verdict_cells_coloured(demo_app: AccApp, demo_pair) -> None:
    path = await _export_fault_token_ops(demo_app, "ops.xlsx")
    with zipfile.ZipFile(path) as book:
        sheet = book.read("xl/worksheets/sheet1.xml").decode()
        styles = book.read("xl/styles.xml").decode()
        strings = book.read("xl/sharedStrings.xml").decode()
    assert demo_pair.fault_module in strings and "source_golden" in strings
    # the verdict columns are coloured by rule: failures red, passes green
    assert sheet.count("<conditionalFormatting") >= 4  # In (raw, effective), Out, label
    assert '<formula>"local"</formula>' in sheet
    # booleans: false, but not blank (a row not judged yet), is red
    red_when_false = r'sqref="([A-Z]+)2:[^"]*"><cfRule[^>]*><formula>AND\(ISLOGICAL\(([A-Z]+)2\),NOT'
    boolean_rules = re.findall(red_when_false, sheet)
    assert len(boolean_rules) == 3 and all(column == tested for column, tested in boolean_rules)
    assert "FFC7CE" in styles and "C6EFCE" in styles
    # the thresholds once, in a sheet of their own, one bound a row
    with zipfile.ZipFile(path) as book:
        assert '<sheet name="thresholds"' in book.read("xl/workbook.xml").decode()
        bounds = book.read("xl/worksheets/sheet2.xml").decode()
    assert "ops.bfloat16.cosine" in strings and "<v>" in bounds and "sheet thresholds" in strings


def test_xlsx_without_xlsxwriter_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "xlsxwriter" else real(name, *a)
    )
    with pytest.raises(ExportError, match=r"pip install 'tui-acc\[xlsx\]'"):
        write_export(pl.DataFrame({"a": [1]}), tmp_path / "view.xlsx")
    assert XLSX_HINT == "pip install 'tui-acc[xlsx]'" and list(tmp_path.iterdir()) == []


async def test_a_failed_write_keeps_the_dialog_and_the_typed_path(demo_app: AccApp, tmp_path: Path) -> None:
    from textual.widgets import Input

    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        typed = str(tmp_path / "no" / "such" / "mine.parquet")
        await export_to(pilot, typed)
        assert isinstance(demo_app.screen, ExportDialog)
        assert demo_app.screen.query_one("#export-path", Input).value == typed
        assert "cannot write here" in str(demo_app.screen.query_one("#export-hint", Static).render())
        await pilot.press("escape")
        assert _status(demo_app) == "export cancelled"


async def test_statistics_token_export_keeps_the_differences_shown(reference: Path, tmp_path: Path) -> None:
    from tui_acc import open_comparison

    case = reference / "msprobe-L0" / "statistics"
    app = AccApp(open_comparison(case / "golden", case / "test"), export_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("e", "enter")
        rows = _read_csv(Path(_status(app).split(" to ", 1)[1]))
    assert rows and all(r["norm_rel_diff"] and r["max_diff"] and r["mean_diff"] for r in rows)
    assert {r["source_golden"] for r in rows} == {str((case / "golden").resolve())}


# What scripts reading an export rely on: these columns, in this order, with these types (derived
# from the rows' declarations in rows.py, never written twice).
TOKEN_COLUMNS = {
    "token": pl.Int64,
    "verdict": pl.String,
    "cosine": pl.Float64,
    "kl": pl.Float64,
    "max_abs_err": pl.Float64,
    "golden_top1": pl.Int64,
    "test_top1": pl.Int64,
    "logits_shape": pl.String,
    "stats_only": pl.Boolean,
    "norm_rel_diff": pl.Float64,
    "max_diff": pl.Float64,
    "mean_diff": pl.Float64,
    "error": pl.String,
}
OPERATOR_COLUMNS = {
    "token": pl.Int64,
    "order": pl.Int64,
    "operator": pl.String,
    "test_operator": pl.String,
    "type": pl.String,
    "test_type": pl.String,
    "inputs_passed": pl.Boolean,
    "inputs_effective": pl.Boolean,
    "inputs_from": pl.String,
    "outputs_passed": pl.Boolean,
    "label": pl.String,
    "first_failing": pl.Boolean,
    "rule": pl.String,
    "local_error": pl.Float64,
    "expected_error": pl.Float64,
    "reason": pl.String,
    "cosine": pl.Float64,
    "max_abs_err": pl.Float64,
    "rel_euclidean": pl.Float64,
    "thousandth_ratio": pl.Float64,
    "stats_only": pl.Boolean,
    "norm_rel_diff": pl.Float64,
    "max_diff": pl.Float64,
    "min_diff": pl.Float64,
    "mean_diff": pl.Float64,
    "shape": pl.String,
    "error": pl.String,
}


async def test_the_exported_tables_keep_their_columns_and_types(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert dict(demo_app.screen.view_frame().schema) == TOKEN_COLUMNS
        await pilot.press("f")  # the first failing token's operators
        await settle(pilot)
        assert dict(demo_app.screen.view_frame().schema) == OPERATOR_COLUMNS


def test_noise_and_anomaly_columns_come_last_typed_as_their_rows() -> None:
    from tui_acc.tui.screens.operator_table import op_export_schema
    from tui_acc.tui.screens.tokens import _token_export_schema

    noise = dict.fromkeys(
        ("noise_ratio", "baseline_cosine", "baseline_rel_euclidean", "baseline_rmse"), pl.Float64
    )
    assert op_export_schema(with_noise=True, single=True) == {
        **OPERATOR_COLUMNS,
        **noise,
        "anomaly": pl.String,
        "anomaly_figure": pl.Float64,
    }
    assert _token_export_schema(with_noise=True, single=True) == {
        **TOKEN_COLUMNS,
        **noise,
        "anomalies": pl.Int64,
        "first_anomaly": pl.String,
        "anomaly": pl.String,
    }


async def test_the_xlsx_hint_keeps_its_brackets_in_the_dialog(
    demo_app: AccApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the dialog shows is plain text: markup would eat ``[xlsx]`` from the install hint."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "xlsxwriter" else real(name, *a)
    )
    async with demo_app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        await export_to(pilot, str(tmp_path / "[x]" / "view.xlsx"))
        assert isinstance(demo_app.screen, ExportDialog)
        shown = str(demo_app.screen.query_one("#export-hint", Static).render())
        assert XLSX_HINT in shown and "[x]" in shown


async def test_the_status_line_shows_brackets_as_typed(demo_app: AccApp, tmp_path: Path) -> None:
    (tmp_path / "[old]").mkdir()
    async with demo_app.run_test(size=(120, 24)) as pilot:
        await settle(pilot)
        await export_to(pilot, str(tmp_path / "[old]" / "view.csv"))
        assert _status(demo_app) == f"exported {demo_app.screen.export_frame().height} rows to " + str(
            tmp_path / "[old]" / "view.csv"
        )
