"""The layer tree of a TorchAir comparison: each FX node under the modules its graph text's
``nn_module_stack`` names (TorchAir's ``enable_record_nn_module_stack``), in execution order, and a
re-dump of a module naming the ops inside it.

The attr's text is what dynamo records and TorchAir writes, ``str()`` of
``{key: (source name, class)}`` (torch/_dynamo/variables/nn_module.py ``record_nn_module_stack``;
torchair fx2ge_converter.py); the fixture's generator traced its modules the same way."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.model import NodeTree
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchair.graph_text import read_graph
from tui_acc.hunt.blocks import find_blocks
from tui_acc.redump import load_settings
from tui_acc.redump.select import plan_for

# what torch 2.13's dynamo recorded for a two-layer model (str() of node.meta["nn_module_stack"])
DYNAMO_STACK = (
    "{'139820116894096': (\"L['self'].layers.0\", <class '__main__.Layer'>), "
    "'139820644815888': (\"L['self'].layers.0.lin\", <class 'torch.nn.modules.linear.Linear'>)}"
)


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _escaped(text: str) -> str:
    """As protobuf's text format writes a bytes attr."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'")


def test_dynamos_module_stack_is_read_as_paths_and_classes(tmp_path: Path) -> None:
    path = tmp_path / "dynamo_original_graph_1_rank_0_pid_1_ts_1.txt"
    path.write_text(
        f'op {{ name: "MatMulV2" type: "MatMulV2"\n'
        f'  attr {{ key: "nn_module_stack" value {{ s: "{_escaped(DYNAMO_STACK)}" }} }} }}\n',
        encoding="utf-8",
    )
    op = read_graph(path, LoadPolicy(tmp_path)).ops["MatMulV2"]
    assert op.modules == [("layers.0", "Layer"), ("layers.0.lin", "Linear")]
    assert op.module == "layers.0.lin"


def _ancestors(tree: NodeTree, name: str) -> list[tuple[str, str]]:
    found = []
    parent = tree.nodes[name].parent
    while parent is not None:
        found.append((parent, tree.nodes[parent].type))
        parent = tree.nodes[parent].parent
    return found


@pytest.mark.parametrize("golden", ["fx", "ge-nofusion"])
def test_each_node_sits_under_its_modules_in_execution_order(llama: Path, golden: str) -> None:
    case = _case(llama)
    comparison = open_comparison(llama / golden, llama / "ge-fault", CompareOptions(cache=False))
    tree = comparison.pairing.golden.tree
    culprit = case["fx_node"] if golden == "fx" else case["ge_op"]
    assert _ancestors(tree, culprit)[:3] == [
        ("graph_2/model.layers.1.mlp", "LlamaMLP"),
        ("graph_2/model.layers.1", "LlamaDecoderLayer"),
        ("graph_2", "graph"),
    ]
    # the leaves in tree order are the graph's nodes in the order they ran
    flat = open_dump(llama / golden).tree
    for graph in flat.children(flat.root):
        leaves = [n.name for n in tree.preorder(graph) if not n.children and n.name != graph]
        assert leaves == flat.children(graph)
    layers = find_blocks(tree, within="graph_2")
    assert layers == ["graph_2/model.layers.0", "graph_2/model.layers.1"]


def test_the_verdict_still_names_the_one_local_operator_in_the_nested_tree(llama: Path) -> None:
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    local = [r["golden_node"] for r in comparison.verdicts.token(case["token"]).rows if r["label"] == "local"]
    assert local == [case["fx_node"]]


def test_a_modules_redump_names_the_ge_ops_inside_it(llama: Path, tmp_path: Path) -> None:
    """dump_layer for layer 1's MLP: its GE ops at that token (the faulty MatMul among them), and the
    logits op with GE's Cast of its output (what the token's logits are); none of attention's."""
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    module = "graph_2/model.layers.1.mlp"
    plan = plan_for(
        comparison, load_settings({"exec": "python infer.py"}), "test", case["token"], module,
        datetime(2026, 11, 29), base_dir=tmp_path,
    )  # fmt: skip
    layer = json.loads(next(iter(plan.files.values())))["dump_layer"]
    tree = comparison.pairing.golden.tree
    inside = {p.test.split("/")[1] for p in comparison.pairing.node_pairs(case["token"]) if p.golden in
              {n.name for n in tree.preorder(module)}}  # fmt: skip
    assert case["ge_op"].split("/")[1] in layer and set(layer) - inside == {
        case["nz_weight_of"].split("/")[1],
        case["inserted_cast"],
    }
    assert not any(op.startswith("BatchMatMul") or op.startswith("SoftmaxV2") for op in layer)
