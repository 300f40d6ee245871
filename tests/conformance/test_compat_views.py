"""--compat msit|msprobe: the tools' columns, computed their way, match their own CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tui_acc import open_comparison
from tui_acc.cli import main
from tui_acc.compat_report import compat_frame
from tui_acc.metrics.compat import MSIT_COLUMNS, MSPROBE_COLUMNS


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize(
    ("case", "test"), [("msit-torch-2layer", "test"), ("msit-torch-12layer-vs-atb", "test_atb")]
)
def test_msit_view_matches_msits_csv(reference: Path, case: str, test: str) -> None:
    case_dir = reference / case
    (theirs_path,) = (case_dir / "compare").glob("msit_cmp_report_*.csv")
    theirs = {(r["golden_data_path"], r["my_data_path"]): r for r in _csv(theirs_path)}
    frame = compat_frame(open_comparison(case_dir / "golden", case_dir / test), "msit")
    assert frame.columns == MSIT_COLUMNS
    ours = {
        (
            str(Path(r["golden_data_path"]).relative_to(case_dir)),
            str(Path(r["my_data_path"]).relative_to(case_dir)),
        ): r
        for r in frame.iter_rows(named=True)
    }
    assert set(theirs) <= set(ours)
    for key, row in theirs.items():
        mine = ours[key]
        for column in (
            "golden_op_type",
            "golden_dtype",
            "golden_shape",
            "my_dtype",
            "my_shape",
            "cmp_fail_reason",
        ):
            assert mine[column] == row[column], (key, column)
        assert float(mine["cosine_similarity"]) == pytest.approx(float(row["cosine_similarity"]), abs=1e-10)
        for column in MSIT_COLUMNS[6:9] + MSIT_COLUMNS[13:16]:
            assert float(mine[column]) == pytest.approx(float(row[column]), rel=1e-6), (key, column)
        for column in (
            "max_relative_error",
            "mean_relative_error",
            "max_absolute_error",
            "mean_absolute_error",
        ):
            assert float(mine[column]) == pytest.approx(float(row[column]), rel=1e-5, abs=1e-12), (
                key,
                column,
            )
        assert float(mine["relative_euclidean_distance"]) == pytest.approx(
            float(row["relative_euclidean_distance"]), rel=1e-6
        )
        # fp32 KL is noise below ~1e-6 (formats.md §4.4); msit's own arithmetic gives the same noise
        assert float(mine["kl_divergence"]) == pytest.approx(
            float(row["kl_divergence"]), rel=1e-2, abs=2e-8
        ), key


def test_msprobe_view_matches_msprobes_csv(reference: Path) -> None:
    task = reference / "msprobe-L0" / "tensor"
    (theirs_path,) = (task / "compare").glob("compare_result_*.csv")
    theirs = {
        r["NPU Name"].replace(".kwargs.", ".input."): r
        for r in _csv(theirs_path)
        if r["NPU Dtype"].startswith("torch.")
    }
    frame = compat_frame(open_comparison(task / "golden", task / "test"), "msprobe")
    assert frame.columns == MSPROBE_COLUMNS
    ours = {r["NPU Name"]: r for r in frame.iter_rows(named=True)}
    assert set(theirs) == set(ours)
    for name, row in theirs.items():
        mine = ours[name]
        for column in ("NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape", "Result"):
            assert mine[column] == row[column], (name, column)
        for column in (
            "Cosine",
            "EucDist",
            "MaxAbsErr",
            "MaxRelativeErr",
            "One Thousandth Err Ratio",
            "Five Thousandths Err Ratio",
        ):
            if row[column] == "unsupported":
                assert mine[column] == "unsupported"
                continue
            assert float(mine[column]) == pytest.approx(float(row[column]), rel=1e-9, abs=1e-12), (
                name,
                column,
            )
        for column in ("NPU max", "NPU min", "Bench max", "Bench min"):
            assert float(mine[column]) == pytest.approx(float(row[column]), rel=1e-6), (name, column)


def test_compat_needs_a_csv(demo_pair, tmp_path: Path, capsys) -> None:
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--compat", "msit"]) == 2
    assert "--compat writes a CSV" in capsys.readouterr().err
    out = tmp_path / "msit.csv"
    main(["report", str(demo_pair.golden), str(demo_pair.test), "--compat", "msit", "--csv", str(out)])
    rows = _csv(out)
    assert list(rows[0]) == MSIT_COLUMNS and len({r["token_id"] for r in rows}) == 8
