"""Replay on real msprobe L1 dumps (weights are arguments of ``Functional.linear``): the faulty
operator disagrees with its own inputs on the test side only, everything else is consistent with
its inputs on both sides, and what cannot be replayed says why. Then ``report --replay`` and the
registry's plug-ins (tui-acc.toml, entry points; a broken one is named, not a crash)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.dumps.msprobe.passes import api_of
from tui_acc.replay import registry as registry_module
from tui_acc.replay.registry import Registry, RegistryError
from tui_acc.session import CompareOptions, open_comparison
from tui_acc.verdicts.replay_check import UnknownNode, replay_node

CASE = "llama-msprobe-L1"


@pytest.fixture(scope="module")
def l1(model_case):
    folder = model_case(CASE)
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    return folder, case, open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))


def _records(cmp, token: int, api: str) -> list[str]:
    return [p.golden for p in cmp.pairing.node_pairs(token) if api_of(p.golden) == api]


def test_the_faulty_linear_disagrees_with_its_inputs_on_the_test_side_only(l1) -> None:
    _, case, cmp = l1
    replay = replay_node(cmp, case["fault_token"], case["fault_record"])
    assert (replay.golden.verdict, replay.test.verdict) == ("consistent", "disagrees")
    assert replay.finding == "operator" and replay.reading == "the operator itself disagrees with its inputs"
    assert (replay.golden.dtype, replay.test.dtype) == (case["golden_dtype"], case["test_dtype"])
    assert replay.test.metrics["rel_euclidean"] > replay.test.tolerance  # the verdict's own rule
    assert replay.test.reference == "built-in Functional.linear"


def test_the_operator_after_the_fault_is_consistent_with_its_inputs(l1) -> None:
    _, case, cmp = l1
    token = case["fault_token"]
    names = [p.golden for p in cmp.pairing.node_pairs(token)]
    after = next(n for n in names[names.index(case["fault_record"]) + 1 :] if api_of(n) == "Tensor.__add__")
    replay = replay_node(cmp, token, after)  # the residual add that takes the faulty output in
    assert (replay.golden.verdict, replay.test.verdict) == ("consistent", "consistent")
    assert replay.reading == "consistent with its inputs; the difference came in with them"


@pytest.mark.parametrize(
    "api",
    [
        "Functional.linear",
        "Torch.matmul",
        "Functional.silu",
        "Functional.softmax",
        "Tensor.__add__",
        "Tensor.__mul__",
        "Functional.embedding",
        "Tensor.pow",
        "Tensor.mean",
        "Torch.rsqrt",
        "Functional.dropout",
        "Tensor.cos",
        "Tensor.sin",
    ],
)
def test_every_record_of_a_supported_api_is_consistent_on_both_sides_but_the_fault(l1, api) -> None:
    _, case, cmp = l1
    token = case["fault_token"]
    records = _records(cmp, token, api)
    assert records, f"the fixture has no {api} at token {token}"
    for name in records:
        replay = replay_node(cmp, token, name)
        expected = "disagrees" if name == case["fault_record"] else "consistent"
        assert replay.golden.verdict == "consistent", (name, replay.golden.reason)
        assert replay.test.verdict == expected, (name, replay.test.reason)


def test_a_type_without_a_reference_is_impossible_and_says_so(l1) -> None:
    _, case, cmp = l1
    (name, *_) = _records(cmp, case["fault_token"], "Tensor.__le__")
    replay = replay_node(cmp, case["fault_token"], name)
    assert replay.golden.verdict == replay.test.verdict == "impossible"
    assert replay.test.reason.startswith("type unknown: Tensor.__le__")
    assert replay.finding == "impossible" and "replay impossible on both sides: " in replay.reading


def test_a_statistics_dump_cannot_be_replayed(model_case) -> None:
    folder = model_case("llama-msprobe-L1-statistics")
    cmp = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    (name, *_) = _records(cmp, 2, "Functional.linear")
    replay = replay_node(cmp, 2, name)
    assert replay.test.verdict == "impossible" and "statistics-only" in replay.test.reason


def test_a_node_that_is_not_paired_is_refused(l1) -> None:
    _, case, cmp = l1
    with pytest.raises(UnknownNode, match="not a paired node"):
        replay_node(cmp, case["fault_token"], "Functional.linear.999.forward")


# --- report --replay ---------------------------------------------------------------------------


def test_report_replay_json_carries_both_sides_and_exits_as_the_report_does(l1, capsys) -> None:
    folder, case, _ = l1
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    code = main([*argv, "--token", str(case["fault_token"]), "--replay", case["fault_record"]])
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert code == 1  # the comparison fails, as without --replay
    assert replay["golden"]["verdict"] == "consistent" and replay["test"]["verdict"] == "disagrees"
    assert set(replay["test"]) >= {"verdict", "reason", "metrics", "dtype", "tolerance", "reference"}
    assert set(replay["test"]["metrics"]) >= {"cosine", "max_abs_err", "rel_euclidean"}
    assert replay["finding"] == "operator"


def test_report_replay_text_and_the_analysed_token_by_default(l1, capsys) -> None:
    folder, case, _ = l1
    code = main(["report", str(folder / "golden"), str(folder / "test"), "--no-cache"])
    plain = capsys.readouterr().out
    code = main(
        [
            "report",
            str(folder / "golden"),
            str(folder / "test"),
            "--no-cache",
            "--replay",
            case["fault_record"],
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and out.startswith(plain.rstrip("\n"))  # the report, then the replay
    assert f"replay of {case['fault_record']} at token {case['fault_token']}: the operator itself" in out
    assert "test   disagrees" in out and "golden consistent" in out


def test_report_replay_of_an_unknown_node_is_a_usage_error(l1, capsys) -> None:
    folder = l1[0]
    code = main(["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--replay", "nope"])
    assert code == 2 and "--replay: 'nope' is not a paired node" in capsys.readouterr().err


# --- the registry --------------------------------------------------------------------------------

PLUGIN = """
import numpy as np

def replay_le(call):
    return np.less_equal(call.tensor(0, "input"), call.tensor(1, "other"))

def broken(call):
    raise RuntimeError("kaboom")
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "replay_plugin_for_tests.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("replay_plugin_for_tests", None)


def _config(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "tui-acc.toml"
    config.write_text(body, encoding="utf-8")
    return config


def test_a_plugin_from_tui_acc_toml_replays_a_type_the_builtins_lack(l1, plugin, capsys) -> None:
    folder, case, _ = l1
    (name, *_) = _records(l1[2], case["fault_token"], "Tensor.__le__")
    config = _config(plugin, '[replay]\n"Tensor.__le__" = "replay_plugin_for_tests:replay_le"\n')
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    main([*argv, "--token", str(case["fault_token"]), "--replay", name, "--config", str(config)])
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert replay["golden"]["verdict"] == replay["test"]["verdict"] == "consistent"
    assert replay["test"]["reference"].startswith(
        "plug-in 'Tensor.__le__' = 'replay_plugin_for_tests:replay_le'"
    )


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("no_such_module_anywhere:fn", "cannot be loaded: ModuleNotFoundError"),
        ("replay_plugin_for_tests:missing", "cannot be loaded: AttributeError"),
        ("replay_plugin_for_tests:broken", "failed: RuntimeError: kaboom"),
    ],
)
def test_a_broken_plugin_is_named_in_the_reason_not_a_crash(l1, plugin, spec, said) -> None:
    _, case, cmp = l1
    registry = Registry.from_config({"Functional.linear": spec}, "my.toml")
    replay = replay_node(cmp, case["fault_token"], case["fault_record"], registry)
    for side in (replay.golden, replay.test):
        assert side.verdict == "impossible"
        assert f"plug-in 'Functional.linear' = '{spec}' (my.toml)" in side.reason and said in side.reason


def test_the_verdicts_replay_with_the_references_of_tui_acc_toml(l1, plugin, capsys) -> None:
    folder, case, _ = l1
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]

    def culprit_rule(*extra: str) -> str:
        main([*argv, *extra])
        failing = json.loads(capsys.readouterr().out)["failing"]
        return next(f["rule"] for f in failing if f["golden"] == case["fault_record"])

    assert culprit_rule() == "replay"  # the built-in linear finds it
    # the user's own linear that cannot run: the verdicts use it too, so no replay judges the culprit
    config = _config(plugin, '[replay]\n"Functional.linear" = "replay_plugin_for_tests:broken"\n')
    assert culprit_rule("--config", str(config)) != "replay"


def test_a_malformed_replay_table_is_a_usage_error_naming_the_file(l1, tmp_path, capsys) -> None:
    folder, case, _ = l1
    config = _config(tmp_path, '[replay]\n"Functional.linear" = "no_colon_here"\n')
    dumps = [str(folder / "golden"), str(folder / "test")]
    code = main(["report", *dumps, "--no-cache", "--config", str(config), "--replay", case["fault_record"]])
    err = capsys.readouterr().err
    assert code == 2 and str(config) in err and 'expected "module:function"' in err
    with pytest.raises(RegistryError):
        Registry.from_config(["not", "a", "table"])


def test_an_entry_point_plugin_is_used_and_toml_wins_over_it(l1, plugin, monkeypatch) -> None:
    _, case, cmp = l1
    (name, *_) = _records(cmp, case["fault_token"], "Tensor.__le__")
    point = EntryPoint(
        "Tensor.__le__", "replay_plugin_for_tests:replay_le", registry_module.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        registry_module,
        "_entry_points",
        lambda: [registry_module.Entry(point.name, "entry point", point.value)],
    )
    replay = replay_node(cmp, case["fault_token"], name, Registry())
    assert replay.test.verdict == "consistent" and replay.test.reference.endswith("(entry point)")
    toml = Registry.from_config({"Tensor.__le__": "replay_plugin_for_tests:broken"}, "mine.toml")
    assert "mine.toml" in replay_node(cmp, case["fault_token"], name, toml).test.reason


def test_entry_points_are_read_from_the_installed_distributions(monkeypatch) -> None:
    from importlib import metadata

    point = EntryPoint("MyOp", "pkg.mod:fn", registry_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points", lambda group: [point] if group == "tui_acc.replay" else [])
    entry = Registry().find("MyOp")
    assert entry is not None and entry.spec == "pkg.mod:fn" and entry.origin.startswith("entry point")


def test_mix_level_module_records_replay_with_their_parameters(model_case) -> None:
    """msprobe mix: a module's record carries its parameters (``parameters.weight``): Linear,
    LlamaRMSNorm (eps assumed, and said) and Embedding replay as modules."""
    folder = model_case("llama-msprobe-mix")
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    cmp = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    token = case["fault_token"]
    faulty = f"Module.{case['fault_module']}.Linear.forward.{token}"
    modules = [
        p.golden
        for p in cmp.pairing.node_pairs(token)
        if p.golden.startswith("Module.") and p.golden_type in ("Linear", "LlamaRMSNorm", "Embedding")
    ]
    assert faulty in modules and {cmp.golden.tree.nodes[m].type for m in modules} == {
        "Linear",
        "LlamaRMSNorm",
        "Embedding",
    }
    for name in modules:
        replay = replay_node(cmp, token, name)
        assert replay.finding == ("operator" if name == faulty else "inputs"), (name, replay.test.reason)
        if cmp.golden.tree.nodes[name].type == "LlamaRMSNorm":
            assert any("eps is a module attribute" in note for note in replay.test.notes)


def test_a_user_key_may_be_a_glob_and_wins_over_the_builtins() -> None:
    registry = Registry.from_config({"*RMSNorm": "pkg.mod:fn", "Functional.lin*": "pkg.mod:fn"})
    assert registry.find(None, "Qwen2RMSNorm").origin == "tui-acc.toml"
    assert registry.find("Functional.linear", "linear").origin == "tui-acc.toml"
    assert registry.find("Torch.matmul", "matmul").origin == "built-in"
    assert registry.find(None, "NoSuchType") is None


def test_report_replay_never_imports_torch(l1) -> None:
    """msprobe's .pt files are read by the torch-free reader; the references are numpy."""
    import subprocess

    folder, case, _ = l1
    script = (
        "import sys, io, contextlib\n"
        "from tui_acc.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(sys.argv[1:])\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    argv += ["--token", str(case["fault_token"]), "--replay", case["fault_record"]]
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == ["1", "False"]


# --- plug-ins come from the user's own config only ------------------------------------------------

CHATTY = """
import pathlib
pathlib.Path(__file__).with_name("imported.marker").write_text("imported")
print("PLUGIN MODULE SAYS HELLO")

def replay_linear(call):
    print("PLUGIN CALL SAYS HELLO")
    raise RuntimeError("declines")
"""


@pytest.fixture
def chatty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "chatty_plugin_for_tests.py").write_text(CHATTY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("chatty_plugin_for_tests", None)


def test_a_tui_acc_toml_beside_the_dumps_imports_nothing(l1, chatty, monkeypatch, capsys) -> None:
    """A ./tui-acc.toml (it may have come with the dumps) whose [replay] names a module: the module is
    never imported, a note says why and where the table belongs, stdout is the one JSON object."""
    folder, case, _ = l1
    _config(chatty, '[replay]\n"*" = "chatty_plugin_for_tests:replay_linear"\n')
    monkeypatch.chdir(chatty)
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    main([*argv, "--replay", case["fault_record"]])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["replay"]["test"]["verdict"] == "disagrees"  # the built-in ran
    assert not (chatty / "imported.marker").exists()
    assert "[replay] ignored" in captured.err and "--config" in captured.err


def test_a_plugins_prints_never_reach_the_reports_stdout(l1, chatty, capsys) -> None:
    """The same table given by --config is the user's choice: the plug-in is imported and called, and
    what it prints goes to stderr; stdout is still one JSON object."""
    folder, case, _ = l1
    config = _config(chatty, '[replay]\n"Functional.linear" = "chatty_plugin_for_tests:replay_linear"\n')
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    main([*argv, "--replay", case["fault_record"], "--config", str(config)])
    captured = capsys.readouterr()
    replay = json.loads(captured.out)["replay"]
    assert "declines" in replay["test"]["reason"] and (chatty / "imported.marker").exists()
    assert "PLUGIN MODULE SAYS HELLO" in captured.err and "PLUGIN CALL SAYS HELLO" in captured.err


# Every road to standard output a plug-in has besides print: the interpreter's own stdout object,
# descriptor 1, and a process it starts (which inherits descriptor 1)
LOUD = """
import os, sys
sys.__stdout__.write("LOUD STDOUT OBJECT\\n")
os.write(1, b"LOUD DESCRIPTOR AT IMPORT\\n")
def replay_linear(*args, **kwargs):
    os.write(1, b"LOUD DESCRIPTOR AT CALL\\n")
    os.system("echo LOUD CHILD PROCESS")
    raise RuntimeError("declines")
"""


def test_nothing_a_plugin_writes_to_descriptor_1_reaches_the_reports_stdout(l1, tmp_path: Path) -> None:
    """In a process of its own (descriptor 1 is then the report's stdout): stdout parses as the one
    JSON object, and each thing the plug-in wrote is on stderr."""
    folder, case, _ = l1
    (tmp_path / "loud_plugin_for_tests.py").write_text(LOUD, encoding="utf-8")
    config = _config(tmp_path, '[replay]\n"Functional.linear" = "loud_plugin_for_tests:replay_linear"\n')
    argv = ["report", str(folder / "golden"), str(folder / "test"), "--no-cache", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "tui_acc", *argv, "--replay", case["fault_record"], "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the fault: the report itself, not an error
    assert "declines" in json.loads(done.stdout)["replay"]["test"]["reason"]
    for said in (
        "LOUD STDOUT OBJECT",
        "LOUD DESCRIPTOR AT IMPORT",
        "LOUD DESCRIPTOR AT CALL",
        "LOUD CHILD PROCESS",
    ):
        assert said in done.stderr, said
