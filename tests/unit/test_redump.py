"""Re-dump templates (argv and config files with the switches docs/formats.md §2.1, §2.6 and §3.1
give), settings, runner."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tests.processes import all_end
from tui_acc.redump import RedumpError, Selection, SideSettings, build_plan, load_settings, remember_exec
from tui_acc.redump.plan import new_folder
from tui_acc.redump.runner import RedumpRun
from tui_acc.redump.selection import atb_id_chain
from tui_acc.redump.settings import SettingsError

ATB_OP = "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"
FOLDER = Path("/work/redumps/tui-acc-redump-test-token3-x")


def _atb(nodes: tuple[str, ...] = (ATB_OP,), step: int = 3) -> Selection:
    return Selection("test", 3, step, nodes, atb=True)


def test_msit_atb_argv_follows_msit_llm_dump() -> None:
    plan = build_plan(_atb(step=4), SideSettings("msit-atb", exec="bash run.sh --bad"), FOLDER)
    assert plan.argv == (
        "msit", "llm", "dump", "--exec", "bash run.sh --bad", "--type", "model", "tensor",
        "-er", "4,4", "-ids", "3_3_3", "-child", "True", "-stp", "2", "-o", str(FOLDER / "dump"),
    )  # fmt: skip
    assert plan.files == {} and not plan.shell and plan.out == FOLDER / "dump"
    assert plan.command_line().startswith(
        "msit llm dump --exec 'bash run.sh --bad' --type model tensor -er 4,4"
    )
    whole = build_plan(_atb(nodes=()), SideSettings("msit-atb", exec="x"), FOLDER)
    assert "-ids" not in whole.argv  # the whole token


def test_atb_id_chains() -> None:
    assert atb_id_chain("3_LlamaLayer/1_Attention/0_LinearOperation") == "3_1_0"
    assert atb_id_chain("14_LmHead") == "14"
    assert atb_id_chain("root.model.layers.2") is None


def test_msprobe_atb_writes_its_config_and_points_the_variable_at_it() -> None:
    plan = build_plan(_atb(), SideSettings("msprobe-atb", exec="python serve.py --n 1"), FOLDER)
    assert plan.argv == ("python", "serve.py", "--n", "1")  # no shell
    config = FOLDER / "atb_dump_config.json"
    assert plan.env["ATB_DUMP_CONFIG"] == str(config)
    # the probe writes below ATB_OUTPUT_DIR (msprobe atb_probe.cpp:247); a config has no dump path
    assert plan.env["ATB_OUTPUT_DIR"] == str(FOLDER / "dump")
    # exactly the keys SetConfigParameters reads (atb_probe.cpp:1149-1158)
    assert json.loads(plan.files[config]) == {
        "task": "tensor",
        "dump_enable": True,
        "exec_range": "3,3",
        "ids": "3_3_3",
        "op_name": "",
        "save_child": True,
        "device": "",
        "filter_level": 0,
    }
    assert any("load_atb_probe.sh" in note for note in plan.notes)


def test_msprobe_torch_config_is_a_precision_debugger_config() -> None:
    selection = Selection("test", 2, 2, ("Module.model.layers.1.mlp.MLP.forward.2",))
    plan = build_plan(selection, SideSettings("msprobe-torch", exec="python gen.py"), FOLDER)
    config = json.loads(plan.files[FOLDER / "msprobe_config.json"])
    assert (
        config["task"] == "tensor" and config["level"] == "L0" and config["dump_path"] == str(FOLDER / "dump")
    )
    assert config["tensor"]["list"] == ["Module.model.layers.1.mlp.MLP.forward"]
    assert plan.env["TUI_ACC_MSPROBE_CONFIG"] == str(FOLDER / "msprobe_config.json")
    assert plan.env["TUI_ACC_TOKEN"] == "2"


@pytest.mark.parametrize(
    ("nodes", "level"),
    [
        (("Functional.linear.43.forward",), "L1"),
        (("Module.model.layers.1.mlp.down_proj.Linear.forward.2", "Functional.linear.43.forward"), "mix"),
    ],
)
def test_msprobe_torch_redump_of_api_calls_dumps_at_their_level(nodes: tuple[str, ...], level: str) -> None:
    plan = build_plan(
        Selection("test", 2, 2, nodes), SideSettings("msprobe-torch", exec="python gen.py"), FOLDER
    )
    config = json.loads(plan.files[FOLDER / "msprobe_config.json"])
    assert config["level"] == level
    assert "Functional.linear.43.forward" in config["tensor"]["list"]  # msprobe matches it by substring


def test_msprobe_torch_redump_of_saves_is_level_debug_without_a_list() -> None:
    selection = Selection("test", 2, 2, ("mlp1.0.debug", "layer1.0.debug"))
    plan = build_plan(selection, SideSettings("msprobe-torch", exec="python gen.py"), FOLDER)
    config = json.loads(plan.files[FOLDER / "msprobe_config.json"])
    assert config["level"] == "debug" and config["tensor"]["list"] == []


def test_torch_side_gets_token_modules_and_folder_in_the_environment() -> None:
    selection = Selection("golden", 3, 3, ("root.model.layers.2.mlp", "root.lm_head"))
    plan = build_plan(selection, SideSettings("torch", exec="python run.py --cpu"), FOLDER)
    assert plan.argv == ("python", "run.py", "--cpu")
    assert plan.env["TUI_ACC_TOKEN"] == "3"
    assert plan.env["TUI_ACC_MODULES"] == "root.model.layers.2.mlp*,root.lm_head*"
    assert plan.env["TUI_ACC_DUMP_DIR"] == str(FOLDER / "dump")
    assert "export TUI_ACC_MODULES='root.model.layers.2.mlp*,root.lm_head*'" in plan.describe()


def test_custom_templates_fill_placeholders_as_whole_arguments() -> None:
    settings = SideSettings("custom", command=("dumper", "--token={token}", "--ids", "{ids}", "{out}"))
    plan = build_plan(_atb(), settings, FOLDER)
    assert plan.argv == ("dumper", "--token=3", "--ids", "3_3_3", str(FOLDER / "dump"))
    with pytest.raises(RedumpError, match="unknown placeholder 'tokn'"):
        build_plan(_atb(), SideSettings("custom", command=("x", "{tokn}")), FOLDER)


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("{token.nosuchattr}", "unknown placeholder 'token.nosuchattr'"),
        ("{token[0]}", "unknown placeholder 'token[0]'"),
        ("{token:>999999999999}", "takes no format spec"),
        ("{token!r}", "takes no format spec or conversion"),
        ("{token", "expected '}'"),
    ],
)
def test_a_template_placeholder_is_a_name_alone(item: str, said: str) -> None:
    """Attribute and index access, format specs (a width of 10^12 builds that argument) and
    conversions are refused by name before anything is formatted."""
    with pytest.raises(RedumpError, match=re.escape(said)):
        build_plan(_atb(), SideSettings("custom", command=("x", item)), FOLDER)


def test_a_shell_template_never_gets_dump_contents_interpolated() -> None:
    shell = SideSettings("custom", command='run.sh --ids "$TUI_ACC_IDS"', shell=True)
    plan = build_plan(_atb(), shell, FOLDER)
    assert (
        plan.argv == ("/bin/sh", "-c", 'run.sh --ids "$TUI_ACC_IDS"') and plan.env["TUI_ACC_IDS"] == "3_3_3"
    )
    with pytest.raises(RedumpError, match=r'write "\$TUI_ACC_IDS" instead of \{ids\}'):
        build_plan(_atb(), SideSettings("custom", command="run.sh {ids}", shell=True), FOLDER)
    evil = Selection("test", 3, 3, ("layers.0; rm -rf ~",))
    with pytest.raises(RedumpError, match="characters tui-acc does not pass"):
        build_plan(evil, SideSettings("torch", exec="python run.py"), FOLDER)
    option = Selection("test", 3, 3, ("--output=/etc/passwd",))  # a name read as the dumper's option
    with pytest.raises(RedumpError, match="characters tui-acc does not pass"):
        build_plan(option, SideSettings("custom", command=("dump", "{layers}")), FOLDER)


def test_new_folders_are_fresh_and_never_inside_the_dumps(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    (dumps / "test").mkdir(parents=True)
    selection = Selection("test", 3, 3)
    now = datetime(2026, 11, 22, 3, 0, 0)
    first = new_folder(tmp_path, selection, now, [dumps / "test"])
    assert first == tmp_path / "redump-test-token3-20261122-030000"
    first.mkdir()
    assert new_folder(tmp_path, selection, now, [dumps / "test"]).name.endswith("-2")
    with pytest.raises(RedumpError, match="never written inside the dumps"):
        new_folder(dumps / "test" / "sub", selection, now, [dumps / "test"])


def test_settings_are_validated_with_the_file_named() -> None:
    settings = load_settings({"exec": "bash a.sh", "test": {"dumper": "msprobe-atb"}, "out_dir": "~/r"})
    assert (
        settings.test == SideSettings("msprobe-atb", "bash a.sh", chosen=True)
        and settings.golden.dumper == "torch"
    )
    assert settings.out_dir == Path("~/r").expanduser()
    with pytest.raises(SettingsError, match=r"x.toml: redump.test.dumper = 'msit'; expected one of"):
        load_settings({"test": {"dumper": "msit"}}, "x.toml")
    with pytest.raises(SettingsError, match="command must be a list of strings"):
        load_settings({"golden": {"dumper": "custom", "command": "run {out}"}}, "x.toml")


def test_a_typed_command_is_remembered_without_touching_the_rest(tmp_path: Path) -> None:
    config = tmp_path / "tui-acc.toml"
    config.write_text('# mine\n[thresholds.ops]\ncosine = 0.99  # keep\n\n[redump.test]\ndumper = "torch"\n')
    remember_exec(config, "test", 'python run.py --prompt "bad case"')
    remember_exec(config, "golden", "python cpu.py")
    text = config.read_text()
    assert text.startswith("# mine\n[thresholds.ops]\ncosine = 0.99  # keep\n")
    from tui_acc.config import load_config

    sections = load_config(config).sections["redump"]
    assert sections["test"] == {"dumper": "torch", "exec": 'python run.py --prompt "bad case"'}
    assert sections["golden"] == {"exec": "python cpu.py"}
    remember_exec(config, "test", "python run2.py")  # replaced, not added twice
    assert load_config(config).sections["redump"]["test"]["exec"] == "python run2.py"


def _script_plan(tmp_path: Path, code: str) -> object:
    settings = SideSettings("custom", command=(sys.executable, "-c", code))
    return build_plan(Selection("test", 0, 0), settings, tmp_path / "run")


def test_runner_streams_lines_and_reports_the_exit_status(tmp_path: Path) -> None:
    lines: list[str] = []
    run = RedumpRun(
        _script_plan(tmp_path, "print('one'); print('two', flush=True); raise SystemExit(4)"),
        on_line=lines.append,
    )  # type: ignore[arg-type]
    run.start()
    assert run.wait(60)
    assert run.status == "failed" and run.returncode == 4
    assert lines[-2:] == ["one", "two"] and lines[0].startswith("$ ")
    assert (tmp_path / "run" / "redump.log").read_text().endswith("one\ntwo\n")


def test_wait_for_line_sees_a_line_after_on_line_and_gives_up_when_the_run_ends(tmp_path: Path) -> None:
    handed: list[str] = []
    run = RedumpRun(
        _script_plan(tmp_path, "print('one', flush=True); raise SystemExit(1)"), on_line=handed.append
    )  # type: ignore[arg-type]
    run.start()
    assert run.wait_for_line(lambda line: line == "one", 60)
    assert "one" in handed  # on_line had it before the waiter was told
    assert not run.wait_for_line(lambda line: line == "never printed", 60)  # returns when the run ends
    assert run.status == "failed"


def test_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    # the dumper starts a child of its own (as msit's LD_PRELOADed run does) and both must stop
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "print(child.pid, flush=True); time.sleep(600)"
    )
    import threading

    pids: list[int] = []
    seen = threading.Event()

    def on_line(line: str) -> None:
        if line.strip().isdigit():
            pids.append(int(line))
            seen.set()

    run = RedumpRun(_script_plan(tmp_path, code), on_line=on_line)  # type: ignore[arg-type]
    run.start()
    assert seen.wait(60), "the dumper never started its child"
    child = pids[0]
    members = _live_members(run.pid)  # type: ignore[arg-type]
    assert {run.pid, child} <= set(members)
    # pidfds: each becomes readable when its process ends (SIGKILL is sent, not yet delivered, when
    # stop returns), so the test waits for the deaths themselves, not for an amount of time
    with contextlib.ExitStack() as fds:
        endings = [os.pidfd_open(pid) for pid in members]
        for fd in endings:
            fds.callback(os.close, fd)
        run.stop(grace=5)
        assert run.wait(60) and run.status == "cancelled"
        assert all_end(endings, timeout=60), "a process of the re-dump's group outlived the stop"
    assert _live_members(run.pid) == []  # type: ignore[arg-type]


def test_stop_kills_a_dumper_that_ignores_sigterm_after_the_grace_and_leaves_a_detached_one(
    tmp_path: Path,
) -> None:
    import signal

    deaf = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('deaf', flush=True); time.sleep(600)"
    )
    run = RedumpRun(_script_plan(tmp_path / "deaf", deaf))  # type: ignore[arg-type]
    run.start()
    assert run.wait_for_line(lambda line: line == "deaf", 60), run.lines  # SIGTERM is ignored from now on
    run.stop(grace=0)  # no time to end after SIGTERM: SIGKILL follows
    assert run.wait(60) and run.status == "cancelled" and run.returncode == -signal.SIGKILL

    quiet = "import time; print('up', flush=True); time.sleep(600)"
    left = RedumpRun(_script_plan(tmp_path / "left", quiet))  # type: ignore[arg-type]
    left.start()
    assert left.wait_for_line(lambda line: line == "up", 60), left.lines
    left.detach()
    left.stop(grace=0)  # quitting, a signal or exit after "detach": the run is the user's now
    assert left.status == "detached" and left._process is not None and left._process.poll() is None
    left._process.kill()
    left._process.wait()


def _live_members(group: int) -> list[int]:
    """Processes of process group ``group`` that still run (zombies waiting for a reaper are not)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone while we looked
        state, pgid = fields[0], int(fields[2])
        if pgid == group and state not in ("Z", "X"):
            live.append(int(stat.parent.name))
    return live


def test_report_prints_the_redump_command_for_the_first_failing_op(
    demo_pair, tmp_path: Path, capsys, monkeypatch
) -> None:
    from tui_acc.cli.main import main

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "tui-acc.toml"
    config.write_text('[redump.test]\ndumper = "torch"\nexec = "python run_npu.py --case 7"\n')
    argv = ["report", str(demo_pair.golden), str(demo_pair.test), "--redump-command"]
    assert main([*argv, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "# re-dump test, token 3, dumper torch" in out
    assert "export TUI_ACC_TOKEN=3" in out
    assert f"export TUI_ACC_MODULES='{demo_pair.fault_module}*,root.lm_head*'" in out
    assert out.rstrip().endswith("python run_npu.py --case 7")
    assert not list(tmp_path.glob("tui-acc-runs"))  # printing writes nothing
    assert main([*argv, "--config", str(config), "--redump-node", "all", "--token", "5"]) == 0
    whole = capsys.readouterr().out
    assert "export TUI_ACC_TOKEN=5" in whole and "export TUI_ACC_MODULES" not in whole  # every module
    assert main([*argv, "--redump-side", "golden", "--config", str(config)]) == 2
    assert "no inference command for the golden side" in capsys.readouterr().err


def test_msit_atb_command_for_an_atb_dump_uses_op_ids_and_the_folder_number(atb_pair, tmp_path: Path) -> None:
    from tui_acc import open_comparison
    from tui_acc.redump.select import plan_for

    golden, _plain, mindie = atb_pair
    cmp = open_comparison(golden, mindie)
    settings = load_settings({"test": {"dumper": "msit-atb", "exec": "bash run.sh"}})
    plan = plan_for(
        cmp, settings, "test", 3, "root.model.layers.2.mlp.down_proj", datetime(2026, 1, 1), tmp_path
    )
    argv = list(plan.argv)
    assert argv[argv.index("-er") + 1] == f"{cmp.test.exec_counts[3]},{cmp.test.exec_counts[3]}"
    node = next(n for n in cmp.pairing.node_pairs(3) if n.golden == "root.model.layers.2.mlp.down_proj")
    assert argv[argv.index("-ids") + 1] == atb_id_chain(node.test)


def test_mindie_tokens_map_to_the_folder_msit_numbers_them_by(atb_pair, tmp_path: Path) -> None:
    from tui_acc import open_comparison
    from tui_acc.redump.select import plan_for

    golden, _plain, mindie = atb_pair
    cmp = open_comparison(golden, mindie)
    settings = load_settings({"test": {"dumper": "msit-atb", "exec": "bash run.sh"}})
    steps = {}
    for token in (0, 1, 2):
        argv = list(plan_for(cmp, settings, "test", token, None, datetime(2026, 1, 1), tmp_path).argv)
        steps[token] = argv[argv.index("-er") + 1]
    assert steps == {0: "1,1", 1: "1,1", 2: "2,2"}  # folder 0 is the warm-up; 1 holds tokens 0 and 1


def test_without_a_named_dumper_each_side_gets_the_one_that_writes_its_format(model_case, tmp_path) -> None:
    from tui_acc import CompareOptions, open_comparison
    from tui_acc.redump.select import plan_for

    folder = model_case("llama-msprobe-L1-statistics")
    cmp = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    when = datetime(2026, 1, 1)
    default = load_settings({"exec": "python gen.py"})
    assert plan_for(cmp, default, "test", 2, None, when, tmp_path).dumper == "msprobe-torch"
    assert plan_for(cmp, default, "golden", 2, None, when, tmp_path).dumper == "msprobe-torch"
    named = load_settings({"exec": "python gen.py", "test": {"dumper": "custom", "command": ["x", "{out}"]}})
    assert plan_for(cmp, named, "test", 2, None, when, tmp_path).dumper == "custom"  # named: kept


def test_a_config_file_that_cannot_be_written_is_an_error_not_a_crash(tmp_path: Path) -> None:
    from dataclasses import replace

    plan = _script_plan(tmp_path, "print('never')")
    unwritable = tmp_path / "run" / "missing" / "config.json"  # its folder is never made: write fails
    run = RedumpRun(replace(plan, files={unwritable: "{}"}))
    with pytest.raises(RedumpError, match="cannot write it"):
        run.start()
    assert run.status == "not started"


def test_lines_since_gives_what_was_not_seen_even_past_the_kept_window(tmp_path: Path) -> None:
    from tui_acc.redump.runner import MAX_LINES

    run = RedumpRun(_script_plan(tmp_path, "print('x')"))
    for n in range(3):
        run._line(f"line {n}")
    assert run.lines_since(0) == (["line 0", "line 1", "line 2"], 3)
    assert run.lines_since(2) == (["line 2"], 3)
    for n in range(3, MAX_LINES + 10):
        run._line(f"line {n}")
    lines, seen = run.lines_since(3)  # more came than are kept: the kept ones, oldest first
    assert seen == MAX_LINES + 10 and len(lines) == MAX_LINES and lines[-1] == f"line {MAX_LINES + 9}"
