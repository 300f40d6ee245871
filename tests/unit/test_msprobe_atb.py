"""msprobe's ATB statistic.csv layout (generated from the demo's ATB export: no NPU here)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from tui_acc import open_comparison
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.msprobe.atb_csv import COLUMNS
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.metrics.stats import stats_of


def _write_statistic_csv(atb_root: Path, out: Path, with_tensors: bool) -> Path:
    """One row per .bin of the export, in msprobe's 15 columns; tensors copied below atb_dump_data/."""
    device = atb_root / "tensors" / "0_4242"
    rows = []
    for file in sorted(device.rglob("*.bin")):
        token_dir = file.relative_to(device).parts[0]
        node_parts = list(file.relative_to(device / token_dir).parts[:-2])
        ids = [p.split("_", 1)[0] for p in node_parts]
        names = [p.split("_", 1)[1] for p in node_parts]
        stats = stats_of(load_tensor(file, ANYWHERE))
        io = "Input" if file.name.startswith("intensor") else "Output"
        index = file.stem.removeprefix("intensor").removeprefix("outtensor")
        tensor_path = "N/A"
        if with_tensors:
            rel = Path("atb_dump_data", "0_4242", "x", "y", token_dir, *node_parts, file.name)
            target = out / Path(*rel.parts[4:])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file, target)
            tensor_path = f"/gone/machine/{rel}"  # absolute on the NPU host; msprobe relocates it
        rows.append(
            ["0_4242", token_dir, "/".join(names), names[-1], "/".join(ids), io, index, stats.dtype, "2",
             str(list(stats.shape or ())), stats.max, stats.min, stats.mean, stats.norm, tensor_path]
        )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with (out / "statistic.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return out


@pytest.mark.parametrize("with_tensors", [False, True])
def test_torch_against_msprobe_atb(atb_pair, tmp_path: Path, with_tensors: bool) -> None:
    golden, plain, _ = atb_pair
    dump = _write_statistic_csv(plain, tmp_path / "msprobe_atb", with_tensors)
    index = open_dump(dump)
    assert index.format == "msprobe-atb" and index.statistics_only is (not with_tensors)
    assert index.tree.nodes["3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"].type == "LinearOperation"
    cmp = open_comparison(golden, dump)
    pairs = {n.golden: n.test for n in cmp.pairing.node_pairs(3)}
    assert pairs["root.model.layers.2.mlp.down_proj"] == "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"
    assert cmp.engine.first_failing_token() == 3
    op = cmp.verdicts.culprit(3)
    assert op is not None and op["golden_node"] == "root.model.layers.2.mlp.down_proj"
    row = cmp.engine.tensor_row(cmp.pairing.logits_pair(3))
    assert row["stats_only"] is (not with_tensors)


def test_wrong_columns_are_refused(tmp_path: Path) -> None:
    (tmp_path / "statistic.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(DumpError, match=r"statistic\.csv: not msprobe's ATB statistic\.csv"):
        open_dump(tmp_path)
