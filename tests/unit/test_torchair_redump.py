"""Re-dumps of a TorchAir run: the keyword arguments of msprobe's set_ge_dump_config (the GE side:
the token's graph step as dump_token, the chosen ops as dump_layer) and set_fx_dump_config (the FX
side: op_list), and a re-dump as GE writes it pairing back to the token it was asked for.

The argument names are msprobe's (python/msprobe/pytorch/torchair_dump/torchair_dump.py), the
fixture the one of test_torchair.py."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.redump import Selection, SideSettings, build_plan, load_settings
from tui_acc.redump.select import plan_for

GE_ARGUMENTS = {"dump_path", "dump_mode", "fusion_switch_file", "dump_token", "dump_layer"}
FX_ARGUMENTS = {"dump_path", "op_list"}
NOW = datetime(2026, 11, 29, 12, 0, 0)


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _config(plan) -> dict:
    [(path, text)] = plan.files.items()
    assert plan.env["TUI_ACC_TORCHAIR_CONFIG"] == str(path)
    return json.loads(text)


def test_the_ge_side_dumps_the_tokens_graph_step_and_the_chosen_ops(llama: Path, tmp_path: Path) -> None:
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    settings = load_settings({"exec": "python infer.py"})
    plan = plan_for(comparison, settings, "test", case["token"], case["fx_node"], NOW, base_dir=tmp_path)
    config = _config(plan)
    assert plan.dumper == "torchair-ge" and plan.argv == ("python", "infer.py")
    assert set(config) <= GE_ARGUMENTS
    # the logits: the lm_head's MatMul and GE's Cast of its output, what the graph returned
    logits_ops = [case["nz_weight_of"].split("/")[1], case["inserted_cast"]]
    assert config == {
        "dump_path": str(plan.out),
        "dump_mode": "all",
        "dump_token": [case["step"]],  # graph_2's own step, not the token
        "dump_layer": [case["ge_op"].split("/")[1], *logits_ops],
    }
    assert "TUI_ACC_TORCHAIR_CONFIG" in plan.describe()


def test_the_fx_side_lists_the_fx_nodes_and_says_it_dumps_every_run(llama: Path, tmp_path: Path) -> None:
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    settings = load_settings({"exec": "python golden.py"})
    plan = plan_for(comparison, settings, "golden", case["token"], case["fx_node"], NOW, base_dir=tmp_path)
    config = _config(plan)
    assert plan.dumper == "torchair-fx" and set(config) <= FX_ARGUMENTS
    assert config["op_list"][0] == case["fx_node"].split("/")[1].split("-")[0]
    assert any("every run" in note for note in plan.notes)


def test_a_whole_graph_and_every_token_narrow_nothing() -> None:
    runs = ((0, "graph_1", 0), (1, "graph_2", 0), (2, "graph_2", 1))
    selection = Selection("test", 2, 2, ("graph_2",), runs=runs, every_token=True)
    plan = build_plan(selection, SideSettings("torchair-ge", exec="python infer.py"), Path("/tmp/x"))
    assert set(_config(plan)) == {"dump_path", "dump_mode"}
    assert any("a whole graph" in note for note in plan.notes)


def test_a_step_other_graphs_also_ran_is_said() -> None:
    runs = ((0, "graph_1", 0), (1, "graph_2", 0), (2, "graph_1", 1), (3, "graph_2", 1))
    selection = Selection("test", 3, 3, ("graph_2/MatMulV2_1",), runs=runs)
    plan = build_plan(selection, SideSettings("torchair-ge", exec="python infer.py"), Path("/tmp/x"))
    assert _config(plan)["dump_token"] == [1]
    assert any("graph_1" in note and "step 1" in note for note in plan.notes)


def test_what_ge_writes_for_that_plan_pairs_back_to_the_token(llama: Path, tmp_path: Path) -> None:
    """GE with dump_step=[1] and dump_layer=[the two ops] writes graph_2's data_index 1 folder with
    those ops' files, beside the graph texts: compared with the FX golden, it is token 2 again, and
    the faulty MatMul is local there."""
    case = _case(llama)
    base = llama / "ge-fault" / "msprobe_ge_dump"
    redump = tmp_path / "redump" / "msprobe_ge_dump"
    redump.mkdir(parents=True)
    for text in base.glob("dynamo_original_graph_*.txt"):
        shutil.copy(text, redump / text.name)
    keep = {case["ge_op"].split("/")[1], case["nz_weight_of"].split("/")[1]}
    for path in base.rglob("*"):
        folder = path.parent
        wanted = folder.name == str(case["step"]) and folder.parent.parent.name == "graph_2"
        if path.is_file() and wanted and path.name.split(".")[1] in keep:
            target = redump / path.relative_to(base)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    comparison = open_comparison(llama / "fx", tmp_path / "redump", CompareOptions(cache=False))
    assert comparison.pairing.tokens == [case["token"]]
    local = [
        (row["golden_node"], row["test_node"])
        for row in comparison.verdicts.token(case["token"]).rows
        if row["label"] == "local"
    ]
    assert local == [(case["fx_node"], case["ge_op"])]


def test_settings_accept_the_torchair_dumpers() -> None:
    settings = load_settings({"test": {"dumper": "torchair-ge"}, "golden": {"dumper": "torchair-fx"}})
    assert (settings.test.dumper, settings.golden.dumper) == ("torchair-ge", "torchair-fx")
