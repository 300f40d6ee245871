"""Conformance with msit's own compare CSVs on real msit torch dumps (each reference set: conftest)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conformance.msit_definitions import (
    assert_cosine_and_distance_agree,
    kl_rounding_bound,
    msit_elementwise,
    msit_metrics,
    torch_softmax_depth,
    whole_tensor_kl64,
)
from tests.conformance.rounding import (
    EPS32,
    EPS64,
    cosine_bound,
    mean_bound,
    relative_euclidean_bound,
    rounded_apart,
)
from tui_acc import open_comparison
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor

CASES = ["msit-torch-2layer", "msit-torch-logits"]


def _msit_rows(case_dir: Path) -> list[dict[str, str]]:
    (csv_path,) = sorted((case_dir / "compare").glob("msit_cmp_report_*.csv"))
    with csv_path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _key(case_dir: Path, path: str) -> tuple[int, str, str]:
    """(token, module, file) from a msit CSV path, relative to the case folder."""
    parts = Path(path).parts
    return int(parts[-3]), parts[-2], parts[-1]


def _our_rows(case_dir: Path) -> dict[tuple[int, str, str], dict[str, Any]]:
    cmp = open_comparison(case_dir / "golden", case_dir / "test")
    rows = {}
    for token in cmp.pairing.tokens:
        for row in cmp.engine.tensors_frame(token).iter_rows(named=True):
            rows[(token, row["golden_node"], Path(row["golden_path"]).name)] = row
    return rows


def _np(path: Path) -> np.ndarray:
    return load_tensor(path, ANYWHERE).astype(np.float64)


@pytest.mark.parametrize("case", CASES)
def test_we_pair_every_tensor_msit_pairs(reference: Path, case: str) -> None:
    case_dir = reference / case
    msit = _msit_rows(case_dir)
    ours = _our_rows(case_dir)
    assert msit, "the reference CSV has rows"
    for row in msit:
        key = _key(case_dir, row["golden_data_path"])
        assert key in ours, f"msit pairs {key}, we do not"
        assert ours[key]["test_path"].endswith(row["my_data_path"]), key
    # msit compares outputs only; we pair the inputs as well, and exactly the same outputs
    our_outputs = {k for k, r in ours.items() if r["role"] == "output"}
    assert our_outputs == {_key(case_dir, r["golden_data_path"]) for r in msit}


@pytest.mark.parametrize("case", CASES)
def test_metrics_agree_with_msit(reference: Path, case: str) -> None:
    case_dir = reference / case
    ours = _our_rows(case_dir)
    for row in _msit_rows(case_dir):
        key = _key(case_dir, row["golden_data_path"])
        mine = ours[key]
        assert_cosine_and_distance_agree(mine, row, key)
        # extremes are exact in any precision (msit's after .float(), ours of the same values)
        assert mine["golden_max"] == float(row["golden_max_value"]), key
        assert mine["test_min"] == float(row["my_min_value"]), key


@pytest.mark.parametrize("case", CASES)
def test_msit_definitions_reproduce_its_csv_and_ours_differ_only_as_documented(
    reference: Path, case: str
) -> None:
    case_dir = reference / case
    ours = _our_rows(case_dir)
    for row in _msit_rows(case_dir):
        key = _key(case_dir, row["golden_data_path"])
        mine = ours[key]
        g, t = _np(Path(mine["golden_path"])), _np(Path(mine["test_path"]))
        n = g.size
        ref = msit_metrics(g, t)
        terms = msit_elementwise(g, t)
        # the definitions (fp32 terms, float64 sums) against msit (fp32 terms, fp32 sums)
        assert abs(ref["cosine_similarity"] - float(row["cosine_similarity"])) <= rounded_apart(
            10, 2 * cosine_bound(n, EPS64)
        ), key
        for column in ("max_relative_error", "max_absolute_error"):  # the same fp32 terms: exact
            assert ref[column] == float(row[column]), (key, column)
        for column, name in (("mean_relative_error", "rel"), ("mean_absolute_error", "abs_err")):
            bound = mean_bound(terms[name], EPS32) + mean_bound(terms[name], EPS64)
            assert abs(ref[column] - float(row[column])) <= bound, (key, column)
        red = float(row["relative_euclidean_distance"])
        bound = red * (relative_euclidean_bound(n, EPS32) + relative_euclidean_bound(n, EPS64))
        assert abs(ref["relative_euclidean_distance"] - red) <= bound, key
        # Ours are float64 throughout; msit rounds each term to fp32 (u32 = EPS32 / 2 relative).
        # Where no golden element is ~0, msit's masked abs errors are ours; its mean relative error
        # is ours scaled by |M|/N.
        mask = terms["mask"]
        rel, abs_err = terms["rel"].astype(np.float64), terms["abs_err"].astype(np.float64)
        # fl32(fl32(m/g) - 1): the division rounds by u32 |m/g|, the subtraction by u32 |m/g - 1|
        rel_terms = EPS32 / 2 * float((np.abs(terms["ratio"].astype(np.float64)) + rel).mean())
        rel_bound = rel_terms + mean_bound(terms["rel"], EPS32) + mean_bound(rel, EPS64)
        if mask.all():
            worst = float(row["max_absolute_error"])
            assert abs(mine["max_abs_err"] - worst) <= (EPS32 / 2 + EPS64) * worst, key
            abs_bound = EPS32 / 2 * float(abs_err.mean()) + mean_bound(terms["abs_err"], EPS32)
            abs_bound += mean_bound(abs_err, EPS64)
            assert abs(mine["mean_abs_err"] - float(row["mean_absolute_error"])) <= abs_bound, key
            assert abs(mine["mean_rel_err"] - float(row["mean_relative_error"])) <= rel_bound, key
        else:
            scaled = mine["mean_rel_err"] * mask.sum() / mask.size
            assert abs(scaled - float(row["mean_relative_error"])) <= rel_bound + EPS64 * scaled, key


def test_logits_kl_is_exact_where_msit_is_fp32_noise(reference: Path) -> None:
    """Logits rows are single rows, so per-row KL equals msit's whole-tensor KL in exact arithmetic."""
    case_dir = reference / "msit-torch-logits"
    ours = _our_rows(case_dir)
    for row in _msit_rows(case_dir):
        mine = ours[_key(case_dir, row["golden_data_path"])]
        g, t = _np(Path(mine["golden_path"])), _np(Path(mine["test_path"]))
        exact = whole_tensor_kl64(g, t)
        ours64 = kl_rounding_bound(g, t, EPS64)  # our kernel's float64, any summation order
        # ours and the float64 definition: two float64 computations of the same value
        assert abs(mine["kl"] - exact) <= 2 * ours64
        # msit's fp32 KL is within its rounding bound of ours: noise at this size, not a difference
        bound = kl_rounding_bound(g, t, EPS32, torch_softmax_depth(g.size)) + ours64
        assert abs(mine["kl"] - float(row["kl_divergence"])) <= bound


@pytest.mark.parametrize("case", CASES)
def test_reference_pairs_pass_and_top1_matches_generated_ids(reference: Path, case: str) -> None:
    import json

    case_dir = reference / case
    cmp = open_comparison(case_dir / "golden", case_dir / "test")
    rows = cmp.engine.token_rows()
    generated = json.loads((case_dir / "golden_run.json").read_text())["generated"]
    assert [r["golden_top1"] for r in rows] == generated
    assert all(r["passed"] for r in rows)
    assert cmp.engine.first_failing_token() is None
