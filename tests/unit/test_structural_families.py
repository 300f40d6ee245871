"""Torch against ATB for model families the operator map does not know (GPT-2, Qwen2-MoE).

The torch sides are real msit dumps of a GPT-2 (``Conv1D`` projections) and a Qwen2-MoE (fused
experts, a router returning logits, scores and int64 expert ids) from ``tests/data/models``
(``model_case``). No
ATB dump of them can be made without an NPU, so each ATB side is written from the test run's
tensors with a graph shaped as ATB ports build these models. Every ATB operation knows which
module it was written from, so a pair is right exactly when it joins the two.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.demo.atb_export import AtbOp, export_atb
from tui_acc.pairing import Pairing

NOTE = "no ATB counterpart known to stand for them"
# operations written from a module's files without computing what the module computes
DERIVED = {"SoftmaxOperation", "SortOperation", "ElewiseOperation"}


def _gpt2_layer(i: int, module: str) -> AtbOp:
    attention = AtbOp(
        "Attention",
        f"{module}.attn",
        [
            AtbOp("LinearOperation", f"{module}.attn.c_attn"),
            AtbOp("SelfAttentionOperation", None),
            AtbOp("LinearOperation", f"{module}.attn.c_proj"),
        ],
        outputs=("output_0.pth",),
    )
    mlp = AtbOp(
        "Mlp",
        f"{module}.mlp",
        [
            AtbOp("LinearOperation", f"{module}.mlp.c_fc"),
            AtbOp("ActivationOperation", f"{module}.mlp.act"),
            AtbOp("LinearOperation", f"{module}.mlp.c_proj"),
        ],
    )
    norms = AtbOp("LayerNormOperation", f"{module}.ln_1"), AtbOp("LayerNormOperation", f"{module}.ln_2")
    return AtbOp("DecoderLayer", module, [norms[0], attention, norms[1], mlp], inputs=True)


def _gpt2_graph(layers: list[int]) -> list[AtbOp]:
    """An ATB GPT-2: word and position embeddings, their sum, the layers written from ``layers``."""
    return [
        AtbOp("WordEmbedding", "root.transformer.wte", inputs=True),
        AtbOp("GatherOperation", "root.transformer.wpe"),
        AtbOp("ElewiseOperation", "root.transformer.drop"),
        *(_gpt2_layer(i, f"root.transformer.h.{k}") for i, k in enumerate(layers)),
        AtbOp("LayerNormOperation", "root.transformer.ln_f", inputs=True),
        AtbOp("LmHead", "root.lm_head", inputs=True),
    ]


def _moe_graph(layers: int, fused_gate_up: bool) -> list[AtbOp]:
    """An ATB Qwen2-MoE as MindIE's ports build it: the router and routed experts in a ``SparseMoe``
    graph, the shared expert an ``Mlp`` graph beside it (gate and up projections fused, or not)."""

    def layer(i: int) -> AtbOp:
        p = f"root.model.layers.{i}"
        m = f"{p}.mlp"
        attention = AtbOp(
            "Attention",
            f"{p}.self_attn",
            [AtbOp("LinearOperation", f"{p}.self_attn.{x}_proj") for x in "qkvo"],
            outputs=("output_0.pth",),
        )
        experts = AtbOp(
            "MoeMlp",
            f"{m}.experts",
            [
                AtbOp("GatingOperation", None),
                AtbOp("GroupedMatmulOperation", None),
                AtbOp("ActivationOperation", f"{m}.experts.act_fn"),
                AtbOp("GroupedMatmulOperation", None),
            ],
        )
        router = [
            AtbOp("LinearOperation", f"{m}.gate", outputs=("output_0.pth",)),  # the router logits
            AtbOp("SoftmaxOperation", f"{m}.gate", outputs=("output_1.pth",)),
            AtbOp("SortOperation", f"{m}.gate", outputs=("output_1.pth", "output_2.pth")),  # ids: int64
        ]
        gate_up = ["up_proj"] if fused_gate_up else ["gate_proj", "up_proj"]
        shared = AtbOp(
            "Mlp",
            f"{m}.shared_expert",
            [
                AtbOp("LinearOperation", f"{m}.shared_expert.{gate_up[0]}"),
                AtbOp("ActivationOperation", f"{m}.shared_expert.act_fn"),
                *(AtbOp("LinearOperation", f"{m}.shared_expert.{x}") for x in [*gate_up[1:], "down_proj"]),
            ],
        )
        return AtbOp(
            "DecoderLayer",
            p,
            [
                AtbOp("RmsNormOperation", f"{p}.input_layernorm"),
                attention,
                AtbOp("RmsNormOperation", f"{p}.post_attention_layernorm"),
                AtbOp("SparseMoe", None, [*router, experts]),
                shared,
                AtbOp("LinearOperation", f"{m}.shared_expert_gate"),
                AtbOp("ElewiseOperation", m),
            ],
            inputs=True,
        )

    return [
        AtbOp("WordEmbedding", "root.model.embed_tokens", inputs=True),
        *(layer(i) for i in range(layers)),
        AtbOp("RmsNormOperation", "root.model.norm", inputs=True),
        AtbOp("LmHead", "root.lm_head", inputs=True),
    ]


def _truth(graph: list[AtbOp]) -> set[tuple[str, str]]:
    """(torch module, ATB folder) for every operation written from the module it stands for."""
    truth = set()

    def walk(ops: list[AtbOp], prefix: str) -> None:
        for i, op in enumerate(ops):
            name = f"{prefix}{i}_{op.op_type}"
            if op.torch_name and op.op_type not in DERIVED:
                truth.add((op.torch_name, name))
            walk(op.children, f"{name}/")

    walk(graph, "")
    return truth


def _assert_only_true_pairs(pairing: Pairing, truth: set[tuple[str, str]]) -> None:
    made = {(p.golden, p.test) for t in pairing.tokens for p in pairing.node_pairs(t)}
    assert made and made <= truth, sorted(made - truth)


def _lonely(pairing: Pairing, token: int) -> set[tuple[str, str]]:
    return {(u.side, u.name) for u in pairing.unmatched if u.kind == "node" and u.token == token}


@pytest.fixture
def gpt2(model_case: Callable[[str], Path]) -> Path:
    return model_case("gpt2-msit")


@pytest.fixture
def moe(model_case: Callable[[str], Path]) -> Path:
    return model_case("qwen2moe-msit")


def test_gpt2_conv1d_stays_unmatched_and_a_note_names_it(gpt2: Path, tmp_path: Path) -> None:
    graph = _gpt2_graph([0, 1])
    atb = export_atb(gpt2 / "test", tmp_path, graph=graph)
    cmp = open_comparison(gpt2 / "golden", atb)
    pairing = cmp.pairing
    _assert_only_true_pairs(pairing, _truth(graph))
    conv1d = {n.name for n in cmp.golden.tree.nodes.values() if n.type == "Conv1D"}
    atb_linear = {n.name for n in cmp.test.tree.nodes.values() if n.type == "LinearOperation"}
    assert len(conv1d) == len(atb_linear) == 8
    for token in pairing.tokens:
        lonely = _lonely(pairing, token)
        assert {("golden", n) for n in conv1d} | {("test", n) for n in atb_linear} <= lonely
    paired = {p.golden: p.test for p in pairing.node_pairs(2)}
    assert paired["root.transformer.h.1.attn"] == "4_DecoderLayer/1_Attention"  # GPT2Attention: family + type
    assert paired["root.transformer.h.1.mlp.act"] == "4_DecoderLayer/3_Mlp/1_ActivationOperation"
    (note,) = [n for n in pairing.notes if NOTE in n]
    assert "8 Conv1D" in note and "8 LinearOperation" in note and "--mapping" in note
    op = cmp.verdicts.culprit(2)  # the fault is in h.1.mlp.c_proj: the closest pair holding it
    assert op is not None and (op["golden_node"], op["test_node"]) == (
        "root.transformer.h.1.mlp",
        "4_DecoderLayer/3_Mlp",
    )


def test_a_mapping_file_names_conv1d_and_the_fault_is_found_in_it(gpt2: Path, tmp_path: Path) -> None:
    graph = _gpt2_graph([0, 1])
    atb = export_atb(gpt2 / "test", tmp_path / "atb", graph=graph)
    toml = tmp_path / "gpt2.toml"
    toml.write_text('[types]\nLinearOperation = ["Linear", "Conv1D"]\n', encoding="utf-8")
    cmp = open_comparison(gpt2 / "golden", atb, CompareOptions(mapping=toml))
    _assert_only_true_pairs(cmp.pairing, _truth(graph))
    paired = {p.golden for p in cmp.pairing.node_pairs(2)}
    assert {n.name for n in cmp.golden.tree.nodes.values() if n.type == "Conv1D"} <= paired
    assert not any("Conv1D" in note for note in cmp.pairing.notes)
    op = cmp.verdicts.culprit(2)
    assert op is not None
    assert (op["golden_node"], op["test_node"]) == (
        "root.transformer.h.1.mlp.c_proj",
        "4_DecoderLayer/3_Mlp/2_LinearOperation",
    )


def test_layers_in_different_numbers_are_not_paired_by_position(gpt2: Path, tmp_path: Path) -> None:
    graph = _gpt2_graph([1, 0, 1])  # an extra layer in front: position says nothing any more
    atb = export_atb(gpt2 / "test", tmp_path / "atb", graph=graph)
    pairing = open_comparison(gpt2 / "golden", atb).pairing
    _assert_only_true_pairs(pairing, _truth(graph))
    assert not any(p.golden.startswith("root.transformer.h.") for p in pairing.node_pairs(2))
    assert any(
        "torch model has 2 layers (GPT2Block), the ATB dump 3 (DecoderLayer)" in note
        for note in pairing.notes
    )
    toml = tmp_path / "layers.toml"
    toml.write_text(
        '[nodes]\n"4_DecoderLayer" = "root.transformer.h.0"\n"5_DecoderLayer" = "root.transformer.h.1"\n',
        encoding="utf-8",
    )
    pinned = {
        p.golden: p.test
        for p in open_comparison(gpt2 / "golden", atb, CompareOptions(mapping=toml)).pairing.node_pairs(2)
    }
    assert pinned["root.transformer.h.1"] == "5_DecoderLayer"
    assert pinned["root.transformer.h.1.ln_2"] == "5_DecoderLayer/2_LayerNormOperation"  # inside: by type


@pytest.mark.parametrize("fused_gate_up", [True, False], ids=["gate-up-fused", "gate-up-apart"])
def test_moe_routing_stays_unmatched_instead_of_taking_the_shared_experts_place(
    moe: Path, tmp_path: Path, fused_gate_up: bool
) -> None:
    graph = _moe_graph(2, fused_gate_up)
    atb = export_atb(moe / "test", tmp_path, graph=graph)
    pairing = open_comparison(moe / "golden", atb).pairing
    _assert_only_true_pairs(pairing, _truth(graph))
    for token in pairing.tokens:
        lonely = _lonely(pairing, token)
        for i in (0, 1):
            mlp = f"root.model.layers.{i}.mlp"
            assert {("golden", mlp), ("golden", f"{mlp}.gate"), ("golden", f"{mlp}.experts")} <= lonely
            assert ("test", f"{i + 1}_DecoderLayer/3_SparseMoe/0_LinearOperation") in lonely  # the router
    paired = {p.golden: p.test for p in pairing.node_pairs(2)}
    shared = "root.model.layers.1.mlp.shared_expert"
    assert (
        paired[shared] == "2_DecoderLayer/4_Mlp"
        and paired[f"{shared}.act_fn"] == "2_DecoderLayer/4_Mlp/1_ActivationOperation"
    )
    assert paired["root.model.layers.1.self_attn.v_proj"] == "2_DecoderLayer/1_Attention/2_LinearOperation"
    assert (f"{shared}.gate_proj" in paired) is not fused_gate_up  # two projections in one op: unknown
    (note,) = [n for n in pairing.notes if NOTE in n]
    for kind in ("2 Qwen2MoeExperts", "2 Qwen2MoeSparseMoeBlock", "2 Qwen2MoeTopKRouter", "2 MoeMlp"):
        assert kind in note


def test_a_mapping_file_names_the_router_and_the_experts(moe: Path, tmp_path: Path) -> None:
    graph = _moe_graph(2, fused_gate_up=True)
    atb = export_atb(moe / "test", tmp_path / "atb", graph=graph)
    toml = tmp_path / "moe.toml"
    toml.write_text(
        '[types]\nLinearOperation = ["Linear", "TopKRouter"]\n'
        'MoeMlp = "Experts"\nSparseMoe = "SparseMoeBlock"\n',
        encoding="utf-8",
    )
    pairing = open_comparison(moe / "golden", atb, CompareOptions(mapping=toml)).pairing
    _assert_only_true_pairs(pairing, _truth(graph))
    pairs = {p.golden: p for p in pairing.node_pairs(2)}
    router = pairs["root.model.layers.1.mlp.gate"]
    assert router.test == "2_DecoderLayer/3_SparseMoe/0_LinearOperation"
    # the router logits only: its scores and int64 expert ids have no partner in that operation
    assert [(t.golden.slot, t.test.slot) for t in router.tensors] == [("output_0", "outtensor0")]
    assert pairs["root.model.layers.1.mlp.experts"].test == "2_DecoderLayer/3_SparseMoe/3_MoeMlp"
    # named by the mapping, yet the torch MoE block holds the shared expert and SparseMoe does not
    assert "root.model.layers.1.mlp" not in pairs and ("golden", "root.model.layers.1.mlp") in _lonely(
        pairing, 2
    )


def test_llama_gets_no_note_when_nothing_is_left_to_name(atb_pair) -> None:
    golden, plain, _ = atb_pair
    assert not any(NOTE in note for note in open_comparison(golden, plain).pairing.notes)
