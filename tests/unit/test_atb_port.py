"""The W8A8 Llama port of test_npu_port.py, as an ATB model runs it, against the same float32 golden
(tests/data/npu: the msprobe golden of ``w8a8-llama-msprobe-mix``, the msit ATB dumps of
``w8a8-llama-atb``, scripts/make_atb_npu_fixtures.py). The two sides share no names: layers pair by
order, the ATB graph ``Attention`` with ``LlamaAttention``, ``Mlp`` with ``LlamaMLP``, the seven
``LinearOperation`` of a layer with its seven ``Linear``, in order; the dynamic quantisations, the
rope, the cache write and the attention kernels are operations only the test has, inside a module
both sides have.

Where each fault lies follows from the graph the generator builds (per layer: ``0_RmsNormOperation``,
``1_Attention`` holding ``0_ElewiseOperation`` (dynamic quant), the q, k, v ``LinearOperation``
``1``-``3``, ``4_RopeOperation``, ``5_ReshapeAndCacheOperation``, ``6_SelfAttentionOperation`` at
the prefill or ``6_PagedAttentionOperation`` at a decode step, ``7_ElewiseOperation``,
``8_LinearOperation`` (o_proj)), not from tui-acc.
"""

from __future__ import annotations

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.reports.pair import build_report
from tui_acc.verdicts.local import LocalChecks
from tui_acc.verdicts.port_rules import by_quantised_kernel
from tui_acc.verdicts.replay_check import SideReplay

GOLDEN, NAME = "w8a8-llama-msprobe-mix", "w8a8-llama-atb"
TOKENS = 4
ATTENTION = "{layer}_DecoderLayer/1_Attention"
# case: (first failing token, the golden module found local, the ATB node paired with it, the ATB
# operation inside it that disagrees with its own inputs; None where the paired node is that operation)
FAULTS = {
    "attention": (
        2,
        "Module.model.layers.0.self_attn.LlamaAttention.forward.2",
        ATTENTION.format(layer=1),
        ATTENTION.format(layer=1) + "/6_PagedAttentionOperation",
    ),
    "dequant": (
        0,
        "Module.model.layers.1.self_attn.o_proj.Linear.forward.0",
        ATTENTION.format(layer=2) + "/8_LinearOperation",
        None,
    ),
    "rope": (
        0,
        "Module.model.layers.1.self_attn.LlamaAttention.forward.0",
        ATTENTION.format(layer=2),
        ATTENTION.format(layer=2) + "/4_RopeOperation",
    ),
    "kvslot": (
        2,
        "Module.model.layers.1.self_attn.LlamaAttention.forward.2",
        ATTENTION.format(layer=2),
        ATTENTION.format(layer=2) + "/5_ReshapeAndCacheOperation",
    ),
}


@pytest.fixture(scope="module")
def sides(npu_case):
    return npu_case(GOLDEN) / "golden", npu_case(NAME)


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_each_fault_is_the_one_local_operator_of_the_atb_dump(sides, case: str) -> None:
    golden, port = sides
    token, module, paired, operator = FAULTS[case]
    report = build_report(open_comparison(golden, port / case, CompareOptions(cache=False)), all_tokens=True)
    body = report.body()
    culprit = body["first_failing_op"]
    assert culprit is not None
    assert (culprit["token"], culprit["golden"], culprit["test"]) == (token, module, paired)
    assert culprit["operator"] == operator
    assert (culprit["label"], culprit["rule"]) == ("local", "replay")
    assert body["counts"]["local"] == 1
    if operator is not None:
        assert f"the operator: {operator}" in report.text()


def test_the_clean_atb_port_labels_nothing_local_and_says_its_linears_error_is_their_quantisation(
    sides,
) -> None:
    golden, port = sides
    cmp = open_comparison(golden, port / "clean", CompareOptions(cache=False))
    verdicts = [cmp.verdicts.token(t) for t in range(TOKENS)]
    assert [v.counts.local for v in verdicts] == [0] * TOKENS
    projections = [f"self_attn.{x}_proj" for x in "qkvo"] + [f"mlp.{x}_proj" for x in ("gate", "up", "down")]
    for t, verdict in enumerate(verdicts):
        readings = []
        for layer in range(2):
            for projection in projections:
                linear = verdict.get(f"Module.model.layers.{layer}.{projection}.Linear.forward.{t}")
                assert linear is not None and linear.label is None
                readings.append(linear.reason)
        # each is its quantisation, said by its replay from its int8 inputs, or so small that its own
        # rounding explains it (then nothing is replayed)
        quantised = [r for r in readings if "its own int8 inputs give its output" in r]
        assert all("a quantisation, unless its int8 weight or scale" in r for r in quantised)
        assert all(r in quantised or "within its own rounding" in r for r in readings)
        assert len(quantised) >= len(readings) - 2


def test_layers_pair_by_order_with_an_msprobe_golden_that_records_no_module_list(sides) -> None:
    # msprobe has no record of ModuleList: a two-layer model's layers sit beside its embedding, rotary
    # embedding and norm, and its own API records (a Tensor.__mul__ the model calls between them)
    golden, port = sides
    cmp = open_comparison(golden, port / "clean", CompareOptions(cache=False))
    for token in range(TOKENS):
        pairs = {p.golden: p.test for p in cmp.pairing.nodes[token]}
        for layer in range(2):
            assert (
                pairs[f"Module.model.layers.{layer}.LlamaDecoderLayer.forward.{token}"]
                == f"{layer + 1}_DecoderLayer"
            )
        # the logits: msprobe names the LM head's call per token
        assert pairs[f"Module.lm_head.Linear.forward.{token}"] == "4_LmHead"
        # the embedding is the token lookup, not the rotary embedding beside it; what each graph
        # holds pairs inside its partner (the gather with the lookup, LmHead's linear with lm_head's)
        assert pairs[f"Module.model.embed_tokens.Embedding.forward.{token}"] == "0_WordEmbedding"
        assert pairs[f"Functional.embedding.{token}.forward"] == "0_WordEmbedding/0_GatherOperation"
        inner = [g for g, t in pairs.items() if t == "4_LmHead/0_LinearOperation"]
        assert len(inner) == 1 and inner[0].startswith("Functional.linear.")


def _kernel(verdict: str, quantisation: float | None) -> SideReplay:
    return SideReplay(
        "test",
        "2_LinearOperation",
        "LinearOperation",
        verdict,
        "rel euclid 1e-03 <= tolerance 9e-03",
        metrics={"rel_euclidean": 1e-3},
        quantisation=quantisation,
    )


def test_a_quantised_kernel_is_quiet_only_within_its_inputs_and_quantisation() -> None:
    # int8 operands whose rounding is 1 % of their size, inputs that explain 0.5 %
    budget = 0.005 + 3 * 0.01  # activations and weights are already in quadrature in the 1 %
    quiet = by_quantised_kernel(_kernel("consistent", 0.01), output_error=budget * 0.9, explained=0.005)
    assert quiet is not None and not quiet.local and quiet.expected_error == pytest.approx(budget)
    assert "a quantisation, unless its int8 weight or scale is itself wrong" in quiet.reason
    # beyond it, a float kernel, or one that disagrees with its inputs: the replay's own reading
    assert by_quantised_kernel(_kernel("consistent", 0.01), budget * 1.1, 0.005) is None
    assert by_quantised_kernel(_kernel("consistent", None), 0.001, 0.005) is None
    assert by_quantised_kernel(_kernel("disagrees", 0.01), 0.001, 0.005) is None


def test_inside_a_module_only_the_operations_that_ran_at_the_token_are_read(sides) -> None:
    # the prefill's 6_SelfAttentionOperation and a decode step's 6_PagedAttentionOperation share their
    # place in the ATB tree: each token reads the one that ran, none as "impossible"
    golden, port = sides
    cmp = open_comparison(golden, port / "clean", CompareOptions(cache=False))
    checks = LocalChecks(cmp.pairing)
    for token, ran in ((0, "6_SelfAttentionOperation"), (2, "6_PagedAttentionOperation")):
        pair = next(
            p for p in cmp.pairing.nodes[token] if p.golden.endswith(f"LlamaAttention.forward.{token}")
        )
        inner = checks.inner(pair)
        operations = [r.node.rsplit("/", 1)[-1] for r in inner]
        assert [o for o in operations if o.endswith("AttentionOperation")] == [ran]
        assert all(r.verdict == "consistent" for r in inner)
