"""The vllm-ascend re-dump template: msprobe's config inside ``--additional-config``, as vllm-ascend reads it.

vllm-ascend takes ``{"dump_config": {...}}`` from ``--additional-config`` (vllm_ascend/ascend_config.py:
462-478) and gives it to msprobe's PrecisionDebugger in eager runs, to its AclGraphDumper in graph
mode (vllm_ascend/worker/model_runner_v1.py:347-365).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui_acc.redump import RedumpError, Selection, SideSettings, build_plan, load_settings
from tui_acc.redump.settings import SettingsError

FOLDER = Path("/work/redumps/tui-acc-redump-test-token2-x")
SERVE = "vllm serve /models/qwen --dtype bfloat16 --port 8000"
GRAPH_NODES = ("Aten.mm.43.forward", "Aten.mm.44.forward")  # the fault and the logits: one keyword
MODULE = "Module.model.layers.1.mlp.down_proj.Linear.forward.2"


def _dump_config(argv: tuple[str, ...]) -> dict:
    at = argv.index("--additional-config")
    assert argv.count("--additional-config") == 1
    return json.loads(argv[at + 1])["dump_config"]


def test_graph_mode_narrows_the_operators_and_passes_json_as_one_argument() -> None:
    plan = build_plan(Selection("test", 2, 2, GRAPH_NODES), SideSettings("vllm-ascend", exec=SERVE), FOLDER)
    assert plan.argv[:7] == ("vllm", "serve", "/models/qwen", "--dtype", "bfloat16", "--port", "8000")
    assert len(plan.argv) == 9 and not plan.shell  # the JSON is one argv item, no shell
    config = _dump_config(plan.argv)
    # AclGraphDumper's keys only (aclgraph_dumper.py:212-234): no step, no request_id
    assert config == {
        "task": "tensor",
        "dump_path": str(FOLDER / "dump"),
        "rank": [],
        "level": "L1",
        "tensor": {"list": ["Aten.mm"]},
    }
    assert any("every replay" in note for note in plan.notes)
    assert json.loads(plan.env["TUI_ACC_ADDITIONAL_CONFIG"])["dump_config"] == config


def test_graph_mode_selects_a_module_by_its_path() -> None:
    plan = build_plan(
        Selection("test", 2, 2, (MODULE, "Module.lm_head.Linear.forward.2")),
        SideSettings("vllm-ascend", exec=SERVE),
        FOLDER,
    )
    config = _dump_config(plan.argv)
    assert config["level"] == "L0"
    assert config["tensor"]["list"] == ["model.layers.1.mlp.down_proj", "lm_head"]


def test_eager_runs_dump_the_step_and_the_request() -> None:
    settings = SideSettings("vllm-ascend", exec=SERVE + " --enforce-eager", request_id="chatcmpl-req-0")
    plan = build_plan(Selection("test", 2, 5, (MODULE, "Aten.mm.43.forward")), settings, FOLDER)
    config = _dump_config(plan.argv)
    assert config["step"] == [5]  # the step the dumper numbers the token by
    assert config["level"] == "mix"
    assert config["tensor"]["list"] == [
        "Module.model.layers.1.mlp.down_proj.Linear.forward",
        "Aten.mm.43.forward",
    ]
    assert config["tensor"]["request_id"] == "chatcmpl-req-0"
    assert not any("every replay" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("exec_", "shell"),
    [
        (SERVE + " --enforce-eager", True),  # a shell string: still read word by word
        (SERVE + " --enforce-eager=true", False),
        (SERVE + """ --compilation-config '{"cudagraph_mode": "NONE"}'""", False),
        (SERVE + """ -O '{"cudagraph_mode":"NONE"}'""", True),
    ],
)
def test_every_way_of_running_eagerly_gets_the_eager_config(exec_: str, shell: bool) -> None:
    settings = SideSettings("vllm-ascend", exec=exec_, shell=shell, request_id="r-1")
    plan = build_plan(Selection("test", 2, 5, (MODULE,)), settings, FOLDER)
    config = json.loads(plan.env["TUI_ACC_ADDITIONAL_CONFIG"])["dump_config"]
    assert config["step"] == [5] and config["tensor"]["request_id"] == "r-1"
    graph = build_plan(Selection("test", 2, 5, (MODULE,)), SideSettings("vllm-ascend", exec=SERVE), FOLDER)
    assert "step" not in json.loads(graph.env["TUI_ACC_ADDITIONAL_CONFIG"])["dump_config"]


def test_an_existing_additional_config_is_kept_and_its_config_path_replaced() -> None:
    existing = json.dumps({"dump_config_path": "/old.json", "enable_shared_expert_dp": True})
    for exec_ in (
        f"{SERVE} --additional-config '{existing}' --seed 1",
        f"{SERVE} --additional-config='{existing}'",
    ):
        plan = build_plan(
            Selection("test", 2, 2, GRAPH_NODES), SideSettings("vllm-ascend", exec=exec_), FOLDER
        )
        at = plan.argv.index("--additional-config")
        merged = json.loads(plan.argv[at + 1])
        assert merged["enable_shared_expert_dp"] is True and "dump_config_path" not in merged
        assert merged["dump_config"]["tensor"]["list"] == ["Aten.mm"]
        assert plan.argv[at + 2 :] == (("--seed", "1") if "--seed" in exec_ else ())


def test_a_broken_additional_config_is_refused() -> None:
    with pytest.raises(RedumpError, match="not JSON"):
        build_plan(
            Selection("test", 2, 2, GRAPH_NODES),
            SideSettings("vllm-ascend", exec=SERVE + " --additional-config '{oops'"),
            FOLDER,
        )


def test_a_shell_command_gets_the_json_from_the_environment_only() -> None:
    settings = SideSettings("vllm-ascend", exec='vllm serve m --additional-config "$X"', shell=True)
    plan = build_plan(Selection("test", 2, 2, GRAPH_NODES), settings, FOLDER)
    assert plan.argv == ("/bin/sh", "-c", 'vllm serve m --additional-config "$X"')  # untouched
    assert "Aten.mm" in plan.env["TUI_ACC_ADDITIONAL_CONFIG"]
    assert any("TUI_ACC_ADDITIONAL_CONFIG" in note for note in plan.notes)


def test_settings_accept_the_dumper_and_check_request_id() -> None:
    settings = load_settings({"test": {"dumper": "vllm-ascend", "exec": SERVE, "request_id": "r-1"}})
    assert settings.test.dumper == "vllm-ascend" and settings.test.request_id == "r-1"
    with pytest.raises(SettingsError, match="request_id"):
        load_settings({"test": {"dumper": "vllm-ascend", "request_id": 3}})
