"""msprobe L1's flat list of API calls read by layer and module: stack.json and execution order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.msprobe.stack import Frame, call_groups, grouped_tree


def _frames(*lines: tuple[str, int, str, str]) -> tuple[Frame, ...]:
    return tuple(Frame(file, line, func, code) for file, line, func, code in lines)


MODEL = ("model.py", 392, "forward", "hidden_states = decoder_layer(hidden_states)")
WRAP = ("module.py", 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")


def _layer_call(line: int, code: str, *deeper: tuple[str, int, str, str]) -> tuple[Frame, ...]:
    return _frames(MODEL, WRAP, ("model.py", line, "forward", code), *deeper)


NORM = _layer_call(
    295, "hidden_states = self.input_layernorm(hidden_states)", ("norm.py", 64, "forward", "x")
)
MLP = _layer_call(311, "hidden_states = self.mlp(hidden_states)", ("mlp.py", 164, "forward", "y"))
RESIDUAL = _layer_call(314, "hidden_states = residual + hidden_states")


def test_a_layer_starts_where_its_forward_starts_again() -> None:
    order = ["pow.0", "linear.0", "add.0", "pow.1", "linear.1", "add.1"]
    stacks = dict(zip(order, [NORM, MLP, RESIDUAL] * 2, strict=True))  # one stack for both layers
    groups = call_groups(order, stacks)
    assert groups == {
        "pow.0": ("decoder_layer.0", "decoder_layer.0.input_layernorm"),
        "linear.0": ("decoder_layer.0", "decoder_layer.0.mlp"),
        "add.0": ("decoder_layer.0",),  # on the layer's own line: no module between
        "pow.1": ("decoder_layer.1", "decoder_layer.1.input_layernorm"),
        "linear.1": ("decoder_layer.1", "decoder_layer.1.mlp"),
        "add.1": ("decoder_layer.1",),
    }


def test_without_a_loop_or_a_stack_nothing_is_grouped() -> None:
    assert call_groups(["pow.0", "linear.0"], {"pow.0": NORM, "linear.0": MLP}) == {}  # one layer only
    assert call_groups(["pow.0", "linear.0"], {}) == {}


def test_a_module_met_again_later_is_another_group() -> None:
    order = ["pow.0", "linear.0", "pow.1", "x.0", "pow.2"]
    stacks = {"pow.0": NORM, "linear.0": MLP, "pow.1": NORM, "pow.2": NORM}
    stacks["x.0"] = _layer_call(296, "h = self.input_layernorm(h)", ("norm.py", 64, "forward", "x"))
    groups = call_groups(order, stacks)
    assert groups["pow.1"] == ("decoder_layer.1", "decoder_layer.1.input_layernorm")
    assert groups["x.0"] == groups["pow.1"]  # the same module in a row: one group
    assert groups["pow.2"] == ("decoder_layer.2", "decoder_layer.2.input_layernorm")
    again = ["pow.0", "linear.0", "pow.9"]  # the layer calls its norm again after its MLP
    later = _layer_call(320, "h = self.input_layernorm(h)", ("norm.py", 64, "forward", "x"))
    regrouped = call_groups(
        [*again, "pow.1"], {"pow.0": NORM, "linear.0": MLP, "pow.9": later, "pow.1": NORM}
    )
    assert regrouped["pow.9"] == ("decoder_layer.0", "decoder_layer.0.input_layernorm#2")
    assert regrouped["pow.1"] == ("decoder_layer.1", "decoder_layer.1.input_layernorm")


def test_the_l1_fixtures_culprit_is_in_its_layers_mlp(model_case) -> None:  # type: ignore[no-untyped-def]
    folder = model_case("llama-msprobe-L1")
    case = json.loads((folder / "case.json").read_text())
    golden = open_dump(folder / "golden")
    assert all(golden.tree.nodes[n].parent == golden.tree.root for n in golden.tree.nodes if n != "model")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    token = case["fault_token"]
    order = [pair.golden for pair in comparison.pairing.node_pairs(token)]
    view = grouped_tree(golden, order)
    assert view is not None
    fault = case["fault_record"]
    layer = case["fault_module"].split(".")[2]  # model.layers.1.mlp.down_proj
    assert view.nodes[fault].parent == f"decoder_layer.{layer}.mlp"
    assert [n for n in view.children(view.root) if n.startswith("decoder_layer.")] == [
        "decoder_layer.0",
        "decoder_layer.1",
    ]
    # for reading only: the calls keep their execution order, and every one of them is there
    assert [n.name for n in view.preorder() if n.name in set(order)] == order
    assert comparison.verdicts.culprit(token)["golden_node"] == fault  # type: ignore[index]


def test_a_dump_without_stack_json_stays_flat(model_case, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = model_case("llama-msprobe-L1")
    copy = tmp_path / "golden"
    shutil.copytree(folder / "golden", copy)
    for stack in copy.rglob("stack.json"):
        stack.write_text("{not json")
    golden = open_dump(copy)
    order = list(golden.tree.children(golden.tree.root))[:50]
    assert grouped_tree(golden, order) is None


@pytest.mark.parametrize("case", ["llama-msprobe-mix", "qwen2-msprobe-L0"])
def test_calls_that_have_modules_keep_them(model_case, case) -> None:  # type: ignore[no-untyped-def]
    golden = open_dump(model_case(case) / "golden")
    order = [n.name for n in golden.tree.preorder() if n.name != golden.tree.root]
    assert grouped_tree(golden, order) is None
