"""Real-tool dumps of other model families and msprobe levels, each localised to its fault.

tests/data/models holds dumps made by msit 8.2.0 and msprobe 26.2.0 themselves
(scripts/make_model_fixtures.py) of random-weight models built from transformers configs: golden
in float32, test in bfloat16 or float16 with one operator made faulty at token 2. ``case.json``
says which; every test reads the expectation from there.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import MODEL_CASES
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.msprobe.passes import EMBEDDING, api_of

CASES = sorted(p.name.removesuffix(".tar.xz") for p in MODEL_CASES.glob("*.tar.xz"))


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _expected_op(case: dict) -> re.Pattern[str]:
    """The record the fault is in, as the case's dumper names it."""
    if case["fault_record"]:  # inside an API call: msprobe's own record name
        return re.compile(re.escape(case["fault_record"]) + "$")
    module, token = re.escape(case["fault_module"]), case["fault_token"]
    if case["dumper"] == "msit":
        return re.compile(rf"root\.{module}$")
    return re.compile(rf"Module\.{module}\.\w+\.forward\.{token}$")


def test_every_case_is_tested():
    assert {"llama-msprobe-L1", "llama-msprobe-mix", "qwen2moe-msit", "gpt2-msit"} <= set(CASES)
    assert len(CASES) == 12


@pytest.mark.parametrize("name", CASES)
def test_the_fault_is_found(model_case, name):
    folder = model_case(name)
    case = _case(folder)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert comparison.pairing.tokens == list(range(case["new_tokens"]))
    assert not comparison.golden.problems and not comparison.test.problems
    first = comparison.engine.first_failing_token()
    assert first == case["fault_token"]
    for token in range(first):
        assert comparison.engine.token_row(token)["passed"] is True
    op = comparison.verdicts.culprit(first)
    assert op is not None and _expected_op(case).match(op["golden_node"]), op and op["golden_node"]
    assert op["label"] == "local"
    # before the fault, no operator adds error of its own, and none fails but a single value (an MoE
    # gate's one logit, judged by its value: bf16 noise through a sum that cancels), inherited
    for token in range(first):
        rows = comparison.verdicts.token(token).rows
        assert [r["golden_node"] for r in rows if r["label"] == "local"] == [], token
        failing = [r for r in rows if r["outputs_passed"] is False]
        assert all(r["shape"].endswith(", 1]") and r["label"] == "inherited" for r in failing), failing
    assert comparison.test.statistics_only is (case["task"] == "statistics")


@pytest.mark.parametrize("name", CASES)
def test_one_culprit_in_the_whole_dump(model_case, name):
    """At every token, exactly one operator is labelled local: the injected one, at its token. The
    logits module is never a second culprit, and tokens after the fault (which chose another
    token) start no error of their own."""
    folder = model_case(name)
    case = _case(folder)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    local = [
        (row["token"], row["golden_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]
    assert len(local) == 1, local
    token, name_found = local[0]
    assert token == case["fault_token"] and _expected_op(case).match(name_found), local


def test_l1_tokens_are_forward_passes(model_case):
    """Each token opens with the embedding and closes with the logits; generate()'s records are apart."""
    folder = model_case("llama-msprobe-L1")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    index = comparison.golden
    dump = json.loads(next((folder / "golden").rglob("dump.json")).read_text())["data"]
    for token, nodes in index.tokens.items():
        names = list(nodes)
        assert api_of(names[0]) == EMBEDDING, token
        assert sum(api_of(n) == EMBEDDING for n in names) == 1
        assert dump[names[-1]]["output"][0]["shape"][-1] == 256  # the logits close the pass
        assert comparison.pairing.logits_pair(token) is not None
    assert comparison.pairing.logits_node == "Functional.linear.14.forward"
    between = set(index.between_tokens)
    assert "Torch.isin.0.forward" in between and "Torch.argmax.0.forward" in between
    assert not between & {n for nodes in index.tokens.values() for n in nodes}
    assert between | {n for nodes in index.tokens.values() for n in nodes} == set(dump)
    assert any("between forward passes" in note for note in index.notes)
    # the same operator keeps its stable name at every token although msprobe's counter runs on
    assert {index.stable_name(n) for n in index.tokens[1]} == {index.stable_name(n) for n in index.tokens[2]}


def test_mix_shows_api_calls_inside_their_module(model_case):
    folder = model_case("llama-msprobe-mix")
    case = _case(folder)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    tree = comparison.golden.tree
    op = comparison.verdicts.culprit(case["fault_token"])
    assert op is not None and op["golden_node"] == case["fault_record"]
    module = tree.nodes[op["golden_node"]].parent
    assert module == f"Module.{case['fault_module']}.Linear.forward.{case['fault_token']}"
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(case["fault_token"]).rows}
    assert rows[module]["label"] == "contains"  # the module fails because the API inside it does
    assert comparison.pairing.logits_node == "Module.lm_head.Linear.forward.0"
    top_level = [n for n in tree.children(tree.root) if n in comparison.golden.tokens[0]]
    assert top_level == ["Module.model.LlamaModel.forward.0", "Module.lm_head.Linear.forward.0"]


def test_integer_tensors_are_compared_for_equality(model_case):
    """The MoE router's expert ids (int64) pass only when every id is equal."""
    folder = model_case("qwen2moe-msprobe-L0")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    rows = [
        comparison.engine.tensor_row(pair)
        for node in comparison.pairing.node_pairs(0)
        for pair in node.tensors
        if "mlp.gate" in node.golden
    ]
    ids = [r for r in rows if r["golden_dtype"] == "int64"]
    assert ids and all(r["passed"] and r["max_abs_err"] == 0 for r in ids)


def test_renumbered_calls_pair_by_kind_and_order(model_case, tmp_path):
    """One extra Tensor.__add__ on the test side shifts every later counter: msprobe's fuzzy match."""
    folder = model_case("llama-msprobe-L1")
    case = _case(folder)
    test = tmp_path / "test"
    shutil.copytree(folder / "test", test)
    dump_json = next(test.rglob("dump.json"))
    dump = json.loads(dump_json.read_text())

    def shifted(name: str) -> str:
        match = re.fullmatch(r"Tensor\.__add__\.(\d+)\.forward", name)
        return f"Tensor.__add__.{int(match.group(1)) + 1}.forward" if match else name

    dump["data"] = {shifted(k): v for k, v in dump["data"].items()}
    dump_json.write_text(json.dumps(dump))
    comparison = open_comparison(folder / "golden", test, CompareOptions(cache=False))
    assert comparison.engine.first_failing_token() == case["fault_token"]
    op = comparison.verdicts.culprit(case["fault_token"])
    assert op is not None and op["golden_node"] == case["fault_record"]
    pairs = {n.golden: n.test for n in comparison.pairing.node_pairs(case["fault_token"])}
    renamed = {g: t for g, t in pairs.items() if g != t}
    assert renamed and all(t == shifted(g) for g, t in renamed.items())
    assert not comparison.pairing.unmatched
    assert any("fuzzy match" in note for note in comparison.pairing.notes)


def test_the_call_inside_the_logits_module_is_judged_as_logits(model_case):
    """mix: lm_head's F.linear outputs the logits too; judged as logits, as its module is."""
    folder = model_case("llama-msprobe-mix")
    case = _case(folder)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    token = case["fault_token"]
    (inner,) = comparison.golden.tree.children(f"Module.lm_head.Linear.forward.{token}")
    (node,) = [n for n in comparison.pairing.node_pairs(token) if n.golden == inner]
    row = comparison.engine.tensor_row(node.outputs[0])
    assert row["kl"] is not None and row["passed"] is False
    assert comparison.engine.token_row(token)["passed"] is False


def test_l1_passes_that_never_reach_the_vocabulary_still_split_at_the_embedding(model_case, tmp_path):
    """An lm_head wider than the embedding table (padded vocabularies): the next pass still starts at
    the next embedding call, and a note says the ends were not found."""
    copies = {}
    for side in ("golden", "test"):
        copies[side] = tmp_path / side
        shutil.copytree(model_case("llama-msprobe-L1") / side, copies[side])
        dump_json = next(copies[side].rglob("dump.json"))
        dump = json.loads(dump_json.read_text())
        for entry in dump["data"].values():
            for out in entry.get("output") or []:
                if isinstance(out, dict) and (out.get("shape") or [0])[-1] == 256:
                    out["shape"][-1] = 264  # the logits are padded; the table has 256 rows
        dump_json.write_text(json.dumps(dump))
    comparison = open_comparison(copies["golden"], copies["test"], CompareOptions(cache=False))
    assert comparison.pairing.tokens == [0, 1, 2, 3]
    assert all(api_of(next(iter(nodes))) == EMBEDDING for nodes in comparison.golden.tokens.values())
    assert any("never reached an output as wide as the embedding table" in n for n in comparison.golden.notes)
