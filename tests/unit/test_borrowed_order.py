"""A torch golden whose only order is msit's model_tree.json, paired with an ATB test: the golden's
execution order is taken from the ATB folder ids, in the pairing's own view of the golden; the
index given to pairing is left as it was."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import device_dir
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.pairing import pair_dumps

# Hugging Face declares a decoder layer's norms after its attention and MLP, and the rotary
# embedding after the layers; msit's model_tree.json lists modules in that declaration order.
DECLARED_LAST = ("input_layernorm", "post_attention_layernorm", "rotary_emb")
LAYER = "root.model.layers.0"
DECLARED = [f"{LAYER}.{c}" for c in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")]
EXECUTED = [f"{LAYER}.{c}" for c in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")]
BORROWED = "borrowed from the ATB dump"


def _declared(node: dict[str, Any]) -> dict[str, Any]:
    children = [_declared(child) for child in node["children"]]
    node["children"] = sorted(children, key=lambda c: c["name"].rsplit(".", 1)[-1] in DECLARED_LAST)
    return node


@pytest.fixture
def declared_golden(demo_pair, tmp_path: Path) -> Path:
    """The demo's golden as a copy of an outputs-only msit dump leaves it: model_tree.json in
    declaration order, every file the same time, no input to order modules by data flow."""
    golden = tmp_path / "golden"
    shutil.copytree(demo_pair.golden, golden)
    tree = device_dir(golden) / "model_tree.json"
    tree.write_text(json.dumps(_declared(json.loads(tree.read_text()))), encoding="utf-8")
    for path in golden.rglob("input_*.pth"):
        path.unlink()
    for path in golden.rglob("*"):
        os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    return golden


def test_pairing_holds_the_borrowed_order_and_leaves_the_index(declared_golden: Path, atb_pair) -> None:
    golden = open_dump(declared_golden)
    assert golden.order_source == "model_tree.json" and golden.tree.children(LAYER) == DECLARED
    pairing = pair_dumps(golden, open_dump(atb_pair[1]))
    assert pairing.golden.order_source == BORROWED and pairing.golden.order_is_execution
    assert pairing.golden.tree.children(LAYER) == EXECUTED
    assert any("taken from the ATB folder ids" in note for note in pairing.notes)
    # the index given is as it was read
    assert golden.order_source == "model_tree.json" and golden.tree.children(LAYER) == DECLARED
    # each token's pairs follow the order the pairing settled on
    order = {node.name: i for i, node in enumerate(pairing.golden.tree.preorder())}
    for token in pairing.tokens:
        positions = [order[pair.golden] for pair in pairing.node_pairs(token)]
        assert positions == sorted(positions)


def test_the_comparison_and_its_engine_read_the_paired_golden(
    declared_golden: Path, atb_pair, demo_pair
) -> None:
    comparison = open_comparison(declared_golden, atb_pair[1], CompareOptions(cache=False))
    assert comparison.golden is comparison.pairing.golden
    assert comparison.golden.order_source == BORROWED
    rows = [r["golden_node"] for r in comparison.verdicts.token(demo_pair.fault_token).rows]
    assert [name for name in rows if name in EXECUTED] == EXECUTED
    op = comparison.verdicts.culprit(demo_pair.fault_token)
    assert op is not None and op["golden_node"] == demo_pair.fault_module
