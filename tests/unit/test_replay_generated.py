"""Replay on generated dumps: the demo's msit torch pair with its weights, as msit's ``dump_weight=True``
writes them (``weights/{module}.{parameter}.pth``), an msit ATB pair whose operations take their
weights as intensors (``LinearOperation``, ``RmsNormOperation``, ``GatherOperation``) with
op_param.json beside them, and each reference the real dumps lack, against torch's own operator at
float32 and bfloat16."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import copy_without_weights, device_dir
from tui_acc.demo.model import BFLOAT16, FLOAT32, build_model
from tui_acc.dumps.msprobe.passes import api_of
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.dumps.writers.atb_bin import write_bin
from tui_acc.replay import npu_ops, torch_ops
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.registry import Registry
from tui_acc.session import CompareOptions, open_comparison
from tui_acc.verdicts.replay_check import _judged, replay_node

# --- the demo, with msit's weights/ -----------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_with_weights(demo_pair):
    return demo_pair, open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(cache=False))


@pytest.mark.parametrize(("side", "dtype"), [("golden", FLOAT32), ("test", BFLOAT16)])
def test_the_demo_dumps_every_parameter_as_msit_does(demo_pair, side: str, dtype) -> None:
    """``weights/root.{named_parameters() name}.pth`` in the device folder, each parameter once, as
    the run's model holds it (msit's ``_dump_module_weight``)."""
    weights = device_dir(getattr(demo_pair, side)) / "weights"
    expected = dict(build_model(0).to(dtype).named_parameters())
    assert sorted(p.name for p in weights.iterdir()) == sorted(f"root.{name}.pth" for name in expected)
    for name, values in expected.items():
        stored = load_tensor(weights / f"root.{name}.pth", ANYWHERE)
        assert stored.dtype == values.dtype and stored.tobytes() == values.tobytes(), name


def test_the_demos_faulty_linear_disagrees_on_the_test_side_only(demo_with_weights) -> None:
    """The README's ``p`` on the demo's culprit: replayed (not impossible) from the demo's own dumps,
    and found local: the operator itself is wrong."""
    demo, cmp = demo_with_weights
    replay = replay_node(cmp, demo.fault_token, demo.fault_module)
    assert (replay.golden.verdict, replay.test.verdict) == ("consistent", "disagrees")
    assert replay.finding == "operator" and replay.test.reference == "built-in Linear"


def test_the_demos_modules_after_the_fault_are_consistent_with_their_inputs(demo_with_weights) -> None:
    demo, cmp = demo_with_weights
    token = demo.fault_token
    names = [p.golden for p in cmp.pairing.node_pairs(token)]
    after = names[names.index(demo.fault_module) + 1 :]
    checked = {}
    for name in after:
        node_type = cmp.golden.tree.nodes[name].type
        if node_type in ("Linear", "RMSNorm", "SiLU") and node_type not in checked:
            checked[node_type] = replay_node(cmp, token, name)
    assert set(checked) == {"Linear", "RMSNorm", "SiLU"}
    for replay in checked.values():
        assert replay.finding == "inputs", (replay.golden.node, replay.golden.reason, replay.test.reason)


def test_without_weights_a_linear_module_cannot_be_replayed(demo_pair, tmp_path: Path) -> None:
    cmp = open_comparison(*copy_without_weights(demo_pair, tmp_path), CompareOptions(cache=False))
    replay = replay_node(cmp, demo_pair.fault_token, demo_pair.fault_module)
    assert replay.golden.verdict == replay.test.verdict == "impossible"
    assert replay.test.reason.startswith("weights not dumped")
    assert "replay impossible on both sides: " in replay.reading


# --- an msit ATB pair with weights as intensors -----------------------------------------------------

TOKENS, HIDDEN, VOCAB, ROWS = 2, 32, 50, 3


def _op(
    token_dir: Path, folder: str, inputs: list[torch.Tensor], output: torch.Tensor, params: dict | None
) -> None:
    node = token_dir / folder
    for k, tensor in enumerate(inputs):
        write_bin(node / "before" / f"intensor{k}.bin", from_torch(tensor.contiguous()))
    write_bin(node / "after" / "outtensor0.bin", from_torch(output.contiguous()))
    if params is not None:
        (node / "op_param.json").write_text(json.dumps(params), encoding="utf-8")


def _atb_run(root: Path, dtype: torch.dtype, faulty: bool) -> Path:
    """Gather -> RmsNorm -> Linear (+bias) -> swish -> add, and a Linear with no weight dumped, each
    computed by torch at ``dtype``; with ``faulty`` the first Linear's last 8 columns are zeroed."""
    rng = np.random.default_rng(7)

    def tensor(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)

    table, gamma = tensor(VOCAB, HIDDEN), 1 + 0.1 * tensor(HIDDEN)
    weight, bias, weight2 = tensor(HIDDEN, HIDDEN) / 6, tensor(HIDDEN) / 10, tensor(HIDDEN, HIDDEN) / 6
    device = root / "msit_dump_20250101_000000" / "tensors" / "0_4242"
    for token in range(TOKENS):
        ids = torch.from_numpy(rng.integers(0, VOCAB, ROWS)).to(torch.int64)
        at = device / str(token)
        emb = table[ids]
        _op(at, "0_GatherOperation", [table, ids], emb, {"axis": 0})
        normed = F.rms_norm(emb.float(), (HIDDEN,), gamma.float(), 1e-5).to(dtype)
        _op(at, "1_RmsNormOperation", [emb, gamma], normed, {"layerType": 1, "normParam": {"epsilon": 1e-5}})
        linear = F.linear(normed, weight, bias)
        if faulty and token == 1:
            linear = linear.clone()
            linear[:, -8:] = 0
        _op(at, "2_LinearOperation", [normed, weight, bias], linear, {"transposeB": True, "hasBias": True})
        swish = F.silu(linear.float()).to(dtype)
        _op(at, "3_ActivationOperation", [linear], swish, {"activationType": 4, "scale": 1.0})
        added = (swish.float() + emb.float()).to(dtype)
        _op(at, "4_ElewiseOperation", [swish, emb], added, {"elewiseType": 8})
        _op(at, "5_LinearOperation", [added], F.linear(added, weight2), None)  # its weight not dumped
        _op(at, "6_ActivationOperation", [added], added, None)  # no op_param.json: the type is unknown
        _op(at, "7_ElewiseOperation", [added], added, {"elewiseType": 8})  # its second operand not dumped
        _op(at, "8_LinearOperation", [added, weight2[:, :8]], linear, {"transposeB": True})  # wrong weight
        _op(at, "9_RmsNormOperation", [emb, gamma], normed, {})  # epsilon not in its op_param.json
        halved = (added.float() * 0.5).to(dtype)
        _op(at, "10_ElewiseOperation", [added], halved, {"elewiseType": 2, "mulsParam": {"varAttr": 0.5}})
        _op(at, "11_ElewiseOperation", [added], halved, {"elewiseType": 2})  # muls, its factor not dumped
        # the test's norm called with another epsilon than the golden's: consistent with what it was told
        eps = 0.5 if faulty else 1e-5
        told = F.rms_norm(emb.float(), (HIDDEN,), gamma.float(), eps).to(dtype)
        _op(at, "12_RmsNormOperation", [emb, gamma], told, {"layerType": 1, "normParam": {"epsilon": eps}})
    return root


@pytest.fixture(scope="module")
def atb(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("atb-replay")
    golden = _atb_run(out / "golden", torch.float32, faulty=False)
    test = _atb_run(out / "test", torch.bfloat16, faulty=True)
    return open_comparison(golden, test, CompareOptions(cache=False))


def test_atb_the_faulty_linear_operation_disagrees_and_the_rest_is_consistent(atb) -> None:
    replays = {name: replay_node(atb, 1, name) for name in ("0_GatherOperation", "1_RmsNormOperation")}
    replays |= {name: replay_node(atb, 1, name) for name in ("3_ActivationOperation", "4_ElewiseOperation")}
    replays["10_ElewiseOperation"] = replay_node(atb, 1, "10_ElewiseOperation")  # muls by its varAttr
    for name, replay in replays.items():
        assert replay.finding == "inputs", (name, replay.golden.reason, replay.test.reason)
    faulty = replay_node(atb, 1, "2_LinearOperation")
    assert (faulty.golden.verdict, faulty.test.verdict) == ("consistent", "disagrees")
    assert faulty.reading == "the operator itself disagrees with its inputs"
    assert replay_node(atb, 0, "2_LinearOperation").finding == "inputs"  # the same op, a clean token


def test_atb_what_cannot_be_replayed_says_why(atb) -> None:
    no_weight = replay_node(atb, 0, "5_LinearOperation")
    assert no_weight.test.verdict == "impossible" and no_weight.test.reason.startswith("weights not dumped")
    no_params = replay_node(atb, 0, "6_ActivationOperation")
    assert no_params.test.verdict == "impossible" and no_params.test.reason.startswith("type unknown")
    one_operand = replay_node(atb, 0, "7_ElewiseOperation")
    assert one_operand.test.verdict == "impossible"
    assert one_operand.test.reason.startswith("inputs missing: y")
    no_factor = replay_node(atb, 0, "11_ElewiseOperation")
    assert no_factor.test.verdict == "impossible" and "mulsParam.varAttr" in no_factor.test.reason
    wrong_weight = replay_node(atb, 0, "8_LinearOperation")
    assert wrong_weight.test.verdict == "impossible" and wrong_weight.test.reason.startswith("shape mismatch")


def test_atb_an_operator_called_with_another_argument_than_the_golden_is_local(atb) -> None:
    replay = replay_node(atb, 0, "12_RmsNormOperation")
    assert replay.test.verdict == "consistent"  # it computes what its op_param.json says
    row = next(r for r in atb.verdicts.token(0).rows if r["golden_node"] == "12_RmsNormOperation")
    assert (row["label"], row["rule"]) == ("local", "replay")
    assert "arguments differ: normParam" in row["reason"] and "0.5" in row["reason"]


def test_atb_a_default_epsilon_is_used_and_said(atb) -> None:
    replay = replay_node(atb, 0, "9_RmsNormOperation")
    assert replay.finding == "inputs"  # ATB's default 1e-5 is the epsilon the dump was made with
    assert replay.test.notes == ("epsilon not in op_param.json: ATB's default 1e-05 assumed",)


# --- the references real dumps here lack, against torch's own operators ------------------------------


def _call(name: str, node_type: str, positional: dict, keyword: dict | None = None, params=None) -> Call:
    arrays = {k: from_torch(v) if isinstance(v, torch.Tensor) else v for k, v in positional.items()}
    kwargs = {k: from_torch(v) if isinstance(v, torch.Tensor) else v for k, v in (keyword or {}).items()}
    weights = {k: from_torch(v) for k, v in (params or {}).items()}
    return Call(name, node_type, "msprobe", arrays, kwargs, weights)


def _verdict(replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(Call("op", "op", "msprobe"), from_torch(dumped.contiguous()), "output.0")
    return _judged("test", "op", "op", gathered, replayed, "built-in").verdict


def _x(dtype: torch.dtype, *shape: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)


def _angles(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Half a row's worth of angles from ``w``; their cosines and sines at the input's dtype (as a
    model's tables are)."""
    theta = 3 * w[: x.shape[-1] // 2].float()
    return torch.cos(theta).to(x.dtype).float(), torch.sin(theta).to(x.dtype).float()


def _rope_tables(x: torch.Tensor, w: torch.Tensor, interleaved: bool) -> dict[int, torch.Tensor]:
    """r1 and r2 as a rope passes them: each angle's cosine (sine) for both members of its pair."""
    cos, sin = _angles(x, w)
    spread = (lambda t: t.repeat_interleave(2)) if interleaved else (lambda t: torch.cat((t, t)))
    return {1: spread(cos).to(x.dtype), 2: spread(sin).to(x.dtype)}


def _complex_rope(x: torch.Tensor, w: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """The rotation of each pair as a complex product (an implementation of its own, not rotate())."""
    cos, sin = _angles(x, w)
    wide = x.float()
    first, second = (wide[..., 0::2], wide[..., 1::2]) if interleaved else wide.chunk(2, -1)
    turned = torch.complex(first, second) * torch.complex(cos, sin)
    if interleaved:
        out = torch.stack((turned.real, turned.imag), dim=-1).flatten(-2)
    else:
        out = torch.cat((turned.real, turned.imag), dim=-1)
    return out.to(x.dtype)


CASES = {
    "Functional.rms_norm": (
        lambda x, w: F.rms_norm(x, (64,), w, 1e-6),
        lambda x, w: _call("Functional.rms_norm.0.forward", "rms_norm", {0: x, 1: [64], 2: w, 3: 1e-6}),
    ),
    "NPU.npu_rms_norm": (
        lambda x, w: F.rms_norm(x.float(), (64,), w.float(), 1e-6).to(x.dtype),
        lambda x, w: _call("NPU.npu_rms_norm.0.forward", "npu_rms_norm", {0: x, 1: w}, {"epsilon": 1e-6}),
    ),
    "Functional.layer_norm": (
        lambda x, w: F.layer_norm(x, (64,), w, w * 0.5, 1e-5),
        lambda x, w: _call(
            "Functional.layer_norm.0.forward", "layer_norm", {0: x, 1: [64], 2: w, 3: w * 0.5}
        ),
    ),
    "Functional.gelu": (
        lambda x, w: F.gelu(x),
        lambda x, w: _call("Functional.gelu.0.forward", "gelu", {0: x}),
    ),
    "Functional.gelu tanh": (
        lambda x, w: F.gelu(x, approximate="tanh"),
        lambda x, w: _call("Functional.gelu.0.forward", "gelu", {0: x}, {"approximate": "tanh"}),
    ),
    "NPU.npu_swiglu": (
        lambda x, w: (F.silu(x.float().chunk(2, -1)[0]) * x.float().chunk(2, -1)[1]).to(x.dtype),
        lambda x, w: _call("NPU.npu_swiglu.0.forward", "npu_swiglu", {0: x}, {"dim": -1}),
    ),
    # torch_npu.npu_add_rms_norm (op-plugin docs/context/torch_npu-npu_add_rms_norm.md): the sum
    # normalised, as torch's own rms_norm computes it
    "NPU.npu_add_rms_norm": (
        lambda x, w: F.rms_norm(x.float() + (0.5 * x).float(), (64,), w.float(), 1e-6).to(x.dtype),
        lambda x, w: _call("NPU.npu_add_rms_norm.0.forward", "npu_add_rms_norm", {0: x, 1: 0.5 * x, 2: w}),
    ),
    # torch_npu.npu_rotary_mul (op-plugin docs/context/torch_npu-npu_rotary_mul.md), against the
    # rotation written as complex multiplication: each pair (x1, x2) as x1 + i x2, times cos + i sin
    "NPU.npu_rotary_mul half": (
        lambda x, w: _complex_rope(x, w, interleaved=False),
        lambda x, w: _call(
            "NPU.npu_rotary_mul.0.forward", "npu_rotary_mul", {0: x, **_rope_tables(x, w, False)}
        ),
    ),
    "NPU.npu_rotary_mul interleave": (
        lambda x, w: _complex_rope(x, w, interleaved=True),
        lambda x, w: _call(
            "NPU.npu_rotary_mul.0.forward",
            "npu_rotary_mul",
            {0: x, **_rope_tables(x, w, True)},
            {"rotary_mode": "interleave"},
        ),
    ),
    "LlamaRMSNorm module": (
        lambda x, w: (
            w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        ),
        lambda x, w: _call(
            "Module.norm.LlamaRMSNorm.forward.0", "LlamaRMSNorm", {0: x}, params={"weight": w}
        ),
    ),
    "LayerNorm module": (
        lambda x, w: F.layer_norm(x, (64,), w, w * 0.5, 1e-5),
        lambda x, w: _call("root.ln", "LayerNorm", {0: x}, params={"weight": w, "bias": w * 0.5}),
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_reference_agrees_with_torch_and_catches_a_changed_output(case: str, dtype: torch.dtype) -> None:
    compute, make = CASES[case]
    x, w = _x(dtype, 4, 64), 1 + 0.1 * _x(dtype, 64, seed=1)
    call = make(x, w)
    entry = Registry().find(api_of(call.name), call.type)
    assert entry is not None, case
    replayed = entry.load()(call)
    dumped = compute(x, w)
    assert _verdict(replayed, dumped) == "consistent"
    broken = dumped.clone()
    broken[..., -4:] = -broken[..., -4:] - 1  # a few columns wrong
    assert _verdict(replayed, broken) == "disagrees"


def test_a_reference_that_assumes_a_default_says_so() -> None:
    x = _x(torch.float32, 2, 8)
    replayed = torch_ops.rms_norm(_call("Functional.rms_norm.0.forward", "rms_norm", {0: x, 1: [8]}))
    assert replayed.notes and "machine epsilon" in replayed.notes[0]


def test_the_rotary_mode_left_to_its_default_is_said_and_an_undocumented_one_refused() -> None:
    x, w = _x(torch.float32, 2, 8), _x(torch.float32, 8, seed=1)
    tables = _rope_tables(x, w, False)
    plain = npu_ops.npu_rotary_mul(_call("NPU.npu_rotary_mul.0.forward", "npu_rotary_mul", {0: x, **tables}))
    assert plain.notes == ("rotary_mode not recorded: torch_npu's default 'half'",)
    quarter = _call(
        "NPU.npu_rotary_mul.0.forward", "npu_rotary_mul", {0: x, **tables}, {"rotary_mode": "quarter"}
    )
    with pytest.raises(ReplayImpossible, match="quarter"):
        npu_ops.npu_rotary_mul(quarter)


@pytest.mark.parametrize(
    ("api", "said"),
    [
        ("NPU._npu_rotary_embedding", "once per process"),
        ("NPU.npu_kv_rmsnorm_rope_cache", "formulas only as images"),
        ("NPU.npu_moe_distribute_dispatch", "other ranks' tensors"),
    ],
)
def test_a_torch_npu_operator_that_cannot_be_replayed_says_why_not_type_unknown(api: str, said: str) -> None:
    entry = Registry().find(api)
    assert entry is not None and entry.origin == "built-in"
    with pytest.raises(ReplayImpossible, match=said):
        entry.load()(_call(f"{api}.0.forward", api.split(".")[1], {0: _x(torch.float32, 2, 4)}))
