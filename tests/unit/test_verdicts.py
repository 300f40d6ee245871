"""Thresholds by dtype, config files and rules, feeds, local/inherited labels, near ties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.config import ConfigError, load_config
from tui_acc.metrics.tensor_rows import TensorRows
from tui_acc.tolerances.thresholds import (
    Rule,
    Thresholds,
    logits_passed,
    near_tie,
    precision_class,
    tensor_passed,
)
from tui_acc.verdicts.local import LocalChecks


def test_least_precise_dtype_decides() -> None:
    assert precision_class("float32", "bfloat16") == "bfloat16"
    assert precision_class("float32", "float16") == "float16"
    assert precision_class("bfloat16", "int8") == "int8"
    assert precision_class("float32", "float32") == "float32"
    t = Thresholds()
    assert t.for_logits("float32", "bfloat16") == {"cosine": 0.999, "kl": 5e-3}
    assert t.for_logits("float32", "float16")["kl"] == 1e-4
    assert t.for_op("float32", "float32")["cosine"] == 0.999


def test_any_metric_can_be_bounded_and_rules_match_names() -> None:
    t = Thresholds(rules=(Rule("*.act_fn", {"cosine": 0.5, "max_abs_err": 0.01}),))
    row = {"golden_dtype": "float32", "test_dtype": "bfloat16", "cosine": 0.9, "max_abs_err": 0.001}
    assert not tensor_passed({**row, "golden_node": "root.mlp.down_proj"}, t)
    assert tensor_passed({**row, "golden_node": "root.mlp.act_fn"}, t)
    assert not tensor_passed({**row, "golden_node": "root.mlp.act_fn", "max_abs_err": 0.02}, t)


def test_config_files_layer_user_cwd_explicit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "xdg"
    (home / "tui-acc").mkdir(parents=True)
    (home / "tui-acc" / "tui-acc.toml").write_text(
        "[thresholds.ops]\ncosine = 0.9\n[thresholds.logits]\nkl = 0.5\n"
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "tui-acc.toml").write_text("[thresholds.ops.bfloat16]\ncosine = 0.95\n")
    explicit = tmp_path / "x.toml"
    explicit.write_text('[[rules]]\npattern = "*.lm_head"\nkl = 0.01\n[thresholds]\nnear_tie_gap = 0.2\n')
    config = load_config(explicit, cwd=cwd)
    t = config.thresholds
    assert t.for_op("float32", "float32")["cosine"] == 0.9  # user file, every dtype
    assert t.for_op("float32", "bfloat16")["cosine"] == 0.95  # ./tui-acc.toml, one dtype
    assert t.for_logits("float32", "float16")["kl"] == 0.5
    assert t.rules == (Rule("*.lm_head", {"kl": 0.01}),) and t.near_tie_gap == 0.2
    assert len(config.sources) == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[thresholds.ops]\ncosine = 'high'\n", "thresholds.ops.cosine must be a number"),
        ("[thresholds.ops]\nbeauty = 1\n", "unknown metric(s) ['beauty']"),
        ("[thresholds]\nwhatever = 1\n", "unknown keys in [thresholds]: ['whatever']"),
        ("[[rules]]\ncosine = 0.5\n", 'needs a pattern = "..."'),
        ("[thresholds\n", "not valid TOML"),
    ],
)
def test_bad_config_names_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, cwd=tmp_path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_cli_config_and_flags(demo_pair, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "strict.toml"
    config.write_text("[thresholds.logits]\ncosine = 0.9999999\n")
    assert (
        main(["report", str(demo_pair.golden), str(demo_pair.test), "--json", "--config", str(config)]) == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert report["first_failing_token"] == 0  # bf16 noise fails so strict a bound
    assert report["first_failing_token_reason"].startswith("cosine ")
    # ... and no operator adds more than bf16 explains: the drift is said so, not blamed on lm_head
    assert report["first_failing_op"] is None
    assert report["explanation"] == "accumulated rounding: no operator adds more error than bfloat16 explains"
    # another token analysed: what holds of token 0's operators is not said of it
    strict = [str(demo_pair.golden), str(demo_pair.test), "--json", "--config", str(config)]
    assert main(["report", *strict, "--token", "1"]) == 1
    assert json.loads(capsys.readouterr().out)["explanation"] is None
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--json", "--op-cos", "0.3"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["thresholds"]["ops"]["bfloat16"]["cosine"] == 0.3
    # only the modules holding the logits still fail: they are judged by the logits thresholds
    # so loose a bound passes the faulty operator's output; its error is still its own, and named
    assert {f["golden"] for f in report["failing"] if f["label"] != "local"} == {"root.lm_head"}
    assert report["counts"]["contains"] == 4  # root, root.model, the layer and its MLP hold it
    assert report["first_failing_op"]["golden"] == "root.model.layers.2.mlp.down_proj"
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds\n")
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--config", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_local_then_inherited_and_containers(demo_pair) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test)
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(demo_pair.fault_token).rows}
    assert rows[demo_pair.fault_module]["label"] == "local"
    assert rows["root.model.layers.2.mlp"]["label"] == "contains"
    assert rows["root.model.layers.2"]["label"] == "contains"
    assert rows["root.model.layers.3"]["label"] == "inherited"
    assert rows["root.lm_head"]["label"] == "inherited"
    assert [r["golden_node"] for r in rows.values() if r["label"] == "local"] == [demo_pair.fault_module]


def test_reference_pairs_raise_no_false_alarm(reference: Path) -> None:
    for case, test in (
        ("msit-torch-2layer", "test"),
        ("msit-torch-12layer-vs-atb", "test_atb"),
        ("msprobe-L0/tensor", "test"),
    ):
        cmp = open_comparison(reference / case / "golden", reference / case / test)
        assert cmp.engine.first_failing_token() is None, case
        for token in cmp.pairing.tokens:
            assert not [r for r in cmp.verdicts.token(token).rows if r["outputs_passed"] is False], (
                case,
                token,
            )


def test_inputs_not_dumped_are_judged_by_what_fed_them(atb_pair) -> None:
    golden, plain, _ = atb_pair
    cmp = open_comparison(golden, plain)
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(3).rows}
    up = rows["root.model.layers.2.mlp.up_proj"]  # the ATB child op has no intensor files
    assert up["inputs_passed"] is None
    assert up["inputs_from"] == "root.model.layers.2.mlp.act_fn" and up["inputs_effective"] is True
    first_child = rows["root.model.layers.2.input_layernorm"]
    assert first_child["inputs_from"] == "root.model.layers.2"  # fed by its parent's inputs
    after = rows["root.model.layers.3.mlp.gate_proj"]
    assert after["inputs_effective"] is False and after["label"] == "inherited"


def test_near_tie_flips_are_labelled_not_failed() -> None:
    t = Thresholds()
    base = {"golden_dtype": "float32", "test_dtype": "bfloat16", "cosine": 0.99995, "kl": 1e-6}
    tie = {**base, "golden_top1": 7, "test_top1": 9, "top1_logprob_gap": 0.02, "top1_mutual": True}
    assert logits_passed(tie, t) and near_tie(tie, t)
    assert not near_tie({**tie, "top1_logprob_gap": 2.0}, t)  # the golden clearly preferred its token
    assert not near_tie({**tie, "top1_mutual": False}, t)
    assert not near_tie({**tie, "test_top1": 7}, t)  # no flip at all


def test_in_place_inputs_are_judged_by_what_fed_them(demo_pair, in_place_copy: tuple[Path, Path]) -> None:
    cmp = open_comparison(*in_place_copy)
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(demo_pair.fault_token).rows}
    fault = rows[demo_pair.fault_module]
    assert fault["inputs_passed"] is False  # the files alone would call the fault inherited
    assert fault["in_place"] == "input_0=output (golden)"
    assert fault["inputs_from"] == "root.model.layers.2.mlp.up_proj" and fault["inputs_effective"] is True
    assert fault["label"] == "local"
    assert cmp.verdicts.culprit(demo_pair.fault_token)["golden_node"] == demo_pair.fault_module
    # an untouched op is not flagged
    assert rows["root.model.layers.2.mlp.act_fn"]["in_place"] is None


def test_the_ui_path_judges_from_memory_without_reading_or_replaying(demo_pair, monkeypatch) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    token = demo_pair.fault_token
    computed = {r["golden_node"]: (r["label"], r["rule"]) for r in cmp.verdicts.token(token).rows}

    def forbidden(*args, **kwargs):
        raise AssertionError("a UI thread read a tensor or replayed an operator")

    fresh = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))
    fresh.engine.node_rows(token)  # rows in memory, nothing judged or replayed yet
    monkeypatch.setattr(TensorRows, "compute", forbidden)  # where a pair is read and compared
    monkeypatch.setattr(LocalChecks, "replay", forbidden)
    remembered = cmp.verdicts.known(token)
    assert remembered is not None and remembered.complete
    assert {r["golden_node"]: (r["label"], r["rule"]) for r in remembered.rows} == computed
    partial = fresh.verdicts.known(token)  # judged from memory: a node needing a replay waits
    assert partial is not None and not partial.complete and partial.rows
    order = list(computed)
    waiting = next(i for i, name in enumerate(order) if partial.get(name) is None)
    leaves = [n for n in order[:waiting] if not cmp.golden.tree.children(n)]  # modules wait for finish
    assert leaves and all((partial.get(n).label, partial.get(n).rule) == computed[n] for n in leaves)
    assert cmp.verdicts.known(token + 1) is None  # nothing of it in memory
