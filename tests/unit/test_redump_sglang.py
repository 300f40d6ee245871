"""Re-dump templates for SGLang: msprobe through --msprobe-dump-config, and SGLang's own dumper."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tui_acc.redump import Selection, SideSettings, build_plan, load_settings

FOLDER = Path("/work/redumps/tui-acc-redump-test-token2-x")
SERVER = "python -m sglang.launch_server --model-path /models/llama --tp 2"
DOWN = "model.layers.1.mlp.down_proj"


def _selection(nodes: tuple[str, ...] = (DOWN, "lm_head"), step: int = 3) -> Selection:
    return Selection("test", 2, step, nodes)


class _Tags(dict[str, Any]):
    """SGLang evaluates DUMPER_FILTER over the tags, unknown ones None (dumper.py:1302-1320)."""

    def __missing__(self, key: str) -> None:
        return None


def _keeps(expression: str, name: str, **tags: Any) -> bool:
    namespace = _Tags(name=name, recompute_status="disabled", **tags)
    return bool(eval(expression, {"__builtins__": {}}, namespace))  # as SGLang evaluates it


def test_sglang_server_gets_its_msprobe_config_as_an_argument() -> None:
    plan = build_plan(_selection(), SideSettings("sglang", exec=SERVER), FOLDER)
    config = FOLDER / "msprobe_config.json"
    assert plan.argv == (*shlex.split(SERVER), "--msprobe-dump-config", str(config)) and not plan.shell
    assert json.loads(plan.files[config]) == {
        "task": "tensor",
        "dump_path": str(FOLDER / "dump"),
        "rank": [],
        "step": [3],  # the server's forward pass, not tui-acc's token number
        "level": "L0",
        "async_dump": False,
        "tensor": {
            "scope": [],
            "list": [f".{DOWN}.", ".lm_head."],
            "data_mode": ["all"],
            "file_format": "npy",
        },
    }
    assert any("step 3" in note for note in plan.notes)


def test_sglang_msprobe_records_are_listed_as_msprobe_names_them() -> None:
    nodes = ("Module.model.layers.1.mlp.down_proj.RowParallelLinear.forward.3", "Functional.linear.9.forward")
    plan = build_plan(_selection(nodes), SideSettings("sglang", exec=SERVER), FOLDER)
    config = json.loads(plan.files[FOLDER / "msprobe_config.json"])
    assert config["level"] == "mix"
    assert config["tensor"]["list"] == [
        "Module.model.layers.1.mlp.down_proj.RowParallelLinear.forward",
        "Functional.linear.9.forward",
    ]


def test_sglang_in_a_shell_gets_the_config_path_from_the_environment() -> None:
    command = 'python -m sglang.launch_server --msprobe-dump-config "$TUI_ACC_MSPROBE_CONFIG"'
    plan = build_plan(_selection(), SideSettings("sglang", exec=command, shell=True), FOLDER)
    assert plan.argv == ("/bin/sh", "-c", command)
    assert plan.env["TUI_ACC_MSPROBE_CONFIG"] == str(FOLDER / "msprobe_config.json")


def test_sglang_dumper_is_switched_on_and_narrowed_by_its_variables() -> None:
    plan = build_plan(_selection(), SideSettings("sglang-dumper", exec=SERVER), FOLDER)
    assert plan.argv == tuple(shlex.split(SERVER)) and plan.files == {}
    env = plan.env
    assert env["DUMPER_ENABLE"] == "1" and env["DUMPER_DIR"] == str(FOLDER / "dump")
    assert env["DUMPER_NON_INTRUSIVE_MODE"] == "all" and env["DUMPER_EXP_NAME"] == "tui-acc"
    keep = env["DUMPER_FILTER"]
    assert _keeps(keep, f"non_intrusive__{DOWN}.output", layer_id=1)
    assert _keeps(keep, f"non_intrusive__{DOWN}.inputs.0", layer_id=1)
    assert _keeps(keep, "non_intrusive__lm_head.output")
    assert _keeps(keep, "input_ids") and _keeps(keep, "positions", layer_id=0)  # steps align by them
    assert not _keeps(keep, "non_intrusive__model.layers.1.mlp.up_proj.output", layer_id=1)
    assert not _keeps(keep, "non_intrusive__model.layers.1.mlp.down_projection.output", layer_id=1)
    assert any("every step is dumped" in note and "step 3" in note for note in plan.notes)
    assert "export DUMPER_FILTER=" in plan.describe()


def test_sglang_dumper_keeps_an_explicit_dump_of_its_layer_only() -> None:
    plan = build_plan(
        _selection(("model.layers.1.mlp_down",)), SideSettings("sglang-dumper", exec="x"), FOLDER
    )
    keep = plan.env["DUMPER_FILTER"]
    assert _keeps(keep, "mlp_down", layer_id=1)
    assert not _keeps(keep, "mlp_down", layer_id=0) and not _keeps(keep, "mlp_down")


@pytest.mark.parametrize("nodes", [(), ("root",)])
def test_sglang_dumper_for_the_whole_step_has_no_filter(nodes: tuple[str, ...]) -> None:
    plan = build_plan(_selection(nodes), SideSettings("sglang-dumper", exec=SERVER), FOLDER)
    assert "DUMPER_FILTER" not in plan.env and plan.env["DUMPER_ENABLE"] == "1"


def test_settings_accept_both_sglang_dumpers() -> None:
    settings = load_settings({"test": {"dumper": "sglang"}, "golden": {"dumper": "sglang-dumper"}})
    assert (settings.test.dumper, settings.golden.dumper) == ("sglang", "sglang-dumper")
