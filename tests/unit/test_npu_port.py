"""A W8A8 Llama port on torch_npu's operators against its float32 golden (tests/data/npu, real
msprobe mix dumps: scripts/make_npu_fixtures.py). The port's quantised linears, rope, KV cache and
paged attention are records the golden has none of, inside modules both sides have: each module is
judged by the replays of the test's own operators inside it; a KV-cache write, which returns
nothing, through what the attention after it read.

Where each fault lies follows from how the port runs, not from tui-acc: per token, two layers call
``npu_rotary_mul`` twice (query, then key), ``npu_fused_infer_attention_score`` once and
``npu_quant_matmul`` seven times (q, k, v, o, gate, up, down), and msprobe numbers each API's calls
across the whole run.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from tui_acc import CompareOptions, open_comparison
from tui_acc.reports.pair import build_report
from tui_acc.tolerances.rounding import local_bound
from tui_acc.verdicts.port_rules import by_inner_replays
from tui_acc.verdicts.replay_check import SideReplay

NAME = "w8a8-llama-msprobe-mix"
TOKENS = 4
# case: (first failing token, the module found local, the test's operator inside it)
FAULTS = {
    # layer 0's attention at token 2: its 5th call (tokens 0 and 1 made 2 each)
    "attention": (
        2,
        "Module.model.layers.0.self_attn.LlamaAttention.forward.2",
        "NPU.npu_fused_infer_attention_score.4.forward",
    ),
    # layer 1's o_proj at token 0: the 11th quantised matmul (layer 0's seven, then q, k, v)
    "dequant": (
        0,
        "Module.model.layers.1.self_attn.o_proj.Linear.forward.0",
        "NPU.npu_quant_matmul.10.forward",
    ),
    # layer 1's query rope at token 0: the 3rd rope call (layer 0's query and key first)
    "rope": (0, "Module.model.layers.1.self_attn.LlamaAttention.forward.0", "NPU.npu_rotary_mul.2.forward"),
    # layer 1's KV-cache write at token 2 (two a token): its 6th; the attention after it is consistent
    # with the cache it read, and the write is checked through what that attention read
    "kvslot": (
        2,
        "Module.model.layers.1.self_attn.LlamaAttention.forward.2",
        "NPU.npu_scatter_pa_kv_cache.5.forward",
    ),
}


@pytest.fixture(scope="module")
def port(npu_case):
    return npu_case(NAME)


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_each_fault_is_the_one_local_operator_named_by_the_tests_record(port, case: str) -> None:
    token, module, operator = FAULTS[case]
    report = build_report(
        open_comparison(port / "golden", port / case, CompareOptions(cache=False)), all_tokens=True
    )
    body = report.body()
    culprit = body["first_failing_op"]
    assert culprit is not None
    assert (culprit["token"], culprit["test"], culprit["operator"]) == (token, module, operator)
    assert culprit["label"] == "local" and culprit["rule"] == "replay"
    assert body["counts"]["local"] == 1
    assert f"the operator: {operator}" in report.text()


def test_the_clean_port_labels_nothing_local_and_says_its_linears_error_is_their_quantisation(port) -> None:
    cmp = open_comparison(port / "golden", port / "clean", CompareOptions(cache=False))
    verdicts = [cmp.verdicts.token(t) for t in range(TOKENS)]
    assert [v.counts.local for v in verdicts] == [0] * TOKENS
    q_proj = verdicts[0].get("Module.model.layers.0.self_attn.q_proj.Linear.forward.0")
    assert q_proj is not None and q_proj.label is None and q_proj.rule == "replay"
    assert "npu_dynamic_quant, npu_quant_matmul" in q_proj.reason and "a quantisation" in q_proj.reason
    # its error is beyond what bf16's rounding alone explains: the quantisation's
    assert q_proj.output_error is not None and q_proj.output_error > local_bound("bfloat16")


def _side(node: str, verdict: str, expected: float | None = None) -> SideReplay:
    error = 0.5 if verdict == "disagrees" else 1e-4
    metrics = {"rel_euclidean": error}
    return SideReplay("test", node, node.split(".")[1], verdict, "why", metrics=metrics, expected=expected)


def test_the_inner_rule_is_quiet_only_for_a_quantisation_within_its_budget() -> None:
    # a W8A8 linear: its activations rounded to integers with a relative rms of 0.7 %
    port_ops = [
        _side("NPU.npu_dynamic_quant.0.forward", "consistent", expected=0.007),
        _side("NPU.npu_quant_matmul.0.forward", "consistent"),
    ]
    budget = 0.005 + 3 * 2**0.5 * 0.007  # what its inputs explain, and its quantisation
    quiet = by_inner_replays(port_ops, output_error=0.02, explained=0.005)
    assert quiet is not None and not quiet.local and quiet.expected_error == pytest.approx(budget)
    # beyond it (a wrong weight scale, a defaulted argument): the other rules judge it
    assert by_inner_replays(port_ops, output_error=budget * 1.1, explained=0.005) is None
    # nothing quantises inside (a fused attention): each consistent, and still no reading
    attention = [_side("NPU.npu_fused_infer_attention_score.0.forward", "consistent")]
    assert by_inner_replays(attention, output_error=0.001, explained=0.01) is None
    # torch records the golden counted otherwise, or one that could not be replayed: no reading
    assert by_inner_replays([_side("Tensor.__add__.3.forward", "consistent")], 0.001, 0.01) is None
    assert by_inner_replays([*port_ops, _side("NPU.npu_x.0.forward", "impossible")], 0.001, 0.01) is None
    # the first that disagrees is named, torch record or not
    wrong = by_inner_replays([_side("Tensor.__add__.3.forward", "disagrees"), *port_ops])
    assert wrong is not None and wrong.local and wrong.operator == "Tensor.__add__.3.forward"


def test_an_int8_weight_whose_scale_is_off_is_local_by_the_weights_rule(port, tmp_path) -> None:
    # a conversion bug: layer 1's o_proj weight_scale 2 % off its int8 weight (the kernel, given
    # that scale, computes correctly: only the weight against the golden's shows it)
    test = tmp_path / "scaled"
    shutil.copytree(port / "clean", test)
    name = "Module.model.layers.1.self_attn.o_proj.Linear.forward.0.parameters.weight_scale.pt"
    path = next(test.glob(f"step0/*/dump_tensor_data/{name}"))
    torch.save(torch.load(path) * 1.02, path)
    verdict = open_comparison(port / "golden", test, CompareOptions(cache=False)).verdicts.token(0)
    o_proj = verdict.get("Module.model.layers.1.self_attn.o_proj.Linear.forward.0")
    assert o_proj is not None and (o_proj.label, o_proj.rule) == ("local", "weights")
    assert "not the golden's quantised with its scale" in o_proj.reason
    assert verdict.counts.local == 1
    clean = open_comparison(port / "golden", port / "clean", CompareOptions(cache=False)).verdicts.token(0)
    same = clean.get("Module.model.layers.1.self_attn.o_proj.Linear.forward.0")
    assert same is not None and same.label is None


def test_a_weight_stored_transposed_is_checked_the_same(port, tmp_path) -> None:
    # vllm-ascend transposes its W8A8 weights to [in, out] after loading: the check reads either
    # (o_proj is square: both readings are tried)
    from tui_acc.verdicts import quantised_weights

    test = tmp_path / "transposed"
    shutil.copytree(port / "clean", test)
    module = "Module.model.layers.1.self_attn.o_proj.Linear.forward.0"
    path = next(test.glob(f"step0/*/dump_tensor_data/{module}.parameters.weight.pt"))
    torch.save(torch.load(path).T.contiguous(), path)
    cmp = open_comparison(port / "golden", test, CompareOptions(cache=False))
    found = quantised_weights.check(cmp.golden, cmp.test, 0, module, module)
    assert found is not None and found.consistent
