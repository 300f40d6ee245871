"""A replay said impossible says how to make it possible, once: what the dumper
that wrote the dump must be asked for, by what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import copy_without_weights
from tui_acc.cli.main import main
from tui_acc.replay.remedy import remedy
from tui_acc.session import CompareOptions, open_comparison
from tui_acc.verdicts.replay_check import replay_node


@pytest.mark.parametrize(
    ("dump_format", "reason", "said"),
    [
        ("msit-torch", "weights not dumped: this dump holds no 'weight' for root.x", "dump_weight=True"),
        ("msprobe", "weights not dumped: this dump holds no 'weight' for Module.x", "level L0 or mix"),
        ("msit-atb", "weights not dumped: LinearOperation has no intensor1 (its weight)", "-stp 2"),
        (
            "msprobe-atb",
            "weights not dumped: RmsNormOperation has no intensor1 (gamma)",
            "task tensor or all",
        ),
        ("msit-torch", "inputs missing: x (argument 0) was not dumped", "tensor_part=2"),
        ("msprobe", "inputs missing: operand 1 was neither dumped nor recorded as a number", '["all"]'),
        ("msit-atb", "inputs missing: x (argument 0) was not dumped", "-stp 2 -time 3"),
        ("msprobe", "inputs missing: a statistics-only dump holds no tensor data", 'task "tensor"'),
        (
            "msit-stats",
            "inputs missing: a statistics-only dump holds no tensor data",
            "dump_statistics_mode=0",
        ),
        ("msit-torch", "output not dumped", "tensor_part=2"),
        ("msit-atb", "type unknown: ActivationOperation without activationType in op_param.json", "op_param"),
    ],
)
def test_each_missing_thing_has_its_dumpers_switch(dump_format: str, reason: str, said: str) -> None:
    found = remedy(dump_format, reason)
    assert found is not None and said in found


@pytest.mark.parametrize(
    ("dump_format", "reason"),
    [
        ("msprobe", "type unknown: Tensor.__le__ (no reference; [replay] in tui-acc.toml adds one)"),
        ("msit-torch", "shape mismatch: [2, 3] @ [4, 5]"),
        ("msprobe", "dropout in training mode (p=0.1) is random: it cannot be replayed"),
        ("sglang", "inputs missing: x (argument 0) was not dumped"),  # SGLang's dumper: what the code saves
    ],
)
def test_nothing_to_dump_is_said_where_no_switch_helps(dump_format: str, reason: str) -> None:
    assert remedy(dump_format, reason) is None


@pytest.fixture(scope="module")
def without_weights(demo_pair, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo as msit dumps by default: no weights/."""
    return copy_without_weights(demo_pair, tmp_path_factory.mktemp("no-weights"))


def test_the_demo_without_weights_says_the_reason_and_the_remedy_once(demo_pair, without_weights) -> None:
    cmp = open_comparison(*without_weights, CompareOptions(cache=False))
    replay = replay_node(cmp, demo_pair.fault_token, demo_pair.fault_module)
    assert replay.shared_reason and replay.remedies() == [("both", replay.golden.remedy)]
    text = "\n".join(replay.describe())
    assert text.count("weights not dumped") == 1
    assert text.count("dump_weight=True") == 1 and "  to replay it: msit: DumpConfig(" in text
    assert replay.as_dict()["test"]["remedy"] == replay.test.remedy is not None


def test_two_sides_missing_different_things_each_say_their_own_once(atb_pair, without_weights) -> None:
    _, atb, _ = atb_pair
    cmp = open_comparison(without_weights[0], atb, CompareOptions(cache=False))
    replay = replay_node(cmp, 3, "root.model.layers.2.mlp.down_proj")
    assert (replay.golden.verdict, replay.test.verdict) == ("impossible", "impossible")
    text = "\n".join(replay.describe())
    for side in (replay.golden, replay.test):
        assert text.count(side.reason) == 1, side.reason
    assert "to replay it (golden): msit: DumpConfig(..., dump_weight=True)" in text
    assert "to replay it (test): msit llm dump -stp 2 -time 3" in text
    assert "weights not dumped" in replay.reading  # the status line's reading keeps both reasons


def test_report_replay_carries_the_remedy_in_json(demo_pair, without_weights, capsys) -> None:
    argv = ["report", *map(str, without_weights), "--no-cache", "--json"]
    assert main([*argv, "--token", "3", "--replay", demo_pair.fault_module]) == 1
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert "dump_weight=True" in replay["golden"]["remedy"] and replay["finding"] == "impossible"
