"""Replays of a TorchAir run's operators: GE's ops in the GE dump (their IR's inputs, the graph
text's attributes) and aten's in the FX dump (numbers saved as arrays, bf16 saved as float32).

Each GE reference is checked against torch computing the IR's documented formula (a second
implementation, not ours); the fixture's runs (tests/data/torchair, scripts/make_torchair_fixtures.py)
check that every op of a clean run with a reference agrees with it, and that the faulty MatMul is
named by its replay."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.dtypes import bfloat16_if_exact
from tui_acc.dumps.torchair.graph_text import read_graph
from tui_acc.replay.call import Call, ReplayImpossible
from tui_acc.replay.registry import Registry
from tui_acc.reports.pair import build_report
from tui_acc.verdicts.replay_check import replay_side

REGISTRY = Registry(entry_points=False)
RNG = np.random.default_rng(7)


def _replayed(key: str, *inputs: np.ndarray, fmt: str = "torchair-ge", **attrs) -> np.ndarray:
    entry = REGISTRY.find(key)
    assert entry is not None, key
    call = Call(name=key, type=key, format=fmt, positional=dict(enumerate(inputs)), keyword=attrs)  # type: ignore[arg-type]
    return np.asarray(entry.load()(call).values)


def _close(ours: np.ndarray, theirs: torch.Tensor) -> None:
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-12)


def _t(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values).double()


@pytest.mark.parametrize(("left", "right"), [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_v2_transposes_as_its_attributes_say_and_adds_the_bias(left: bool, right: bool) -> None:
    a, b, bias = RNG.normal(size=(3, 5)), RNG.normal(size=(5, 4)), RNG.normal(size=4)
    x1, x2 = (a.T.copy() if left else a), (b.T.copy() if right else b)
    ours = _replayed("GE.MatMulV2", x1, x2, bias, transpose_x1=left, transpose_x2=right)
    _close(ours, _t(a) @ _t(b) + _t(bias))


def test_batch_matmul_adjoints_as_its_attributes_say() -> None:
    a, b = RNG.normal(size=(2, 3, 5)), RNG.normal(size=(2, 4, 5))
    ours = _replayed("GE.BatchMatMulV2", a, b, adj_x1=False, adj_x2=True)
    _close(ours, torch.bmm(_t(a), _t(b).transpose(1, 2)))


def test_softmax_v2_over_the_axis_its_attribute_names() -> None:
    x = RNG.normal(size=(2, 3, 4))
    _close(_replayed("GE.SoftmaxV2", x, axes=[1]), torch.softmax(_t(x), dim=1))


@pytest.mark.parametrize("keep", [True, False])
def test_reduce_mean_over_its_axes_input_keeps_dims_as_told(keep: bool) -> None:
    x = RNG.normal(size=(3, 4, 5))
    ours = _replayed("GE.ReduceMean", x, np.array([-1, 0]), keep_dims=keep)
    _close(ours, _t(x).mean(dim=(0, 2), keepdim=keep))


def test_rms_norm_swish_and_real_div_follow_their_formulas() -> None:
    x, gamma = RNG.normal(size=(3, 8)), RNG.normal(size=8)
    expected = torch.nn.functional.rms_norm(_t(x), (8,), _t(gamma), eps=1e-5)
    _close(_replayed("GE.RmsNorm", x, gamma, epsilon=1e-5), expected)
    _close(_replayed("GE.Swish", x, scale=1.7), _t(x) * torch.sigmoid(1.7 * _t(x)))
    _close(_replayed("GE.RealDiv", x, np.array(2.5)), _t(x) / 2.5)


def _fused_call(parts, *inputs: np.ndarray) -> Call:
    from tui_acc.replay.call import CONSTITUENTS

    positional = dict(enumerate(inputs))
    return Call(
        name="F",
        type="AutomaticBufferFusionOp",
        format="torchair-ge",
        positional=positional,
        keyword={CONSTITUENTS: parts},
    )  # type: ignore[arg-type]


def test_a_fused_op_is_its_constituents_in_turn() -> None:
    """``Swish`` then ``Mul`` fused (the graph text's two ops, the second taking the first's output
    and an outside input): silu(x) * y, as torch computes it; ``Mul(y, y)`` takes its one outside
    input once; a constituent without a reference, inputs that do not match the outside edges and a
    fused op whose inner result leaves it too are refused by name."""
    from tui_acc.dumps.torchair.graph_text import GraphOp
    from tui_acc.dumps.torchair.graph_texts import Fused, outside_inputs

    x, y = RNG.normal(size=(3, 8)), RNG.normal(size=(3, 8))
    swish = GraphOp("Swish", "Swish", ["MatMulV2:0"], ["silu"], [0], [], attrs={"scale": 1.0})
    mul = GraphOp("Mul_8", "Mul", ["Swish:0", "MatMulV2_1:0"], ["mul"], [0], [])
    entry = REGISTRY.find("GE.fused")
    assert entry is not None
    reference = entry.load()
    ops = (swish, mul)
    assert outside_inputs(ops) == ["MatMulV2:0", "MatMulV2_1:0"]
    ours = reference(_fused_call(Fused(ops, tuple(outside_inputs(ops)), False), x, y)).values
    _close(np.asarray(ours), torch.nn.functional.silu(_t(x)) * _t(y))
    square = GraphOp("Mul_9", "Mul", ["MatMulV2_1:0", "MatMulV2_1:0"], ["sq"], [0], [])
    twice = (swish, square)
    assert outside_inputs(twice) == ["MatMulV2:0", "MatMulV2_1:0"]
    ours = reference(_fused_call(Fused(twice, tuple(outside_inputs(twice)), False), x, y)).values
    _close(np.asarray(ours), _t(y) * _t(y))
    odd = GraphOp("Odd", "NoSuchOp", ["MatMulV2:0"], ["odd"], [0], [])
    refused = [
        (Fused((odd, mul), ("MatMulV2:0", "MatMulV2_1:0"), False), (x, y), "NoSuchOp"),
        (Fused(ops, tuple(outside_inputs(ops)), False), (x,), "1 inputs dumped"),
        (Fused(ops, tuple(outside_inputs(ops)), True), (x, y), "inner results also leave it"),
    ]
    for parts, inputs, said in refused:
        with pytest.raises(ReplayImpossible, match=said):
            reference(_fused_call(parts, *inputs))


@pytest.mark.parametrize(
    ("key", "formula"),
    [
        ("GE.Neg", torch.neg),
        ("GE.Exp", torch.exp),
        ("GE.Sqrt", lambda t: torch.sqrt(t.abs())),
        ("GE.Sigmoid", torch.sigmoid),
        ("GE.Cos", torch.cos),
        ("GE.Sin", torch.sin),
        ("GE.Rsqrt", lambda t: torch.rsqrt(t.abs())),
        ("GE.Cast", lambda t: t),
    ],
)
def test_the_elementwise_references_follow_torch(key: str, formula) -> None:
    x = RNG.normal(size=(3, 5))
    argument = np.abs(x) if key in ("GE.Sqrt", "GE.Rsqrt") else x
    _close(_replayed(key, argument), formula(_t(x)))


def test_sub_and_reduce_sum_follow_torch_and_an_integer_cast_is_not_replayed() -> None:
    x, y = RNG.normal(size=(3, 5)), RNG.normal(size=(3, 5))
    _close(_replayed("GE.Sub", x, y), _t(x) - _t(y))
    _close(_replayed("GE.ReduceSum", x, np.array([1]), keep_dims=False), _t(x).sum(dim=1))
    with pytest.raises(ReplayImpossible, match="no axes"):
        _replayed("GE.ReduceSum", x, np.array([], dtype=np.int64))
    entry = REGISTRY.find("GE.Cast")
    assert entry is not None
    to_int = Call(name="Cast", type="Cast", format="torchair-ge", positional={0: x}, output_dtype="int32")
    with pytest.raises(ReplayImpossible, match="int32 output"):
        entry.load()(to_int)


def test_a_sampled_matmul_with_a_bias_computes_the_sampled_rows_and_columns() -> None:
    """A large output replayed on a sample of its rows and, for a large x2, of its columns: the
    values are those rows and columns of the whole product, the bias's columns with them."""
    from tui_acc.replay.sampling import Sample

    a, b, bias = RNG.normal(size=(64, 48)), RNG.normal(size=(48, 40)), RNG.normal(size=40)
    rows = np.array([3, 17, 40])
    entry = REGISTRY.find("GE.MatMulV2")
    assert entry is not None
    call = Call(
        name="MatMulV2", type="MatMulV2", format="torchair-ge", positional={0: a, 1: b, 2: bias},
        keyword={"transpose_x1": False, "transpose_x2": False}, output_shape=(64, 40),
        sample=Sample(rows, 64),
    )  # fmt: skip
    replayed = entry.load()(call)
    whole = (_t(a) @ _t(b) + _t(bias)).numpy()
    columns = replayed.columns if replayed.columns is not None else np.arange(40)
    np.testing.assert_allclose(replayed.values, whole[np.ix_(rows, columns)], rtol=1e-12, atol=1e-12)
    wrong_bias = dict(call.positional) | {2: RNG.normal(size=(2, 40))}
    with pytest.raises(ReplayImpossible, match="bias"):
        entry.load()(Call(**{**call.__dict__, "positional": wrong_bias}))


def test_an_attribute_the_graph_text_lacks_takes_the_irs_default_and_says_so() -> None:
    a, b = RNG.normal(size=(3, 5)), RNG.normal(size=(5, 4))
    entry = REGISTRY.find("GE.MatMulV2")
    assert entry is not None
    call = Call(name="MatMulV2", type="MatMulV2", format="torchair-ge", positional={0: a, 1: b})
    replayed = entry.load()(call)
    _close(np.asarray(replayed.values), _t(a) @ _t(b))
    assert any("transpose_x2 not in the graph text: False" in note for note in replayed.notes)


def test_aten_numbers_the_fx_dump_saved_as_arrays_are_numbers_again() -> None:
    """The FX dump saves ``_softmax(x, 0, False)``'s 0 and False as 0-d arrays, ``mean.dim``'s [-1] as
    a 1-d one."""
    x = RNG.normal(size=(3, 4))
    softmax = _replayed("aten._softmax.default", x, np.array(0), np.array(False), fmt="torchair-fx")
    _close(softmax, torch.softmax(_t(x), dim=0))
    mean = _replayed("aten.mean.dim", x, np.array([-1]), np.array(True), fmt="torchair-fx")
    _close(mean, _t(x).mean(dim=-1, keepdim=True))


def test_bf16_saved_as_float32_is_read_back_as_bf16_and_nothing_else_is() -> None:
    bf16 = RNG.normal(size=(4, 3)).astype(ml_dtypes.bfloat16)
    back = bfloat16_if_exact(bf16.astype(np.float32))
    assert back.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back.astype(np.float32), bf16.astype(np.float32))
    genuine = RNG.normal(size=(4, 3)).astype(np.float32)
    assert bfloat16_if_exact(genuine) is genuine


def test_graph_text_attributes_are_read_as_ge_prints_them(tmp_path: Path) -> None:
    """An OpDef's attr map as protobuf text prints it (bool, int, float, string, an int list)."""
    path = tmp_path / "dynamo_original_graph_1_rank_0_pid_1_ts_1.txt"
    path.write_text(
        'op { name: "S" type: "SoftmaxV2"\n'
        '  attr { key: "axes" value { list { i: -1 i: 2 val_type: VT_LIST_INT } } }\n'
        '  attr { key: "half_to_float" value { b: true } }\n'
        '  attr { key: "offset_x" value { i: -3 } }\n'
        '  attr { key: "epsilon" value { f: 1e-06 } }\n'
        '  attr { key: "reduce" value { s: "update" } } }\n',
        encoding="utf-8",
    )
    attrs = read_graph(path, _policy(tmp_path)).ops["S"].attrs
    assert attrs == {
        "axes": [-1, 2],
        "half_to_float": True,
        "offset_x": -3,
        "epsilon": 1e-6,
        "reduce": "update",
    }


def _policy(root: Path):
    from tui_acc.dumps.policy import LoadPolicy

    return LoadPolicy(root)


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


@pytest.mark.parametrize("side", ["ge-clean", "fx"])
def test_every_op_of_a_clean_run_with_a_reference_agrees_with_it(llama: Path, side: str) -> None:
    """No false alarm: each GE op (and each FX aten node) a reference exists for, at every token, is
    within its rounding of its replay from its own inputs: matmuls, softmax, the norm's pieces."""
    index = open_dump(llama / side)
    verdicts: collections.Counter[str] = collections.Counter()
    replayed_types = set()
    for token in index.tokens:
        for node in index.tokens[token]:
            replay = replay_side(index, token, node, REGISTRY, "test")
            verdicts[replay.verdict] += 1
            assert replay.verdict != "disagrees", (token, node, replay.reason)
            if replay.verdict == "consistent":
                replayed_types.add(index.tree.nodes[node].type.split("-")[-1])
    wanted = (
        {
            "MatMulV2",
            "BatchMatMulV2",
            "SoftmaxV2",
            "ReduceMean",
            "Swish",
            "Mul",
            "Add",
            "Rsqrt",
            "Pow",
            "RealDiv",
            "AutomaticBufferFusionOp",  # the fused silu * mul, as its constituents
        }
        if side == "ge-clean"
        else {
            "aten.mm.default",
            "aten.bmm.default",
            "aten._softmax.default",
            "aten.mean.dim",
            "aten.silu.default",
        }
    )
    assert wanted <= replayed_types, wanted - replayed_types
    assert verdicts["consistent"] >= 200


def test_the_faulty_matmul_is_named_by_its_replay(llama: Path) -> None:
    case = json.loads((llama / "case.json").read_text(encoding="utf-8"))
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    op = build_report(comparison).body()["first_failing_op"]
    assert (op["test"], op["rule"], op["label"]) == (case["ge_op"], "replay", "local")
    assert op["local_error"] > 100 * op["expected_error"]


def test_the_graph_texts_attributes_reach_the_replay(llama: Path, tmp_path: Path) -> None:
    """Layer 0's query projection (a square weight) told ``transpose_x2: true`` by its graph text: its
    replay then computes x @ W.T, which its dumped output is not."""
    import shutil

    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    [text] = (ge / "msprobe_ge_dump").glob("dynamo_original_graph_2_*.txt")
    content = text.read_text(encoding="utf-8")
    start = content.index('  name: "MatMulV2"\n')
    flag = content.index('key: "transpose_x2"', start)
    value = content.index("b: false", flag)
    text.write_text(content[:value] + "b: true " + content[value + len("b: false") :], encoding="utf-8")
    index = open_dump(ge)
    token = next(t for t, (graph, _) in index.runs.items() if graph == "graph_2")
    assert replay_side(index, token, "graph_2/MatMulV2", REGISTRY, "test").verdict == "disagrees"
    assert (
        replay_side(open_dump(llama / "ge-clean"), token, "graph_2/MatMulV2", REGISTRY, "test").verdict
        == "consistent"
    )


def test_a_fault_inside_a_fused_op_is_named_by_its_replay(llama: Path, tmp_path: Path) -> None:
    """The clean run's fused silu * mul at token 2 made wrong in place (its output's first columns
    x4, its inputs as they were): the one local operator, by its replay as Swish then Mul."""
    import shutil

    from tui_acc.dumps.policy import LoadPolicy
    from tui_acc.dumps.torchair.ge_file import read_file_header

    case = json.loads((llama / "case.json").read_text(encoding="utf-8"))
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    op = case["fused"].split("/")[1]
    [path] = [
        p
        for p in ge.rglob(f"*.{op}.*")
        if p.parent.name == str(case["step"]) and p.parent.parent.parent.name == "graph_2"
    ]
    [output] = read_file_header(path, LoadPolicy(ge)).of("output")
    content = bytearray(path.read_bytes())
    values = np.frombuffer(
        bytes(content[output.offset : output.offset + output.size]), dtype=ml_dtypes.bfloat16
    )
    values = values.reshape(-1, output.shape[-1]).astype(np.float32)
    values[:, :8] *= 4.0
    content[output.offset : output.offset + output.size] = values.astype(ml_dtypes.bfloat16).tobytes()
    path.write_bytes(bytes(content))
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    rows = comparison.verdicts.token(case["token"]).rows
    local = [(r["test_node"], r["rule"]) for r in rows if r["label"] == "local"]
    assert local == [(case["fused"], "replay")]
