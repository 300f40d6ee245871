"""Conformance with msprobe's own compare CSVs (../shared/reference/msprobe-L0), both tasks."""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from tui_acc import open_comparison
from tui_acc.dumps.tensors import load_tensor

CASE = "msprobe-L0"


def _msprobe_rows(task_dir: Path) -> list[dict[str, str]]:
    (path,) = sorted((task_dir / "compare").glob("compare_result_*.csv"))
    with path.open(newline="") as handle:
        return [r for r in csv.DictReader(handle) if r["NPU Dtype"].startswith("torch.")]


def _ours(task_dir: Path) -> dict[str, dict[str, object]]:
    """Our tensor rows keyed the way msprobe names them (tensor kwargs read as input.X)."""
    cmp = open_comparison(task_dir / "golden", task_dir / "test")
    rows = {}
    for token in cmp.pairing.tokens:
        for row in cmp.engine.tensors_frame(token).iter_rows(named=True):
            rows[f"{row['test_node']}.{row['slot']}"] = row
    return rows


def _key(name: str) -> str:
    return name.replace(".kwargs.", ".input.")


def _call(name: str) -> int:
    """The call index k of ``...forward.k...``: token k at level L0 under generate()."""
    match = re.search(r"\.forward\.(\d+)(?:\.|$)", name)
    assert match, name
    return int(match.group(1))


def _dumped_calls(task_dir: Path) -> list[int]:
    """The call indices of the golden side's dump.json records: the tokens the dump holds."""
    (dump_json,) = (task_dir / "golden").glob("step0/proc*/dump.json")
    return sorted({_call(name) for name in json.loads(dump_json.read_text())["data"]})


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_we_pair_every_tensor_msprobe_pairs(reference: Path, task: str) -> None:
    task_dir = reference / CASE / task
    rows = _msprobe_rows(task_dir)
    ours = _ours(task_dir)
    per_token = Counter(_call(row["NPU Name"]) for row in rows)
    # every token dumped has its rows: 104 tensors a token (2 layers, L0 modules with parameters)
    assert sorted(per_token) == _dumped_calls(task_dir)
    assert set(per_token.values()) == {104}
    for row in rows:
        assert row["NPU Name"] == row["Bench Name"]
        assert _key(row["NPU Name"]) in ours, row["NPU Name"]
    assert len(ours) == len(rows)


def test_tensor_metrics_agree_with_msprobe(reference: Path) -> None:
    task_dir = reference / CASE / "tensor"
    ours = _ours(task_dir)
    checked_rel = set()
    rows = _msprobe_rows(task_dir)
    for row in rows:
        mine = ours[_key(row["NPU Name"])]
        assert mine["stats_only"] is False
        if row["Cosine"] == "unsupported":  # msprobe skips 0-d and single-element tensors
            assert mine["numel"] <= 1
            continue
        assert mine["cosine"] == pytest.approx(float(row["Cosine"]), abs=1e-6)
        # msprobe's EucDist is absolute: ours is relative to the golden norm
        assert mine["rel_euclidean"] * mine["golden_norm"] == pytest.approx(
            float(row["EucDist"]), rel=1e-9, abs=1e-11
        )
        assert mine["max_abs_err"] == pytest.approx(float(row["MaxAbsErr"]), rel=1e-9, abs=1e-11)
        assert mine["abs_euclidean"] == pytest.approx(float(row["EucDist"]), rel=1e-9, abs=1e-11)
        # msprobe counts in fp32, we in float64: an element sitting on the 0.001 boundary may differ
        for ours_key, theirs in (
            ("thousandth_ratio", "One Thousandth Err Ratio"),
            ("five_thousandths_ratio", "Five Thousandths Err Ratio"),
        ):
            assert mine[ours_key] == pytest.approx(float(row[theirs]), abs=2 / mine["numel"] + 1e-12), (
                ours_key,
                row["NPU Name"],
            )
        # msprobe's MaxRelativeErr adds fp32 eps where the bench is 0 and divides in fp32: check the
        # definition where the bench has no zeros, where it must equal ours to fp32 precision
        bench = load_tensor(Path(mine["golden_path"])).to(torch.float64).numpy()
        if np.all(bench != 0):
            assert mine["max_rel_err"] == pytest.approx(float(row["MaxRelativeErr"]), rel=1e-5)
            checked_rel.add(row["NPU Name"])
    # the definition was checked where it matters: every Linear output (these have no exact zeros)
    linear_outputs = {
        r["NPU Name"] for r in rows if ".Linear.forward." in r["NPU Name"] and "output" in r["NPU Name"]
    }
    assert len(linear_outputs) == 15 * len(_dumped_calls(task_dir))
    assert linear_outputs <= checked_rel


def _percent(value: str) -> float:
    return float(value.rstrip("%")) / 100 if value not in ("N/A", "inf") else math.inf


def test_statistics_compare_as_msprobe(reference: Path) -> None:
    """Same definitions (diff = test - golden, |diff / golden|); msprobe rounds some values in
    float32 on the way, so agreement is to 1e-6 relative rather than bit for bit."""
    task_dir = reference / CASE / "statistics"
    ours = _ours(task_dir)
    for row in _msprobe_rows(task_dir):
        mine = ours[_key(row["NPU Name"])]
        assert mine["stats_only"] is True
        for ours_key, theirs in (("max", "Max"), ("min", "Min"), ("mean", "Mean"), ("norm", "L2norm")):
            if mine[f"golden_{ours_key}"] is None:  # integer tensors record no Mean/Norm
                assert row[f"{theirs} diff"] in ("0", "N/A", "None", "")  # msprobe writes None - None as 0
                continue
            assert mine[f"{ours_key}_diff"] == pytest.approx(
                float(row[f"{theirs} diff"]), rel=1e-6, abs=1e-12
            )
        for ours_key, theirs in (("max", "Max"), ("mean", "Mean"), ("norm", "Norm")):
            value = row[f"{theirs}RelativeErr"]
            if mine[f"golden_{ours_key}"] is None:
                assert value in ("0", "N/A", "None", "")
                continue
            assert mine[f"{ours_key}_rel_diff"] == pytest.approx(_percent(value), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_reference_passes_and_names_are_msprobe_names(reference: Path, task: str) -> None:
    task_dir = reference / CASE / task
    cmp = open_comparison(task_dir / "golden", task_dir / "test")
    assert cmp.golden.format == "msprobe" and cmp.golden.statistics_only is (task == "statistics")
    assert cmp.pairing.tokens == _dumped_calls(task_dir)  # token k is call k, every one of them
    assert len(cmp.pairing.tokens) >= 2  # so that "call k is token k" is tested beyond the first
    assert cmp.engine.first_failing_token() is None
    last = cmp.pairing.tokens[-1]
    names = {n.golden for n in cmp.pairing.node_pairs(last)}
    assert f"Module.model.layers.1.self_attn.o_proj.Linear.forward.{last}" in names
    assert cmp.golden.tree.nodes[f"Module.model.layers.1.self_attn.o_proj.Linear.forward.{last}"].parent == (
        f"Module.model.layers.1.self_attn.LlamaAttention.forward.{last}"
    )
