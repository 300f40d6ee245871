"""``tui-acc hunt``: the demo's inference script as both sides' dumper, driven to the culprit.

Each hunt runs the demo model (a tiny seeded Llama) six times, a few seconds in all; the dumps are
bit-identical on every CPU, so the token and operator found are too.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.demo import FAULT_MODULE, FAULT_TOKEN, make_demo
from tui_acc.dumps.msit.torch_dump import read as read_msit_torch
from tui_acc.hunt.blocks import find_blocks
from tui_acc.redump.plan import build_plan
from tui_acc.redump.selection import Selection, parse_tokens, spell_tokens
from tui_acc.redump.settings import SideSettings

INFER = [sys.executable, "-m", "tui_acc.demo.infer"]


def _hunt(config: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code = main(["hunt", "--config", str(config), "--yes", "--no-tui", "--json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in _files(folder))


def test_the_hunt_finds_the_demo_fault_dumping_a_fraction_of_a_full_dump(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in _files(demo_pair.out)}
    code, result = _hunt(demo_pair.out / "tui-acc.toml", capsys)
    assert code == 1 and result["error"] is None
    assert result["first_failing_token"] == FAULT_TOKEN
    culprit = result["first_failing_op"]
    assert (culprit["token"], culprit["golden"], culprit["test"]) == (FAULT_TOKEN, FAULT_MODULE, FAULT_MODULE)
    assert culprit["label"] == "local"
    assert [step["step"] for step in result["steps"]] == ["logits", "blocks", "operators"]
    folder = Path(result["folder"])
    # what tui-acc makes goes under ./tui-acc-runs: nothing else written here
    assert [p.name for p in tmp_path.iterdir()] == [
        "tui-acc-runs"
    ] and folder.parent == tmp_path / "tui-acc-runs"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]
    assert {p: p.stat().st_mtime_ns for p in _files(demo_pair.out)} == before  # nor in the demo
    for number, step in enumerate(result["steps"], 1):
        for side in step["sides"]:
            assert side["status"] == "succeeded" and side["seconds"] > 0 and side["bytes"] > 0
            assert Path(side["folder"]) == folder / f"{number}-{step['step']}" / side["side"]
            assert "tui_acc.demo.infer" in side["command"] and f"--side {side['side']}" in side["command"]
            assert side["bytes"] == _size(Path(side["folder"]) / "dump")
    # each step dumped only what it asked for: the logits' outputs, then the blocks' outputs at the
    # failing token, then the failing block's subtree with inputs
    logits = _files(folder / "1-logits" / "golden" / "dump")
    # the weights of the modules asked for, as msit's dump_weight writes them (p replays with them)
    weights = {p.name for p in logits if p.parent.name == "weights"}
    assert weights == {"root.lm_head.weight.pth"}
    pth = [p for p in logits if p.suffix == ".pth" and p.parent.name != "weights"]
    assert {p.parent.name for p in pth} == {"root.lm_head"} and {p.name for p in pth} == {"output.pth"}
    assert {p.parent.parent.name for p in pth} == {str(t) for t in range(len(demo_pair.golden_ids))}
    blocks = [
        p
        for p in _files(folder / "2-blocks" / "test" / "dump")
        if p.suffix == ".pth" and p.parent.name != "weights"
    ]
    assert {p.parent.name for p in blocks} == {f"root.model.layers.{i}" for i in range(4)}
    assert {p.parent.parent.name for p in blocks} == {str(FAULT_TOKEN)}
    dumped = [p for p in _files(folder / "3-operators" / "test" / "dump") if p.suffix == ".pth"]
    operators = [p for p in dumped if p.parent.name != "weights"]
    assert {p.parent.name for p in operators} >= {"root.model.layers.2", FAULT_MODULE}
    assert all(p.parent.name.startswith("root.model.layers.2") for p in operators)
    # and the weights of that subtree only (what p replays its operators with)
    assert all(p.name.startswith("root.model.layers.2.") for p in dumped if p.parent.name == "weights")
    assert any(p.name.startswith("input_") for p in operators)
    # the goal: every step together at most a quarter of one full dump of both sides
    full = _size(demo_pair.golden) + _size(demo_pair.test)
    assert result["bytes_dumped"] * 4 <= full


def _config(tmp_path: Path, demo_out: Path, golden: list[str], test: list[str]) -> Path:
    config = tmp_path / "hunt.toml"
    lines = []
    for side, argv in (("golden", golden), ("test", test)):
        lines += [f"[redump.{side}]", 'dumper = "torch"', f"exec = {json.dumps(shlex.join(argv))}", ""]
    config.write_text("\n".join(lines), encoding="utf-8")
    return config


def test_a_failing_step_stops_the_hunt_with_its_log(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = [*INFER, "--demo", str(demo_pair.out)]
    config = _config(tmp_path, demo_pair.out, [*run, "--side", "golden"], [*run, "--side", "test", "--fail"])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main(["hunt", "--config", str(config), "--yes", "--no-tui"])
    captured = capsys.readouterr()
    assert code == 2
    assert "step 1 (logits): the test dumper failed (exit 3)" in captured.err
    assert "simulated device error" in captured.err  # the log's last lines are quoted
    (folder,) = (work / "tui-acc-runs").iterdir()
    assert (folder / "1-logits" / "test" / "redump.log").is_file()  # kept for the user
    assert not (folder / "2-blocks").exists()


def test_two_clean_runs_end_after_the_logits(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = [*INFER, "--demo", str(demo_pair.out), "--side", "golden"]
    monkeypatch.chdir(tmp_path)
    code, result = _hunt(_config(tmp_path, demo_pair.out, run, run), capsys)
    assert code == 0 and result["first_failing_token"] is None and result["first_failing_op"] is None
    assert [step["step"] for step in result["steps"]] == ["logits"]
    assert result["steps"][0]["finding"].startswith("every token's logits pass")


def test_without_yes_and_no_terminal_nothing_runs(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal: no one to ask
    code = main(["hunt", "--config", str(demo_pair.out / "tui-acc.toml"), "--no-tui"])
    captured = capsys.readouterr()
    assert code == 2 and "--yes" in captured.out and "not confirmed" in captured.err
    assert "nothing was run, nothing was written" in captured.out  # no folder is named that is not there
    assert list(tmp_path.iterdir()) == []


def test_a_dumper_that_cannot_narrow_dumps_wider_and_the_hunt_still_finds_the_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's ATB test run is a torch run re-encoded: its dumper cannot select ATB operations, and
    torch against ATB pairs by the whole token's structure, so the last step dumps whole tokens."""
    demo = make_demo(tmp_path / "demo", seed=0, layout="atb")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main(["hunt", "--config", str(demo.out / "tui-acc.toml"), "--yes", "--no-tui"])
    out = capsys.readouterr().out
    assert code == 1
    assert "the ATB layout cannot narrow to modules" in out  # the dumper says so in the live log
    assert "pairs operators by the token's whole structure" in out  # and the hunt says it dumps wider
    assert f"first failing operator: {FAULT_MODULE} (local)" in out


def test_blocks_are_the_repeated_layers(demo_pair) -> None:
    tree = read_msit_torch(demo_pair.golden).tree
    assert find_blocks(tree) == [f"root.model.layers.{i}" for i in range(4)]


def test_token_lists_round_trip() -> None:
    assert spell_tokens([3]) == "3" and spell_tokens([2, 0, 1]) == "0-2" and spell_tokens([1, 4]) == "1,4"
    assert parse_tokens("0-2,5") == [0, 1, 2, 5] and parse_tokens("") is None
    with pytest.raises(ValueError, match="TUI_ACC_TOKENS"):
        parse_tokens("3-")


def test_hunt_selections_reach_every_dumper(tmp_path: Path) -> None:
    every = Selection("test", 0, 0, ("root.lm_head",), every_token=True, subtree=False, outputs_only=True)
    torch_plan = build_plan(every, SideSettings("torch", exec="python run.py"), tmp_path / "a")
    assert torch_plan.env["TUI_ACC_TOKENS"] == "" and torch_plan.env["TUI_ACC_TOKEN"] == ""
    assert torch_plan.env["TUI_ACC_MODULES"] == "root.lm_head"  # the module itself, not a glob
    assert torch_plan.env["TUI_ACC_TENSORS"] == "outputs"
    atb = build_plan(every, SideSettings("msit-atb", exec="bash run.sh"), tmp_path / "b").argv
    assert "-er" not in atb and atb[atb.index("-stp") + 1] == "1" and atb[atb.index("-child") + 1] == "False"
    # MindIE's warm-up: token 2..4 run at execution counts 3..5
    shifted = Selection("test", 2, 3, ("2_LlamaLayer",), atb=True, tokens=(2, 3, 4))
    argv = build_plan(shifted, SideSettings("msit-atb", exec="bash run.sh"), tmp_path / "c").argv
    assert argv[argv.index("-er") + 1] == "3,5"
    probe = build_plan(shifted, SideSettings("msprobe-atb", exec="bash run.sh"), tmp_path / "f")
    blocks_only = Selection("test", 2, 3, ("2_LlamaLayer",), atb=True, tokens=(2, 3, 4), subtree=False)
    probe_blocks = build_plan(blocks_only, SideSettings("msprobe-atb", exec="bash run.sh"), tmp_path / "g")
    (probe_config,), (blocks_config,) = probe.files.values(), probe_blocks.files.values()
    assert json.loads(probe_config)["exec_range"] == "3,5" and json.loads(probe_config)["save_child"] is True
    assert json.loads(blocks_config)["save_child"] is False
    msprobe = build_plan(every, SideSettings("msprobe-torch", exec="python run.py"), tmp_path / "d")
    (config,) = msprobe.files.values()
    assert json.loads(config)["tensor"]["data_mode"] == ["output"]
    custom = SideSettings("custom", command=("python", "dump.py", "--tokens", "{tokens}", "--out", "{out}"))
    plan = build_plan(shifted, custom, tmp_path / "e")
    assert plan.argv[3] == "2-4" and any("dumps every node" in note for note in plan.notes)


def test_the_demo_refuses_too_few_layers_for_its_fault(tmp_path: Path) -> None:
    from tui_acc.demo import DemoError

    with pytest.raises(DemoError, match="at least 3 layers"):
        make_demo(tmp_path / "demo", layers=2)


def test_ctrl_c_stops_the_hunt_and_keeps_what_was_dumped(demo_pair, tmp_path: Path) -> None:
    """Ctrl-C at the second step's question: exit 130, the first step's dumps kept, said where."""
    from tui_acc.config import load_config
    from tui_acc.hunt.run import Hunt
    from tui_acc.redump import load_settings
    from tui_acc.session import CompareOptions

    config = load_config(demo_pair.out / "tui-acc.toml", cwd=tmp_path)
    settings = load_settings(config.sections.get("redump"))
    asked: list[str] = []

    def confirm(step: str, _plans: object) -> bool:
        asked.append(step)
        if step == "blocks":
            raise KeyboardInterrupt
        return True

    result = Hunt(settings, CompareOptions(cache=False), tmp_path, lambda _line: None, confirm).run()
    assert asked == ["logits", "blocks"] and result.interrupted and result.exit_code == 130
    assert result.error == f"interrupted; what was dumped stays in {result.folder}"
    assert sorted(p.name for p in result.folder.iterdir()) == ["1-logits"]
    assert result.first_failing_token == FAULT_TOKEN and result.culprit is None
