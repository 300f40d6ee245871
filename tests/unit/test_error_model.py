"""The verdicts' error model on its own: rounding bounds, sampled replay, the rules on hand-made rows.

Every expectation comes from the arithmetic (a bf16 rounding is at most u = 2**-8 relative), never
from digits a CPU's floating-point path decides.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tui_acc.replay.call import Call, Replayed
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.sampling import ELEMENTS, plan
from tui_acc.replay.torch_ops import linear, rms_norm_module, silu
from tui_acc.tolerances.errors import modelled
from tui_acc.tolerances.masks import masked
from tui_acc.tolerances.rounding import MARGIN, expected_local, local_bound, one_rounding
from tui_acc.tolerances.thresholds import Thresholds, effective_bounds, implied_rel_euclidean, tensor_passed
from tui_acc.verdicts.replay_check import _judged
from tui_acc.verdicts.rules import Facts, by_error_model, by_weights

BF16 = 2.0**-8


def test_rounding_bounds_follow_the_unit_roundoff():
    assert one_rounding("bfloat16") == pytest.approx(BF16 / math.sqrt(3))
    assert one_rounding("torch.float16") == pytest.approx(2.0**-11 / math.sqrt(3))
    assert one_rounding("int64") == 0.0 and local_bound("int64") == 0.0
    assert local_bound("bfloat16") == pytest.approx(MARGIN * BF16 / math.sqrt(3))
    # float32 accumulation hardly matters at bf16, and grows with the reduction and its cancellation
    assert expected_local("bfloat16", 4096) < 1.001 * expected_local("bfloat16")
    assert expected_local("float32", 4096) > 30 * expected_local("float32", 1)
    assert expected_local("float32", 4096, condition=10) > 9 * expected_local("float32", 4096)


def _bf16(values: np.ndarray) -> np.ndarray:
    return values.astype(ml_dtypes.bfloat16)


def _replayed(call: Call, output: np.ndarray, reference=linear) -> object:
    gathered = Gathered(call, output, "output.0")
    return _judged("test", call.name, call.type, gathered, reference(call), "built-in")


def _linear_call(x: np.ndarray, weight: np.ndarray, output: np.ndarray, sample: bool) -> Call:
    return Call(
        "Functional.linear.0.forward",
        "linear",
        "msprobe",
        positional={0: x, 1: weight},
        output_dtype="bfloat16",
        output_shape=tuple(output.shape),
        precision=np.float32,
        sample=plan(tuple(output.shape), "Functional.linear.0.forward") if sample else None,
    )


@pytest.fixture(scope="module")
def bf16_linear():
    """A bf16 linear computed correctly (float32 accumulation, one rounding), and its inputs."""
    rng = np.random.default_rng(7)
    # an output of 2**17 elements: its rows are sampled; the whole of it fits the replay's budget
    x = _bf16(rng.standard_normal((2048, 32), dtype=np.float32))
    weight = _bf16(rng.standard_normal((64, 32), dtype=np.float32) * 0.2)
    exact = x.astype(np.float64) @ weight.astype(np.float64).T
    return x, weight, exact


def test_a_correct_bf16_linear_is_consistent_and_a_2_percent_fault_is_not(bf16_linear):
    x, weight, exact = bf16_linear
    correct = _bf16(exact)
    found = _replayed(_linear_call(x, weight, correct, sample=True), correct)
    assert found.verdict == "consistent"
    # one rounding: within the rms of one rounding, a third of the bound
    assert found.local_error <= one_rounding("bfloat16") <= found.tolerance / MARGIN * 1.0001
    assert found.sampled is not None and "of 2048 rows" in found.sampled
    noise = np.random.default_rng(8).standard_normal(exact.shape)
    faulty = _bf16(exact + 0.02 * np.sqrt(np.mean(exact**2)) * noise)
    assert _replayed(_linear_call(x, weight, faulty, sample=True), faulty).verdict == "disagrees"
    scaled = _bf16(exact * 1.02)  # a pure scale: cosine 1, relative error 2 %
    assert _replayed(_linear_call(x, weight, scaled, sample=True), scaled).verdict == "disagrees"


def test_the_sampled_estimate_is_close_to_the_whole(bf16_linear):
    x, weight, exact = bf16_linear
    noise = np.random.default_rng(9).standard_normal(exact.shape)
    faulty = _bf16(exact + 0.02 * np.sqrt(np.mean(exact**2)) * noise)
    whole = _replayed(_linear_call(x, weight, faulty, sample=False), faulty)
    sampled = _replayed(_linear_call(x, weight, faulty, sample=True), faulty)
    assert whole.sampled is None and sampled.sampled is not None
    # 2**16 elements sampled: their estimate is within a few percent of the whole output's
    assert sampled.local_error == pytest.approx(whole.local_error, rel=0.1)


def test_a_sample_is_seeded_by_the_name_and_only_for_large_outputs():
    assert plan((8, 64), "a") is None  # small: every element
    first, again = plan((4096, 512), "node"), plan((4096, 512), "node")
    assert first is not None and again is not None
    assert np.array_equal(first.rows, again.rows) and len(first.rows) * 512 <= ELEMENTS
    other = plan((4096, 512), "another node")
    assert other is not None and not np.array_equal(first.rows, other.rows)


def test_elementwise_and_norm_references_sample_rows():
    rng = np.random.default_rng(3)
    x = _bf16(rng.standard_normal((2048, 128), dtype=np.float32))
    out = _bf16(x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))))
    call = Call(
        "Module.mlp.act_fn.SiLUActivation.forward.0",
        "SiLUActivation",
        "msprobe",
        positional={0: x},
        output_shape=out.shape,
        precision=np.float32,
        sample=plan(out.shape, "act"),
    )
    found = _replayed(call, out, silu)
    assert found.verdict == "consistent" and found.sampled is not None
    weight = _bf16(rng.standard_normal(128, dtype=np.float32))
    wide = x.astype(np.float64)
    normed = _bf16(wide / np.sqrt(np.mean(wide**2, axis=-1, keepdims=True) + 1e-6))
    norm_out = _bf16(weight.astype(np.float64) * normed.astype(np.float64))
    norm_call = Call(
        "Module.norm.LlamaRMSNorm.forward.0",
        "LlamaRMSNorm",
        "msprobe",
        positional={0: x},
        params={"weight": weight},
        output_shape=norm_out.shape,
        precision=np.float32,
        sample=plan(norm_out.shape, "norm"),
    )
    assert _replayed(norm_call, norm_out, rms_norm_module).verdict == "consistent"


def test_the_reference_computes_the_sample_only():
    x = np.ones((4096, 64), dtype=np.float32)
    weight = np.ones((4096, 64), dtype=np.float32)
    out = np.zeros((4096, 4096), dtype=np.float32)
    call = _linear_call(x, weight, out, sample=True)
    result = linear(call)
    assert isinstance(result, Replayed) and result.rows is not None
    assert np.asarray(result.values).shape[0] == len(result.rows) < 4096


def _facts(row: dict[str, object]) -> Facts:
    """A node's facts as the rules read them, from a row naming its inputs' and outputs' errors."""
    return Facts(
        row,  # type: ignore[arg-type]
        (),
        row.get("inputs_effective"),  # type: ignore[arg-type]
        "files",
        row.get("input_error"),  # type: ignore[arg-type]
        row.get("output_error"),  # type: ignore[arg-type]
    )


def _row(**fields: object) -> dict[str, object]:
    base = {"golden_dtype": "float32", "test_dtype": "bfloat16", "golden_shape": "[1, 6, 64]", "numel": 384}
    return {**base, **fields}


def test_the_error_model_allows_what_the_inputs_carry():
    output = _row(role="output", rel_euclidean=0.012)
    row = {"input_error": 0.01, "output_error": 0.012, "test_dtype": "bfloat16"}
    found = by_error_model(_facts(row), [output])
    assert found is not None and not found.local and found.rule == "error model"
    # first order 2 x 0.01, its second order (1 + 2 x 0.01), and the output's own rounding
    assert found.expected_error == pytest.approx(2 * 0.01 * 1.02 + local_bound("bfloat16"))
    grown = {**row, "output_error": 0.05}
    assert by_error_model(_facts(grown), [{**output, "rel_euclidean": 0.05}]).local
    # from exact inputs, one rounding's worth is explained; five roundings are not
    fresh = {"input_error": 0.0, "output_error": 0.4 * BF16, "test_dtype": "bfloat16"}
    assert not by_error_model(_facts(fresh), [output]).local
    assert by_error_model(_facts({**fresh, "output_error": 5 * BF16}), [output]).local


def test_the_error_model_leaves_what_it_cannot_read():
    narrow = _row(role="output", rel_euclidean=0.13, golden_shape="[1, 1, 1]")  # a gate's one logit
    stats = _row(role="output", stats_only=True, norm_rel_diff=0.05)
    mask = _row(
        role="output", rel_euclidean=1.0, golden_min=-3.4028234663852886e38, test_min=-3.3895313892515355e38
    )
    row = {"input_error": 0.0, "output_error": 0.13, "test_dtype": "bfloat16"}
    assert not modelled(stats) and by_error_model(_facts(row), [stats]) is None
    assert masked({**mask, "golden_dtype": "float32", "test_dtype": "bfloat16"})
    assert not modelled(mask) and by_error_model(_facts(row), [mask]) is None
    assert (
        by_error_model(_facts({"output_error": 0.1}), [_row(role="output", rel_euclidean=0.1)]) is None
    )  # no input
    # a single logit off 13 % from exact inputs is its own error; from inputs carrying 1 % it may be
    # cancellation amplifying them: not local
    assert by_error_model(_facts(row), [narrow]).local
    carried = by_error_model(_facts({**row, "input_error": 0.01}), [narrow])
    assert carried is not None and not carried.local and "narrow" in carried.reason


def test_a_softmax_amplifies_by_its_input_magnitude_and_a_fused_attention_is_not_modelled():
    scores = _row(role="input", rel_euclidean=0.01, golden_max=20.0, golden_min=-12.0)
    probabilities = _row(role="output", rel_euclidean=0.15)
    row = {"input_error": 0.01, "output_error": 0.15, "test_type": "Functional.softmax"}
    # 1 % on scores up to 20 is up to 20 % on the probabilities: transmission, not a fault
    softmax = by_error_model(_facts(row), [probabilities], [scores])
    assert softmax is not None and not softmax.local
    assert softmax.expected_error == pytest.approx(2 * 20 * 0.01 * 1.02 + local_bound("bfloat16"))
    worse = {**probabilities, "rel_euclidean": 0.5}
    assert by_error_model(_facts({**row, "output_error": 0.5}), [worse], [scores]).local
    # the same numbers through a linear map are a fault
    assert by_error_model(_facts({**row, "test_type": "Functional.linear"}), [probabilities], [scores]).local
    # a mask's fill weighs nothing after exp: the largest score decides, not the most negative
    masked_scores = {**scores, "golden_min": -1e9}
    assert (
        by_error_model(_facts(row), [probabilities], [masked_scores]).expected_error == softmax.expected_error
    )
    fused_types = (
        "Functional.scaled_dot_product_attention",
        "PagedAttentionOperation",
        "NPU.npu_fusion_attention",
        "NPU.npu_fused_infer_attention_score",
        "Functional.multi_head_attention_forward",
        "MultiLatentAttentionOperation",
    )
    for fused in fused_types:
        assert by_error_model(_facts({**row, "test_type": fused}), [probabilities], [scores]) is None
    # a module named for attention is judged against what is inside it, not left out
    assert (
        by_error_model(_facts({**row, "test_type": "LlamaSdpaAttention"}), [probabilities], [scores])
        is not None
    )


def test_partial_sums_of_ranks_count_their_roundings():
    # a row-parallel output summed from 4 ranks' bf16 partials was rounded 5 times
    output = _row(role="output", rel_euclidean=0.01)
    row = {"input_error": 0.0, "output_error": 0.01, "test_dtype": "bfloat16"}
    once, summed = by_error_model(_facts(row), [output]), by_error_model(_facts(row), [output], roundings=5)
    assert once.local and not summed.local
    assert summed.expected_error == pytest.approx(local_bound("bfloat16", 1, 5))


def test_a_weight_is_judged_against_its_cast():
    rng = np.random.default_rng(11)
    golden = rng.standard_normal(4096)
    cast = golden.astype(ml_dtypes.bfloat16).astype(np.float64)
    scale = np.abs(golden).max() / 127
    quantised = (
        (np.clip(np.round(golden / scale), -127, 127) * scale).astype(ml_dtypes.bfloat16).astype(np.float64)
    )

    def weight(test: np.ndarray) -> dict[str, object]:
        error = float(np.linalg.norm(test - golden) / np.linalg.norm(golden))
        return _row(role="param", slot="parameters.weight", rel_euclidean=error)

    assert by_weights([weight(cast)], "Linear").local is False
    found = by_weights([weight(quantised)], "Linear")
    assert found is not None and found.local and found.rule == "weights"
    assert by_weights([_row(role="input", slot="input.0", rel_euclidean=0.5)], "Linear") is None


def test_scalars_and_constants_are_judged_by_their_values():
    thresholds = Thresholds()
    scalar = _row(numel=1, golden_shape="[]", cosine=1.0, rel_euclidean=0.986, max_abs_err=0.986)
    assert not tensor_passed(scalar, thresholds)
    constant = _row(cosine=1.0, rel_euclidean=0.032, golden_max=2.0, golden_min=2.0)
    assert "cosine" not in effective_bounds(constant, {"cosine": 0.99})
    # a constant is set, not accumulated: 3.2 % off is 8 bf16 ulps, beyond its rounding
    assert not tensor_passed(constant, thresholds)
    assert tensor_passed({**constant, "rel_euclidean": 0.001}, thresholds)


@pytest.mark.parametrize(
    ("golden", "test"),
    [
        (np.array(1.0, dtype=np.float32), np.array(0.014, dtype=np.float32)),  # 0-dim, 98.6 % off
        (np.full(64, 1.0, dtype=np.float32), np.full(64, 1.032, dtype=np.float32)),  # constant, 3.2 % off
    ],
)
def test_two_files_of_scalars_or_constants_fail_by_their_values(tmp_path, capsys, golden, test) -> None:
    """report on two single tensor files: a cosine of 1 no longer passes what differs."""
    import json

    from tui_acc.cli.main import main
    from tui_acc.dumps.writers.torch_file import write_torch_file

    write_torch_file(tmp_path / "golden.pt", golden)
    write_torch_file(tmp_path / "test.pt", test)
    assert main(["report", str(tmp_path / "golden.pt"), str(tmp_path / "test.pt"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["tensor"]["cosine"] == pytest.approx(1.0) and report["tensor"]["passed"] is False


def test_a_scale_error_fails_where_a_rotation_as_large_would():
    thresholds = Thresholds()
    bound = implied_rel_euclidean(0.99)
    assert bound == pytest.approx(math.sqrt(0.02))
    scaled = _row(cosine=1.0, rel_euclidean=0.2)
    assert not tensor_passed(scaled, thresholds)
    assert tensor_passed({**scaled, "rel_euclidean": 0.05}, thresholds)
    # a bound the user set on rel_euclidean is kept, not replaced by the implied one
    assert effective_bounds(scaled, {"cosine": 0.99, "rel_euclidean": 0.5})["rel_euclidean"] == 0.5


@pytest.mark.parametrize(("sampled", "rule"), [("16 of 256 rows", "error model"), (None, "replay")])
def test_only_a_sampled_replay_that_agrees_yields_to_the_error_model(sampled, rule):
    # the output fails, its inputs pass, and its error is 5x what came in: a replay of a sample may
    # have missed the rows that carry it; a replay of the whole output has not
    from tui_acc.dumps.model import Node, NodeTree
    from tui_acc.pairing.model import NodePair
    from tui_acc.verdicts.judging import Judging
    from tui_acc.verdicts.local import NodeReplay
    from tui_acc.verdicts.replay_check import SideReplay
    from tui_acc.verdicts.walk import TokenWalk

    agrees = SideReplay("test", "linear", "Linear", "consistent", "within its rounding", sampled=sampled)

    class Checks:
        def has_reference(self, node):
            return True

        def replay(self, node, focus=None):
            return NodeReplay(agrees, None)

        def inner(self, node):
            return ()  # nothing only the test has inside it

        def quantised_weight(self, node):
            return None  # no int8 weight

    nodes = {
        "root": Node("root", "Model", None, 0, ["linear"]),
        "linear": Node("linear", "Linear", "root", 1),
    }
    node = NodePair(0, "linear", "linear", "Linear", "Linear", 1, ())
    given = _row(role="input", slot="input_0", rel_euclidean=0.01, passed=True, golden_node="linear")
    output = _row(role="output", slot="output", rel_euclidean=0.05, passed=False, golden_node="linear")
    row = {
        "token": 0,
        "golden_node": "linear",
        "golden_type": "Linear",
        "test_type": "Linear",
        "outputs_passed": False,
        "inputs_passed": True,
        "input_error": 0.01,
        "inputs_effective": True,
        "output_error": 0.05,
    }
    verdict = TokenWalk(0, Judging(NodeTree("root", nodes), Checks())).judge(row, [given, output], node)
    assert verdict is not None
    assert verdict.rule == rule and (verdict.label == "local") == (rule == "error model")
