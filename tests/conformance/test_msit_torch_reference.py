"""Conformance with msit's own compare CSVs on real msit torch dumps (../shared/reference)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conformance.msit_definitions import msit_metrics, whole_tensor_kl64
from tui_acc import open_comparison
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


def _our_rows(case_dir: Path) -> dict[tuple[int, str, str], dict[str, object]]:
    cmp = open_comparison(case_dir / "golden", case_dir / "test")
    rows = {}
    for token in cmp.pairing.tokens:
        for row in cmp.engine.tensors_frame(token).iter_rows(named=True):
            rows[(token, row["golden_node"], Path(row["golden_path"]).name)] = row
    return rows


def _np(path: Path) -> np.ndarray:
    return load_tensor(path).to(torch.float64).numpy()


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
        # cosine: same definition; msit rounds to 10 decimals
        assert mine["cosine"] == pytest.approx(float(row["cosine_similarity"]), abs=1e-6), key
        assert mine["rel_euclidean"] == pytest.approx(float(row["relative_euclidean_distance"]), rel=1e-5), (
            key
        )
        # the golden statistics are exact on both sides (msit computes them in fp32)
        assert mine["golden_max"] == pytest.approx(float(row["golden_max_value"]), rel=1e-6), key
        assert mine["test_min"] == pytest.approx(float(row["my_min_value"]), rel=1e-6), key


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
        ref = msit_metrics(g, t)
        for column, value in ref.items():
            assert value == pytest.approx(float(row[column]), rel=1e-5, abs=1e-12), (key, column)
        # Where no golden element is ~0, msit's masked abs errors are ours exactly;
        # its mean relative error is ours scaled by |M|/N.
        mask = np.abs(g.reshape(-1)) > 1.1920929e-07
        if mask.all():
            assert mine["max_abs_err"] == pytest.approx(float(row["max_absolute_error"]), rel=1e-5), key
            assert mine["mean_abs_err"] == pytest.approx(float(row["mean_absolute_error"]), rel=1e-5), key
            assert mine["mean_rel_err"] == pytest.approx(float(row["mean_relative_error"]), rel=1e-4), key
        else:
            scaled = mine["mean_rel_err"] * mask.sum() / mask.size
            assert scaled == pytest.approx(float(row["mean_relative_error"]), rel=1e-4), key


def test_logits_kl_is_exact_where_msit_is_fp32_noise(reference: Path) -> None:
    """Logits rows are single rows, so per-row KL equals msit's whole-tensor KL in exact arithmetic."""
    case_dir = reference / "msit-torch-logits"
    ours = _our_rows(case_dir)
    for row in _msit_rows(case_dir):
        mine = ours[_key(case_dir, row["golden_data_path"])]
        g, t = _np(Path(mine["golden_path"])), _np(Path(mine["test_path"]))
        assert mine["kl"] == pytest.approx(whole_tensor_kl64(g, t), rel=1e-9)
        assert mine["kl"] == pytest.approx(float(row["kl_divergence"]), abs=1e-6)


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
