"""msprobe's call stream cut into forward passes, and the inputs a module gets as keyword arguments.

The L1 case is a real msprobe 26.2.0 dump (scripts/make_msprobe_pass_fixtures.py) of a Qwen3 whose
MLP is as wide as its vocabulary (256), so width alone does not tell the logits: layer 0's
``gate_proj`` is the first ``F.linear`` that wide. The keyword-argument case is the real Qwen2 L0
dump of tests/data/models, whose attention transformers calls with keyword arguments only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.msprobe.passes import EMBEDDING, api_of
from tui_acc.verdicts.weights import is_weight

WIDE = "qwen3-msprobe-L1-wide-mlp"
WIDE_MIX = "qwen3-msprobe-mix-wide-mlp"
LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down


def _dump_json(side: Path) -> Path:
    return next(side.rglob("dump.json"))


def _records(side: Path) -> dict:
    return json.loads(_dump_json(side).read_text(encoding="utf-8"))["data"]


def test_each_l1_pass_ends_at_the_lm_head_not_at_an_mlp_as_wide(msprobe_case):
    folder = msprobe_case(WIDE)
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    config = case["config"]
    assert config["vocab_size"] == config["intermediate_size"]  # what makes the case hard
    index = open_dump(folder / "golden")
    data = _records(folder / "golden")
    order = list(data)
    linears = [n for n in order if api_of(n) == "Functional.linear"]
    per_pass = LINEARS_PER_LAYER * config["num_hidden_layers"] + 1  # and the lm_head's
    assert len(index.tokens) == case["new_tokens"] == len(linears) // per_pass
    for token, nodes in index.tokens.items():
        names = list(nodes)
        assert api_of(names[0]) == EMBEDDING
        # the pass's last record is its last F.linear: the lm_head's, after the last layer's down_proj
        assert names[-1] == linears[(token + 1) * per_pass - 1]
        assert data[names[-1]]["output"][0]["shape"][-1] == config["vocab_size"]
    assert index.logits_hint == f"Functional.linear.{per_pass - 1}.forward"
    # every record is in a pass but generate()'s own calls: before the first embedding, after each logits
    placed = {n for nodes in index.tokens.values() for n in nodes}
    between = set(index.between_tokens)
    assert not between & placed and between | placed == set(order)
    opens = [i for i, n in enumerate(order) if api_of(n) == EMBEDDING]
    ends = [order.index(list(nodes)[-1]) for nodes in index.tokens.values()]
    outside = set(order[: opens[0]])
    for end, start in zip(ends, [*opens[1:], len(order)], strict=True):
        outside |= set(order[end + 1 : start])
    assert between == outside
    assert not any("linear" in n or "matmul" in n or "softmax" in n for n in between)
    assert {"Torch.argmax.0.forward", "Torch.argmax.3.forward"} <= between
    assert not index.problems
    (note,) = [n for n in index.notes if "between forward passes" in n]
    assert f"{len(between)} records" in note and index.between_tokens[0] in note


def test_a_fault_in_the_second_half_of_a_pass_is_found(msprobe_case):
    """Where the pass used to end at layer 0's gate_proj, layer 1's down_proj was never compared."""
    folder = msprobe_case(WIDE)
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert comparison.pairing.logits_node == comparison.golden.logits_hint
    assert not comparison.pairing.unmatched
    assert comparison.engine.first_failing_token() == case["fault_token"]
    op = comparison.verdicts.culprit(case["fault_token"])
    assert op is not None and op["golden_node"] == case["fault_record"] and op["label"] == "local"


def test_mix_takes_the_logits_from_the_lm_head_not_from_an_mlp_as_wide(msprobe_case):
    folder = msprobe_case(WIDE_MIX)
    case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert comparison.pairing.logits_node == "Module.lm_head.Linear.forward.0"
    assert comparison.engine.first_failing_token() == case["fault_token"]
    op = comparison.verdicts.culprit(case["fault_token"])
    assert op is not None and op["golden_node"] == case["fault_record"] and op["label"] == "local"


def test_model_arithmetic_outside_every_pass_is_a_problem(msprobe_case, tmp_path):
    """Without the lm_head's records (a dump narrowed by ``list``), the passes end at the last MLP's
    up_proj, as wide as the vocabulary: the down_proj and final norm after it are set aside, loudly."""
    side = tmp_path / "golden"
    shutil.copytree(msprobe_case(WIDE) / "golden", side)
    dump_json = _dump_json(side)
    dump = json.loads(dump_json.read_text(encoding="utf-8"))
    linears = [n for n in dump["data"] if api_of(n) == "Functional.linear"]
    lm_heads = linears[LINEARS_PER_LAYER * 2 :: LINEARS_PER_LAYER * 2 + 1]
    dump["data"] = {k: v for k, v in dump["data"].items() if k not in lm_heads}
    dump_json.write_text(json.dumps(dump), encoding="utf-8")
    index = open_dump(side)
    assert len(index.tokens) == 4
    down_proj = linears[LINEARS_PER_LAYER * 2 - 1]
    assert down_proj in index.between_tokens
    (problem,) = index.problems
    assert problem.path == str(dump_json)
    assert "model arithmetic" in problem.message and down_proj in problem.message


def test_keyword_inputs_of_a_module_are_its_input_rows(model_case):
    """transformers calls the attention with keyword arguments only: msprobe L0 records them under
    input_kwargs, and they are the module's inputs, paired slot by slot; None and the cache are no
    tensors, and none is taken for a weight."""
    folder = model_case("qwen2-msprobe-L0")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    data = _records(folder / "test")
    attention = "Module.model.layers.1.self_attn.Qwen2Attention.forward.2"
    assert data[attention]["input_args"] == []
    kwargs = data[attention]["input_kwargs"]
    tensors = {k for k, v in kwargs.items() if isinstance(v, dict) and v.get("type") == "torch.Tensor"}
    assert {"hidden_states", "attention_mask", "position_ids"} <= tensors
    assert len(kwargs["position_embeddings"]) == 2  # the rotary (cos, sin)
    expected = {f"input.{k}" for k in tensors} | {
        "input.position_embeddings.0",
        "input.position_embeddings.1",
    }
    refs = comparison.test.tokens[2][attention]
    assert {r.slot for r in refs if r.role == "input"} == expected
    assert all(r.location.endswith(f"{attention}.kwargs.{r.slot[6:]}.pt") for r in refs if r.role == "input")
    (pair,) = [p for p in comparison.pairing.node_pairs(2) if p.golden == attention]
    inputs = [t for t in pair.tensors if t.golden.role == "input"]
    assert {t.slot for t in inputs} == expected
    assert all(t.golden.slot == t.test.slot == t.slot for t in inputs)
    rows = [comparison.engine.tensor_row(t) for t in inputs]
    assert all(row["error"] is None and row["numel"] > 0 for row in rows)
    assert not any(is_weight(row, "Qwen2Attention") for row in rows)
    node = next(r for r in comparison.verdicts.token(2).rows if r["golden_node"] == attention)
    assert node["inputs_from"] == "files" and node["input_error"] is not None
    # at the prefill the mask is filled with each side's dtype minimum: equal by intent
    prefill = attention.removesuffix(".2") + ".0"
    (pair,) = [p for p in comparison.pairing.node_pairs(0) if p.golden == prefill]
    (mask,) = [t for t in pair.tensors if t.slot == "input.attention_mask"]
    row = comparison.engine.tensor_row(mask)
    assert row["golden_min"] < -1e38 and row["test_min"] == -65504.0 and row["passed"] is True


@pytest.mark.parametrize("name", ["llama-msprobe-mix", "llama-msprobe-L0-serving"])
def test_keyword_inputs_at_mix_and_with_statistics_only(model_case, name):
    """The same at mix (API calls inside the modules) and where only statistics were dumped."""
    folder = model_case(name)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    slots = {"input.hidden_states", "input.position_embeddings.0", "input.position_embeddings.1"}
    attention = [p for p in comparison.pairing.node_pairs(1) if "LlamaAttention" in p.golden]
    assert attention
    for pair in attention:
        inputs = {t.slot: t for t in pair.tensors if t.golden.role == "input"}
        assert slots <= set(inputs)
        assert all(t.golden.slot == t.test.slot for t in inputs.values())
        statistics = comparison.test.statistics_only
        assert all((t.test.stats is not None) is statistics for t in inputs.values())
