"""--compat msit|msprobe: the tools' columns, computed their way, match their own CSVs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conformance.msit_definitions import (
    kl_rounding_bound,
    msit_elementwise,
    torch_softmax_depth,
    whole_tensor_kl64,
)
from tests.conformance.rounding import (
    EPS32,
    EPS64,
    cosine_bound,
    mean_bound,
    norm_relative_bound,
    relative_euclidean_bound,
    rounded_apart,
)
from tui_acc import open_comparison
from tui_acc.cli.main import main
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.metrics.compat import MSIT_COLUMNS, MSPROBE_COLUMNS
from tui_acc.reports.compat import compat_frame


def _fp32(path: str) -> np.ndarray:
    """A tensor as msit reads it: flattened to fp32."""
    return load_tensor(Path(path), ANYWHERE).astype(np.float32).reshape(-1)


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
    kl_checked = 0
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
        g, t = _fp32(mine["golden_data_path"]), _fp32(mine["my_data_path"])
        n = g.size
        # Exact on every CPU: extremes of the same fp32 values, and maxima of the same correctly
        # rounded fp32 elementwise terms (|m/g - 1|, |m - g|).
        for column in (
            "golden_max_value",
            "golden_min_value",
            "my_max_value",
            "my_min_value",
            "max_relative_error",
            "max_absolute_error",
        ):
            assert float(mine[column]) == float(row[column]), (key, column)
        # fp32 sums of the same terms: only the order of additions may differ, on either side
        for column, terms in (("golden_mean_value", g), ("my_mean_value", t)):
            assert abs(float(mine[column]) - float(row[column])) <= 2 * mean_bound(terms, EPS32), (
                key,
                column,
            )
        elementwise = msit_elementwise(g, t)
        for column, name in (("mean_relative_error", "rel"), ("mean_absolute_error", "abs_err")):
            bound = 2 * mean_bound(elementwise[name], EPS32)
            assert abs(float(mine[column]) - float(row[column])) <= bound, (key, column)
        # cosine in float64 on both sides, both rounded to 10 decimals
        assert abs(float(mine["cosine_similarity"]) - float(row["cosine_similarity"])) <= rounded_apart(
            10, 2 * cosine_bound(n, EPS64)
        ), key
        # ours in float64, msit's in fp32
        red = float(row["relative_euclidean_distance"])
        bound = red * (relative_euclidean_bound(n, EPS32) + relative_euclidean_bound(n, EPS64))
        assert abs(float(mine["relative_euclidean_distance"]) - red) <= bound, key
        # KL: both in fp32, each within its rounding bound of the exact (float64) value; fp32 KL below
        # ~1e-6 is noise (docs/formats.md §4.4), which is what the bound says, tensor by tensor
        exact = whole_tensor_kl64(g, t)
        bound = kl_rounding_bound(g, t, EPS32, torch_softmax_depth(n)) + kl_rounding_bound(g, t, EPS64)
        assert abs(float(row["kl_divergence"]) - exact) <= bound, key  # the bound holds for msit itself
        assert abs(float(mine["kl_divergence"]) - exact) <= bound, key
        kl_checked += exact > 2 * bound
    # the KL definition (one softmax over the whole flattened tensor) was told apart from noise
    assert kl_checked > 0


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
        # Exact on every CPU: fp32 elementwise relative errors (and counts of them), printed alike;
        # extremes of the same values
        for column in (
            "MaxRelativeErr",
            "One Thousandth Err Ratio",
            "Five Thousandths Err Ratio",
            "NPU max",
            "NPU min",
            "Bench max",
            "Bench min",
        ):
            if row[column] == "unsupported":
                assert mine[column] == "unsupported"
                continue
            assert float(mine[column]) == float(row[column]), (name, column)
        worst = float(row["MaxAbsErr"])  # float64 differences of the same values, printed to 12 decimals
        assert abs(float(mine["MaxAbsErr"]) - worst) <= rounded_apart(12, 2 * EPS64 * worst, worst), name
        if row["Cosine"] == "unsupported":  # a single element: only its errors are kept
            assert mine["Cosine"] == mine["EucDist"] == row["EucDist"] == "unsupported", name
            continue
        n = math.prod(json.loads(row["Bench Tensor Shape"]))
        # float64 on both sides, printed to 12 decimals; cosines above 0.9999 then rounded to 6
        places = 6 if max(float(mine["Cosine"]), float(row["Cosine"])) > 0.9999 else 12
        bound = rounded_apart(places, rounded_apart(12, 2 * cosine_bound(n, EPS64)))
        assert abs(float(mine["Cosine"]) - float(row["Cosine"])) <= bound, name
        dist = float(row["EucDist"])
        bound = rounded_apart(12, 2 * (norm_relative_bound(n, EPS64) + EPS64) * dist, dist)
        assert abs(float(mine["EucDist"]) - dist) <= bound, name


def test_compat_needs_a_csv(demo_pair, tmp_path: Path, capsys) -> None:
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--compat", "msit"]) == 2
    assert "--compat writes a CSV" in capsys.readouterr().err
    out = tmp_path / "msit.csv"
    main(["report", str(demo_pair.golden), str(demo_pair.test), "--compat", "msit", "--csv", str(out)])
    rows = _csv(out)
    assert list(rows[0]) == MSIT_COLUMNS and len({r["token_id"] for r in rows}) == 8
