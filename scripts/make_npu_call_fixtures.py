"""Real msprobe L1 records of single torch_npu calls: ``tests/data/npu/npu-calls-msprobe-L1.tar.xz``.

Each operator is written here in torch from its API doc in Ascend/op-plugin
(``docs/context/torch_npu-<api>.md``) and wrapped by mindstudio-probe's own
``PrecisionDebugger.register_custom_api(module, api, "NPU")``, then called the way vllm-ascend calls
it, so the records hold the arguments exactly as msprobe writes them: lists of tensors
(``npu_grouped_matmul``'s x, weight, scale), a dtype passed by position (lost: msprobe records it as
``{}``), an int64 scale packed as ``npu_trans_quant_param`` packs it. Each call once as the doc
says, and once wrong by a known amount (``calls.json`` names each record and what was done to it).

    ~/tools-venv/bin/python scripts/make_npu_call_fixtures.py     (the venv: make_npu_fixtures.py)
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_model_fixtures import _pack, _relativise  # noqa: E402

OUT = REPO / "tests" / "data" / "npu"
NAME = "npu-calls-msprobe-L1"
npu = types.ModuleType("torch_npu_calls_from_docs")
WRONG = {"on": False}  # the second call of each operator is made wrong by a known amount


def npu_grouped_matmul(
    x: list[Any],
    weight: list[Any],
    *,
    scale: Any = None,
    per_token_scale: Any = None,
    group_list: Any = None,
    split_item: int = 0,
    group_type: Any = None,
    group_list_type: int = 0,
    act_type: int = 0,
    output_dtype: Any = None,
) -> list[Any]:
    """``y_i = act((x_i @ w_i) * scale_i * per_token_scale_i)``, groups of rows by ``group_list``
    (sizes with ``group_list_type`` 1), one output with ``split_item`` 2."""
    import torch

    sizes = (
        group_list.tolist()
        if group_list_type == 1
        else torch.diff(group_list, prepend=group_list.new_zeros(1)).tolist()
    )
    rows, start, parts = x[0], 0, []
    stacked = weight[0]
    for expert, size in enumerate(sizes):
        chunk = rows[start : start + size]
        total = (chunk.to(torch.int64) @ stacked[expert].to(torch.int64)).to(torch.float32)
        out = total * scale[expert].float() * per_token_scale[0][start : start + size].unsqueeze(-1)
        if WRONG["on"] and expert == 1:
            out = out * 1.05  # expert 1's rows 5 % off
        parts.append(torch.nn.functional.silu(out) if act_type == 5 else out)
        start += size
    return [torch.cat(parts).to(output_dtype)]


def npu_quantize(
    x: Any, scales: Any, zero_points: Any, dtype: Any, axis: int = 1, div_mode: bool = True
) -> Any:
    """``round(x * scales + zero_points)`` (div_mode False), saturated to int8."""
    import torch

    out = x.float() * scales.float() if not div_mode else x.float() / scales.float()
    if WRONG["on"]:
        out = out * 1.05
    return torch.round(out).clamp(-128, 127).to(torch.int8)


def npu_quant_matmul(x1: Any, x2: Any, scale: Any, *, bias: Any = None, output_dtype: Any = None) -> Any:
    """``round((x1 @ x2 + bias) * scale + offset)``, the scale and the offset packed in int64 by
    ``npu_trans_quant_param`` (the float32 in the low 32 bits, the 9-bit offset in bits 37-45)."""
    import torch

    packed = scale.tolist()
    floats = torch.tensor([struct.unpack("<f", struct.pack("<I", v & 0xFFFFFFFF))[0] for v in packed])
    offsets = torch.tensor([float(((v >> 37) & 0x1FF) - (512 if (v >> 37) & 0x100 else 0)) for v in packed])
    total = (x1.to(torch.int64) @ x2.to(torch.int64) + bias.to(torch.int64)).to(torch.float64)
    out = total * floats.double() + (offsets.double() if not WRONG["on"] else 0.0)  # wrong: offset dropped
    return torch.round(out).clamp(-128, 127).to(torch.int8)


def npu_moe_gating_top_k(
    x: Any,
    k: int,
    *,
    bias: Any = None,
    k_group: int = 1,
    group_count: int = 1,
    group_select_mode: int = 0,
    renorm: int = 0,
    norm_type: int = 0,
    routed_scaling_factor: float = 1.0,
    eps: float = 1e-20,
) -> Any:
    """sigmoid scores, the choice on scores + bias within the best groups, renormalised, scaled."""
    import torch

    scores = torch.sigmoid(x.float()) if norm_type == 1 else torch.softmax(x.float(), -1)
    chosen_on = scores + bias.float()
    grouped = chosen_on.view(x.shape[0], group_count, -1)
    worth = grouped.topk(2, -1).values.sum(-1) if group_select_mode == 1 else grouped.max(-1).values
    keep = worth.topk(k_group, -1).indices
    outside = torch.ones_like(worth, dtype=torch.bool).scatter(1, keep, False)
    chosen_on = grouped.masked_fill(outside.unsqueeze(-1), float("-inf")).view(x.shape[0], -1)
    index = chosen_on.topk(k, -1).indices
    y = scores.gather(1, index)
    if norm_type == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    factor = routed_scaling_factor * (1.02 if WRONG["on"] else 1.0)
    return (y * factor).to(x.dtype), index.to(torch.int32), scores


for _name in ("npu_grouped_matmul", "npu_quantize", "npu_quant_matmul", "npu_moe_gating_top_k"):
    setattr(npu, _name, globals()[_name])


def _packed(scale: float, offset: int) -> int:
    bits = struct.unpack("<I", struct.pack("<f", scale))[0] & 0xFFFFE000
    return bits | (1 << 46) | ((offset & 0x1FF) << 37)


def calls() -> None:
    """Each operator twice, as vllm-ascend calls it: right, then wrong (``WRONG``)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(-127, 128, (6, 32))).to(torch.int8)
    w = torch.from_numpy(rng.integers(-127, 128, (2, 32, 16))).to(torch.int8)
    scales = [torch.from_numpy(rng.uniform(1e-3, 2e-3, 16)).float() for _ in range(2)]
    per_token = torch.from_numpy(rng.uniform(1e-2, 2e-2, 6)).float()
    activations = torch.from_numpy(rng.standard_normal((4, 24))).to(torch.bfloat16)
    factor = torch.full((24,), 1 / 0.02).to(torch.bfloat16)
    q1 = torch.from_numpy(rng.integers(-127, 128, (5, 32))).to(torch.int8)
    q2 = torch.from_numpy(rng.integers(-127, 128, (32, 12))).to(torch.int8)
    bias = torch.from_numpy(rng.integers(-200, 200, 12)).to(torch.int32)
    packed = torch.tensor(
        [
            _packed(float(s), int(o))
            for s, o in zip(rng.uniform(1e-3, 3e-3, 12), rng.integers(-4, 5, 12), strict=True)
        ],
        dtype=torch.int64,
    )
    logits = torch.from_numpy(rng.uniform(-2, 2, (8, 64))).to(torch.bfloat16)
    router_bias = torch.from_numpy(rng.uniform(-0.3, 0.3, 64)).to(torch.bfloat16)
    for wrong in (False, True):
        WRONG["on"] = wrong
        npu.npu_grouped_matmul(
            [x],
            [w],
            scale=scales,
            per_token_scale=[per_token],
            group_list=torch.tensor([4, 2]),
            split_item=2,
            group_type=0,
            group_list_type=1,
            act_type=5,
            output_dtype=torch.bfloat16,
        )
        npu.npu_quantize(activations, factor, None, torch.qint8, -1, False)  # vllm-ascend's W8A8 static
        npu.npu_quant_matmul(q1, q2, packed, bias=bias)
        npu.npu_moe_gating_top_k(
            logits,
            4,
            bias=router_bias,
            k_group=2,
            group_count=4,
            group_select_mode=1,
            renorm=0,
            norm_type=1,
            routed_scaling_factor=2.5,
            eps=1e-20,
        )


def dump(out: Path) -> None:
    from msprobe.pytorch import PrecisionDebugger

    out.mkdir(parents=True)
    config = out.parent / "config.json"
    settings = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [], "level": "L1"}
    settings["tensor"] = {"scope": [], "list": [], "data_mode": ["all"]}
    config.write_text(json.dumps(settings), encoding="utf-8")
    debugger = PrecisionDebugger(config_path=str(config))
    for name in (n for n in dir(npu) if n.startswith("npu_")):
        PrecisionDebugger.register_custom_api(npu, name, "NPU")
    debugger.start()
    calls()
    debugger.stop()
    debugger.step()


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        dump(Path(sys.argv[2]))
        return 0
    from importlib.metadata import version

    with tempfile.TemporaryDirectory(prefix="tui-acc-npu-calls-") as work:
        case_dir = Path(work) / NAME
        subprocess.run(
            [sys.executable, __file__, "--dump", str(case_dir / "dump")], check=True, capture_output=True
        )
        _relativise(case_dir)
        described = {
            "case": NAME,
            "records": "each operator's .0 is called as its doc says, its .1 wrong: npu_grouped_matmul "
            "expert 1's rows 5 % off, npu_quantize 5 % off before rounding, npu_quant_matmul without "
            "the offset packed in its int64 scale, npu_moe_gating_top_k scaled 2 % more",
            "tools": {p: version(p) for p in ("mindstudio-probe", "torch")},
        }
        (case_dir / "calls.json").write_text(json.dumps(described, indent=2) + "\n", encoding="utf-8")
        archive = OUT / f"{NAME}.tar.xz"
        _pack(case_dir, archive)
        print(f"{archive.relative_to(REPO)}: {archive.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
