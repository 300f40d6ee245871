"""Conformance with msprobe's own compare CSVs (msprobe-L0 of each reference set), both tasks."""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conformance.rounding import (
    EPS32,
    EPS64,
    cosine_bound,
    fp32_rounding,
    norm_relative_bound,
    rounded_from,
)
from tui_acc import open_comparison
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor

CASE = "msprobe-L0"


def _msprobe_rows(task_dir: Path) -> list[dict[str, str]]:
    (path,) = sorted((task_dir / "compare").glob("compare_result_*.csv"))
    with path.open(newline="") as handle:
        return [r for r in csv.DictReader(handle) if r["NPU Dtype"].startswith("torch.")]


def _ours(task_dir: Path) -> dict[str, dict[str, Any]]:
    """Our tensor rows keyed the way msprobe names them (tensor kwargs read as input.X)."""
    cmp = open_comparison(task_dir / "golden", task_dir / "test")
    rows = {}
    for token in cmp.pairing.tokens:
        for row in cmp.engine.tensors_frame(token).iter_rows(named=True):
            rows[f"{row['test_node']}.{row['slot']}"] = row
    return rows


def _flat64(path: str) -> np.ndarray:
    """A tensor's values as msprobe compares them: bf16 widened, flattened, in float64."""
    return load_tensor(Path(path), ANYWHERE).astype(np.float64).reshape(-1)


def _undecided(bench: np.ndarray, npu: np.ndarray, threshold: float) -> int:
    """How many elements fp32 rounding could put on either side of ``relative error < threshold``.

    msprobe's relative error is |(n + e) - (b + e)| / |b + e| with e = eps32 only where b == 0, in fp32:
    rounding n + e (u32 |n + e|), the difference (u32 of it) and the quotient (u32 of it). Ours is
    the same quantity in float64 (2 u64 of it).
    """
    zero = bench == 0
    num = np.where(zero, npu + EPS32, npu)
    den = np.where(zero, EPS32, bench)
    rel = np.abs(num - den) / np.abs(den)
    slack = EPS32 / 2 * (np.where(zero, np.abs(num), 0.0) + np.abs(num - den)) / np.abs(den)
    slack += (EPS32 / 2 + 2 * EPS64) * rel
    return int(np.count_nonzero(np.abs(rel - threshold) <= slack))


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
        n = mine["numel"]
        # float64 on both sides (any summation order); msprobe prints 12 decimals, then rounds a
        # cosine above 0.9999 to 6
        places = 6 if float(row["Cosine"]) > 0.9999 else 12
        bound = rounded_from(places, rounded_from(12, 2 * cosine_bound(n, EPS64)))
        assert abs(mine["cosine"] - float(row["Cosine"])) <= bound, row["NPU Name"]
        # msprobe's EucDist is absolute, a float64 norm of the float64 differences, printed to 12
        # decimals; ours is the same norm, and also relative to the golden norm (two more roundings)
        dist = float(row["EucDist"])
        norm = norm_relative_bound(n, EPS64) + EPS64
        assert abs(mine["abs_euclidean"] - dist) <= rounded_from(12, 2 * norm * dist, dist), row["NPU Name"]
        relative = mine["rel_euclidean"] * mine["golden_norm"]
        assert abs(relative - dist) <= rounded_from(12, (2 * norm + 2 * EPS64) * dist, dist), row["NPU Name"]
        # the same float64 differences: their maximum is exact but for msprobe's 12 decimals
        worst = float(row["MaxAbsErr"])
        assert abs(mine["max_abs_err"] - worst) <= rounded_from(12, 0.0, worst), row["NPU Name"]
        # msprobe counts in fp32, we in float64: only an element whose relative error lies within
        # fp32 rounding of a threshold may be counted on one side and not the other
        bench = _flat64(mine["golden_path"])
        npu = _flat64(mine["test_path"])
        for ours_key, theirs, threshold in (
            ("thousandth_ratio", "One Thousandth Err Ratio", 1e-3),
            ("five_thousandths_ratio", "Five Thousandths Err Ratio", 5e-3),
        ):
            bound = rounded_from(12, _undecided(bench, npu, threshold) / n)
            assert abs(mine[ours_key] - float(row[theirs])) <= bound, (ours_key, row["NPU Name"])
        # msprobe's MaxRelativeErr: |n - b| / |b| in fp32 (2 roundings: u32 each, relative), printed
        # to 12 decimals. Where every |bench| is above our fp32-eps floor the definitions coincide
        # (msprobe adds eps where the bench is 0, and counts elements below the floor, we do not).
        if np.all(np.abs(bench) > EPS32):
            worst = float(row["MaxRelativeErr"])
            bound = rounded_from(12, (EPS32 + 2 * EPS64) * worst, worst)
            assert abs(mine["max_rel_err"] - worst) <= bound, row["NPU Name"]
            checked_rel.add(row["NPU Name"])
    # the definition was checked where it matters: every Linear output (these have no exact zeros)
    linear_outputs = {
        r["NPU Name"] for r in rows if ".Linear.forward." in r["NPU Name"] and "output" in r["NPU Name"]
    }
    assert len(linear_outputs) == 15 * len(_dumped_calls(task_dir))
    assert linear_outputs <= checked_rel


def _percent(value: str) -> float:
    return float(value.rstrip("%")) / 100 if value not in ("N/A", "inf") else math.inf


def _difference_bound(golden: float, test: float) -> float:
    """How far msprobe's ``test - golden`` of two recorded statistics may be from the exact one.

    msprobe 26.2.0's differences are not exact float64 differences of the recorded values (its
    arithmetic here is not documented), so they are held to fp32 arithmetic: each statistic rounded
    to fp32 (measured per value: nothing for the statistics of fp32 and bf16 tensors, which are fp32
    numbers) and the difference rounded once (u32 relative); our float64 difference adds u64.
    """
    if not (math.isfinite(golden) and math.isfinite(test)):
        return 0.0  # equal infinities (an attention mask's mean) differ by 0 on both sides, exactly
    diff = abs(test - golden)
    return fp32_rounding(golden) + fp32_rounding(test) + (EPS32 / 2 + EPS64 / 2) * diff


def test_statistics_compare_as_msprobe(reference: Path) -> None:
    """Same definitions (diff = test - golden, |diff / golden|), at fp32 precision or better."""
    task_dir = reference / CASE / "statistics"
    ours = _ours(task_dir)
    for row in _msprobe_rows(task_dir):
        mine = ours[_key(row["NPU Name"])]
        assert mine["stats_only"] is True
        for ours_key, theirs in (("max", "Max"), ("min", "Min"), ("mean", "Mean"), ("norm", "L2norm")):
            golden = mine[f"golden_{ours_key}"]
            if golden is None:  # integer tensors record no Mean/Norm
                assert row[f"{theirs} diff"] in ("0", "N/A", "None", "")  # msprobe writes None - None as 0
                continue
            bound = _difference_bound(golden, mine[f"test_{ours_key}"])
            assert abs(mine[f"{ours_key}_diff"] - float(row[f"{theirs} diff"])) <= bound, (
                ours_key,
                row["NPU Name"],
            )
        for ours_key, theirs in (("max", "Max"), ("mean", "Mean"), ("norm", "Norm")):
            value = row[f"{theirs}RelativeErr"]
            golden = mine[f"golden_{ours_key}"]
            if golden is None:
                assert value in ("0", "N/A", "None", "")
                continue
            # |diff / golden| * 100 printed in full, read back / 100: the difference's bound over
            # |golden|, the golden's own fp32 rounding, and four float64 roundings (/, *100, /100, ours)
            rel = mine[f"{ours_key}_rel_diff"]
            if golden == 0 or not math.isfinite(golden):  # no scale: both sides say 0, or both infinity
                assert rel == _percent(value), (ours_key, row["NPU Name"])
                continue
            bound = _difference_bound(golden, mine[f"test_{ours_key}"]) / abs(golden)
            bound += (fp32_rounding(golden) / abs(golden) + 2 * EPS64) * rel
            assert abs(rel - _percent(value)) <= bound, (ours_key, row["NPU Name"])


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
