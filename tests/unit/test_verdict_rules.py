"""Rules a new user's pass on untried families asked for, each from its arithmetic: what is in place,
Gemma's norm, how sin, cos and a power grow an error, a large error's second order, an input no
dump holds, a statistics dump's failures weighed against its inputs'.

Every expectation is worked from the definition (a norm's formula, the first-order error of sin),
not taken from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from tui_acc.dumps.model import Node, NodeTree
from tui_acc.metrics.node_frame import node_frame
from tui_acc.metrics.schema import NODE_META_SCHEMA, TENSOR_SCHEMA, to_frame
from tui_acc.replay.call import Call
from tui_acc.replay.registry import Registry
from tui_acc.verdicts.glue import by_glue_thresholds
from tui_acc.verdicts.judging import Judging
from tui_acc.verdicts.propagation import GROWTH, amplification, explained_bound
from tui_acc.verdicts.rules import Facts, by_statistics
from tui_acc.verdicts.walk import TokenWalk


def _same(node: str, slot: str, role: str, index: int) -> dict[str, object]:
    """A tensor whose statistics are the same on both sides of every record it is in."""
    sides = {
        f"{s}_{k}": v
        for s in ("golden", "test")
        for k, v in (
            ("shape", "[4]"),
            ("dtype", "float32"),
            ("max", 2.0),
            ("min", -1.0),
            ("mean", 0.3),
            ("norm", 2.5),
        )
    }
    return {
        "token": 0,
        "golden_node": node,
        "test_node": node,
        "slot": slot,
        "role": role,
        "passed": True,
        "cosine": 1.0,
        **sides,
    }


def test_an_api_record_is_in_place_only_by_its_name() -> None:
    """``x * (1 + w)`` with ``w == 0`` gives back its input bit for bit: the identical statistics make
    ``Tensor.mul_`` in place (it writes into its input), not ``Tensor.__mul__`` (it returns a new one)."""
    names = ["Tensor.__mul__.8.forward", "Tensor.mul_.3.forward", "Module.act.SiLU.forward.0"]
    tensors = to_frame(
        [
            _same(n, slot, role, i)
            for i, n in enumerate(names)
            for slot, role in (("input.0", "input"), ("output.0", "output"))
        ],
        TENSOR_SCHEMA,
    )
    meta = to_frame(
        [
            {
                "token": 0,
                "order": i,
                "depth": 1,
                "golden_node": n,
                "test_node": n,
                "golden_type": "T",
                "test_type": "T",
            }
            for i, n in enumerate(names)
        ],
        NODE_META_SCHEMA,
    )
    found = dict(node_frame(tensors, meta).select("golden_node", "in_place").iter_rows())
    assert found["Tensor.__mul__.8.forward"] is None
    assert found["Tensor.mul_.3.forward"] == "input.0=output.0 (golden)"
    assert found["Module.act.SiLU.forward.0"] == "input.0=output.0 (golden)"  # a module may be (inplace=True)


def test_gemma_rms_norm_is_replayed_with_one_plus_its_weight() -> None:
    rng = np.random.default_rng(0)
    x, weight = rng.normal(size=(3, 8)), rng.normal(scale=0.1, size=8)
    call = Call(
        "norm",
        "Gemma2RMSNorm",
        "msprobe",
        positional={0: x},
        params={"weight": weight},
        output_dtype="float32",
        output_shape=(3, 8),
    )
    entry = Registry().find(None, "Gemma2RMSNorm")
    assert entry is not None
    replayed = entry.load()(call)
    expected = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-6) * (1.0 + weight)
    np.testing.assert_allclose(replayed.values, expected, rtol=1e-12)
    # the plain RMSNorm (Llama's) multiplies by the weight itself
    plain = Registry().find(None, "LlamaRMSNorm")
    assert plain is not None and plain.load() is not entry.load()


def test_sin_and_cos_grow_an_angles_error_by_its_size_and_a_power_by_two() -> None:
    """d sin(x) = cos(x) dx: a relative error r on angles up to x is an absolute error up to r x, and
    sin and cos are at most 1, so r x relative at worst; a square doubles a relative error."""
    angles = {"golden_dtype": "float32", "test_dtype": "float32", "golden_max": 7.0, "golden_min": 0.0}
    assert amplification("Tensor.sin", [angles]) == 7.0
    assert amplification("Torch.cos", [{**angles, "golden_max": 0.5, "golden_min": -12.0}]) == 12.0
    assert amplification("Tensor.pow", []) == 2.0
    assert amplification("Tensor.add", [angles]) == 1.0
    assert amplification("Tensor.sinh", [angles]) == 1.0  # no angle


def test_a_large_incoming_error_allows_its_second_order() -> None:
    """(1 + e)**2 - 1 = 2e + e**2: at e = 0.16 the first order alone allows 0.32 of a square's 0.3456."""
    assert explained_bound(0.16, 0.0) >= (1.16**2 - 1)
    assert explained_bound(0.001, 0.0) == pytest.approx(GROWTH * 0.001, rel=3e-3)  # nothing at drift levels


def _stats(norm_rel: float, **fields: object) -> dict[str, object]:
    return {
        "golden_dtype": "bfloat16",
        "test_dtype": "bfloat16",
        "stats_only": True,
        "norm_rel_diff": norm_rel,
        **fields,
    }


def test_a_statistics_failure_is_weighed_by_its_norm_against_its_inputs() -> None:
    """A norm keeps its output's L2 norm nearly exact while its minimum moves with its input's error
    (a 1 % input moves it by 3 %): failing by that extreme, its norm no further off than its inputs'
    explain, it is not where the error starts. Its norm far beyond its inputs' is."""
    row = {"golden_node": "k_norm", "outputs_passed": False, "golden_type": "RMSNorm"}
    facts = Facts(row, (), True, "files", None, None)  # type: ignore[arg-type]
    moved = by_statistics(facts, [_stats(3e-6, min_diff=0.063)], [_stats(0.0114)])  # type: ignore[list-item]
    assert moved is not None and not moved.local and "moved with its inputs" in moved.reason
    own = by_statistics(facts, [_stats(0.032)], [_stats(0.002)])  # type: ignore[list-item]
    assert own is None  # 3.2 % against 2 x 0.2 % + rounding: the thresholds call it local
    passing_inputs = Facts(row, (), False, "files", None, None)  # type: ignore[arg-type]
    assert by_statistics(passing_inputs, [_stats(3e-6)], [_stats(0.0114)]) is None  # type: ignore[list-item]


def test_an_attention_whose_inputs_were_not_dumped_is_judged_against_what_ran_before() -> None:
    """msit keeps no keyword argument: an attention has no input files. Where an operator inside it
    takes in far more error than everything before it at the token carried (a value cache read
    wrong), its own code is at fault; where something before it carried as much, it is not."""
    tree = NodeTree(
        "root",
        {
            "root": Node("root", "Model", None, 0, ["norm", "attn"]),
            "norm": Node("norm", "RMSNorm", "root", 1),
            "attn": Node("attn", "Attention", "root", 1, ["q", "o"]),
            "q": Node("q", "Linear", "attn", 2),
            "o": Node("o", "Linear", "attn", 2),
        },
    )

    def judged(before: float) -> str | None:
        walk = TokenWalk(0, Judging(tree, whole_inputs=False))
        rows = {
            "norm": (before, before, "files"),  # (input error, output error)
            "attn": (None, 0.16, None),
            "q": (before, before, "files"),
            "o": (0.186, 0.16, "files"),
        }
        for name in ("norm", "attn", "q", "o"):
            given, out, _ = rows[name]
            tensors = [
                {
                    "golden_node": name,
                    "slot": "output.0",
                    "role": "output",
                    "rel_euclidean": out,
                    "golden_dtype": "float32",
                    "test_dtype": "float16",
                    "numel": 32,
                    "golden_shape": "[1, 32]",
                },
            ]
            if given is not None:
                tensors.append(
                    {
                        "golden_node": name,
                        "slot": "input.0",
                        "role": "input",
                        "rel_euclidean": given,
                        "golden_dtype": "float32",
                        "test_dtype": "float16",
                        "numel": 32,
                        "golden_shape": "[1, 32]",
                    }
                )
            row = {
                "token": 0,
                "golden_node": name,
                "golden_type": tree.nodes[name].type,
                "test_type": tree.nodes[name].type,
                "outputs_passed": out < 0.05,
                "inputs_passed": True if given is not None else None,
            }
            walk.judge(row, tensors)  # type: ignore[arg-type]
        walk.finish(lambda name: [], lambda name: None)
        return walk.verdicts["attn"].label

    assert judged(0.0003) == "local"  # 0.186 against 0.0003 before it
    assert judged(0.1) != "local"  # 0.186 within 2 x 0.1 and its second order


def _node(name: str, failing: bool, inputs_pass: bool | None, integers_differ: bool = False) -> Facts:
    """A statistics dump's node: whether its outputs and its dumped inputs pass the thresholds."""
    row = {"golden_node": name, "outputs_passed": not failing, "stats_only": True}
    return Facts(row, (), inputs_pass, "files", None, None, integers_differ)  # type: ignore[arg-type]


def test_a_statistics_dump_names_the_module_whose_own_code_starts_the_error() -> None:
    """An attention's output is off while its inputs pass; its projections and norms pass, and its
    o_proj computes from an input nothing dumped made (the score arithmetic between them): the
    threshold rule's "inputs pass, output fails" holds for the attention and for no operator inside
    it, so the attention is where the error starts, said as the threshold rule."""
    attention = _node("attn", failing=True, inputs_pass=True)
    projections = [_node(n, failing=False, inputs_pass=True) for n in ("q_proj", "k_proj", "v_proj")]
    o_proj = _node("o_proj", failing=True, inputs_pass=False)
    found = by_glue_thresholds(attention, [*projections, o_proj], before_passes=True, cache=False)
    assert found is not None and found.local and found.rule == "threshold"
    assert "o_proj" in found.reason and "threshold rule" in found.reason
    at_decode = by_glue_thresholds(attention, [*projections, o_proj], before_passes=True, cache=True)
    assert at_decode is not None and "KV cache" in at_decode.reason
    # an operator inside fails first on passing inputs: that operator is local, not the module's code
    v_wrong = _node("v_proj", failing=True, inputs_pass=True)
    assert by_glue_thresholds(attention, [*projections[:2], v_wrong, o_proj], True, False) is None
    # what came in fails (the module's inputs, or what stood for inputs not dumped): nothing is said
    fed_wrong = _node("attn", failing=True, inputs_pass=False)
    assert by_glue_thresholds(fed_wrong, [*projections, o_proj], True, False) is None
    assert by_glue_thresholds(attention, [*projections, o_proj], before_passes=False, cache=False) is None
    # other token ids or experts fed an operator inside: a change, not an error
    routed = _node("k_proj", failing=False, inputs_pass=True, integers_differ=True)
    assert by_glue_thresholds(attention, [projections[0], routed, o_proj], True, False) is None

    # the norms known: an input whose norm is no further off than what came before explains, grown,
    # plus a rounding (2 x 1 % + bf16's), crossed its tolerance by rounding alone; one beyond it did not
    def known(facts: Facts, came_in: float | None, out: float | None) -> Facts:
        row = {**facts.row, "golden_dtype": "float32", "test_dtype": "bfloat16"}
        return Facts(row, (), facts.inputs_passed, "files", came_in, out)  # type: ignore[arg-type]

    measured = [known(p, 0.001, 0.01) for p in projections]
    near = by_glue_thresholds(
        known(attention, 0.001, 0.05), [*measured, known(o_proj, 0.02, 0.05)], True, False
    )
    assert near is None
    far = by_glue_thresholds(
        known(attention, 0.001, 0.05), [*measured, known(o_proj, 0.06, 0.05)], True, False
    )
    assert far is not None and far.local and "6.000e-02 off against 1.000e-02" in far.reason
    # a module that passes is not where anything starts
    passing = _node("attn", failing=False, inputs_pass=True)
    assert by_glue_thresholds(passing, [*projections, o_proj], True, False) is None


def test_the_input_cosine_is_the_worst_measured_and_none_where_none_is() -> None:
    """The report's "its inputs: cosine" line: the lowest cosine among the inputs that have one (an
    embedding's token ids have none), and none, not 0, where no input has one (a statistics dump):
    0 read as inputs wholly unlike the golden's."""
    tensors = [
        {**_same("embed", "input.0", "input", 0), "cosine": None, "golden_dtype": "int64"},
        {**_same("norm", "input.0", "input", 1), "cosine": None},  # statistics only
        {**_same("norm", "output.0", "output", 1), "cosine": None},
        {**_same("mlp", "input.0", "input", 2), "cosine": 0.97},
        {**_same("mlp", "input.1", "input", 2), "cosine": None, "golden_dtype": "int64"},
        {**_same("mlp", "input.2", "input", 2), "cosine": 0.99},
    ]
    meta = to_frame(
        [
            {"token": 0, "order": i, "depth": 1, "golden_node": n, "test_node": n}
            for i, n in enumerate(("embed", "norm", "mlp"))
        ],
        NODE_META_SCHEMA,
    )
    found = dict(
        node_frame(to_frame(tensors, TENSOR_SCHEMA), meta).select("golden_node", "input_cosine").iter_rows()
    )
    assert found == {"embed": None, "norm": None, "mlp": 0.97}
