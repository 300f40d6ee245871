"""An export writes its thresholds once, where its format keeps such things, not as a JSON object in
every row: beside a CSV (``NAME.thresholds.json``), never over a file the user has, never left
behind by a CSV that was not written; in the column still where nothing can sit beside the file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
import pytest

from tui_acc.reports.export import ExportError, fresh_path, sidecar_of, write_export

THRESHOLDS = json.dumps({"ops": {"bfloat16": {"cosine": 0.99}}, "rules": [{"pattern": "*lm_head*"}]})


def _frame(rows: int = 3) -> pl.DataFrame:
    return pl.DataFrame({"operator": [f"op{i}" for i in range(rows)], "cosine": [0.5] * rows}).with_columns(
        pl.lit("/g").alias("source_golden"), pl.lit(THRESHOLDS).alias("source_thresholds")
    )


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_csv_names_its_thresholds_file_and_holds_no_json(tmp_path: Path) -> None:
    written = write_export(_frame(), tmp_path / "ops.csv")
    sidecar = tmp_path / "ops.thresholds.json"
    assert sidecar_of(written) == sidecar and json.loads(sidecar.read_text()) == json.loads(THRESHOLDS)
    rows = _rows(written)
    assert [r["source_thresholds"] for r in rows] == [sidecar.name] * 3  # the column's place kept
    assert list(rows[0])[-2:] == ["source_golden", "source_thresholds"]
    assert "cosine" not in written.read_text().split("\n", 1)[1]  # no JSON in the rows


def test_an_existing_thresholds_file_is_not_overwritten_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "ops.thresholds.json").write_text("mine")
    with pytest.raises(ExportError, match=r"ops.thresholds.json: already exists"):
        write_export(_frame(), tmp_path / "ops.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.thresholds.json"]
    assert (tmp_path / "ops.thresholds.json").read_text() == "mine"
    write_export(_frame(), tmp_path / "ops.csv", overwrite=True)  # agreed: both replaced
    assert json.loads((tmp_path / "ops.thresholds.json").read_text()) == json.loads(THRESHOLDS)
    assert fresh_path(tmp_path, "ops").name.endswith(".csv")
    (tmp_path / "view-20260101-000000.thresholds.json").write_text("x")
    from datetime import datetime

    proposed = fresh_path(tmp_path, "view", datetime(2026, 1, 1))
    assert proposed.name == "view-20260101-000000-1.csv"  # no name whose thresholds file is taken


def test_a_csv_not_written_leaves_no_thresholds_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: pl.DataFrame, *args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_csv", refused)
    with pytest.raises(ExportError, match="No space left on device"):
        write_export(_frame(), tmp_path / "ops.csv")
    assert list(tmp_path.iterdir()) == []


def test_through_a_link_the_thresholds_stay_in_the_column(tmp_path: Path) -> None:
    # /dev/stdout is a link (into /proc) even where the shell sent it to a file: nothing beside it
    target = tmp_path / "real.csv"
    target.write_text("")
    (tmp_path / "link.csv").symlink_to(target)
    write_export(_frame(), tmp_path / "link.csv", overwrite=True)
    assert {r["source_thresholds"] for r in _rows(target)} == {THRESHOLDS}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real.csv"]


def test_a_frame_without_thresholds_is_written_as_it_is(tmp_path: Path) -> None:
    frame = _frame().drop("source_thresholds")
    write_export(frame, tmp_path / "ranks.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks.csv"]
    empty = _frame(0)
    write_export(empty, tmp_path / "empty.csv")  # no row to take the value from: as it is
    assert not (tmp_path / "empty.thresholds.json").exists()
