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

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.reports.pair import build_report
from tui_acc.tolerances.rounding import local_bound
from tui_acc.verdicts.replay_check import SideReplay
from tui_acc.verdicts.rules import by_inner_replays

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


def _side(node: str, verdict: str) -> SideReplay:
    error = 0.5 if verdict == "disagrees" else 1e-4
    return SideReplay("test", node, node.split(".")[1], verdict, "why", metrics={"rel_euclidean": error})


def test_the_inner_rule_is_quiet_only_for_a_ports_own_operators() -> None:
    port_ops = [
        _side("NPU.npu_dynamic_quant.0.forward", "consistent"),
        _side("NPU.npu_quant_matmul.0.forward", "consistent"),
    ]
    quiet = by_inner_replays(port_ops)
    assert quiet is not None and not quiet.local
    # torch records the golden counted otherwise say nothing of what the module adds: no reading
    assert by_inner_replays([_side("Tensor.__add__.3.forward", "consistent")]) is None
    # one that could not be replayed (no reference, no output): no reading either
    assert by_inner_replays([*port_ops, _side("NPU.npu_x.0.forward", "impossible")]) is None
    # the first that disagrees is named, torch record or not
    wrong = by_inner_replays([_side("Tensor.__add__.3.forward", "disagrees"), *port_ops])
    assert wrong is not None and wrong.local and wrong.operator == "Tensor.__add__.3.forward"
