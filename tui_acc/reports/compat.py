"""``tui-acc report --compat msit|msprobe --csv FILE``: a whole comparison in those tools' columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.metrics.compat import MSIT_COLUMNS, MSPROBE_COLUMNS, msit_metrics, msprobe_metrics
from tui_acc.pairing import NodePair, TensorPair
from tui_acc.session import Comparison


def compat_frame(cmp: Comparison, tool: str) -> pl.DataFrame:
    """Every paired tensor with data, in ``tool``'s columns and arithmetic."""
    rows = list(_msit_rows(cmp) if tool == "msit" else _msprobe_rows(cmp))
    columns = MSIT_COLUMNS if tool == "msit" else MSPROBE_COLUMNS
    return pl.DataFrame(
        [{c: _cell(r.get(c, "")) for c in columns} for r in rows], schema=dict.fromkeys(columns, pl.String)
    )


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _pairs(cmp: Comparison) -> Iterator[tuple[NodePair, TensorPair]]:
    for token in cmp.pairing.tokens:
        for node in cmp.pairing.node_pairs(token):
            for pair in node.tensors:
                if pair.golden.has_data and pair.test.has_data:
                    yield node, pair


def _msit_rows(cmp: Comparison) -> Iterator[dict[str, Any]]:
    """msit compares outputs only (``output*``/``outtensor*``, nested tuples dropped)."""
    data_id = 0
    for node, pair in _pairs(cmp):
        if pair.role != "output" or pair.golden.slot.count("_") >= 2:
            continue
        row: dict[str, Any] = {
            "token_id": pair.token,
            "data_id": data_id,
            "golden_data_path": str(pair.golden.path),
            "golden_op_type": node.golden_type,
            "my_data_path": str(pair.test.path),
            "my_op_type": node.test_type,
        }
        data_id += 1
        try:
            golden, test = cmp.engine.load_pair(pair)
        except (TensorLoadError, ValueError) as exc:
            yield {**row, "cmp_fail_reason": str(exc)}
            continue
        # msit writes torch's dtype (torch.float32)
        row.update(golden_dtype=f"torch.{dtype_name(golden)}", golden_shape=str(list(golden.shape)))
        row.update(my_dtype=f"torch.{dtype_name(test)}", my_shape=str(list(test.shape)))
        if golden.size != test.size:
            continue  # msit drops rows whose element counts differ (docs/formats.md §4.3)
        row.update(msit_metrics(golden, test))
        yield row


def _msprobe_rows(cmp: Comparison) -> Iterator[dict[str, Any]]:
    for pairs in _by_node(cmp):
        rows = []
        for pair in pairs:
            row: dict[str, Any] = {
                "NPU Name": _name(pair.test_node, pair.slot),
                "Bench Name": _name(pair.golden_node, pair.slot),
            }
            try:
                golden, test = cmp.engine.load_pair(pair)
            except (TensorLoadError, ValueError) as exc:
                rows.append(
                    {**row, "Result": "error", "Err_message": json.dumps([str(exc)]), "_role": pair.role}
                )
                continue
            row.update(
                {"NPU Dtype": f"torch.{dtype_name(test)}", "Bench Dtype": f"torch.{dtype_name(golden)}"}
            )
            row.update(
                {"NPU Tensor Shape": str(list(test.shape)), "Bench Tensor Shape": str(list(golden.shape))}
            )
            row.update(_native_stats("NPU", test))
            row.update(_native_stats("Bench", golden))
            if golden.size == test.size:
                row.update(msprobe_metrics(golden, test))
            row["_role"] = pair.role
            rows.append(row)
        _msprobe_result(rows)
        for row in rows:
            row.pop("_role", None)
            yield row


def _by_node(cmp: Comparison) -> Iterator[list[TensorPair]]:
    """The tensors with data of each call (msprobe judges a call's inputs and outputs together)."""
    for token in cmp.pairing.tokens:
        for node in cmp.pairing.node_pairs(token):
            pairs = [p for p in node.tensors if p.golden.has_data and p.test.has_data]
            if pairs:
                yield pairs


def _name(node: str, slot: str) -> str:
    return f"{node}.{slot}"


def _native_stats(side: str, tensor: Any) -> dict[str, Any]:
    """Max/min/mean/norm in the tensor's own dtype, as msprobe's dump records them (in torch, whose
    reductions decide the digits)."""
    from tui_acc.dumps.torchfile.arrays import require_torch, to_torch

    torch = require_torch("report --compat msprobe")

    tensor = to_torch(tensor)
    if tensor.numel() == 0:
        return {}
    if tensor.dtype == torch.bool:
        return {f"{side} max": bool(tensor.any()), f"{side} min": bool(tensor.all())}
    stats: dict[str, Any] = {f"{side} max": tensor.max().item(), f"{side} min": tensor.min().item()}
    if tensor.is_floating_point():
        stats[f"{side} mean"] = tensor.mean().item()
        stats[f"{side} l2norm"] = torch.linalg.vector_norm(tensor).item()
    else:
        stats[f"{side} mean"] = None
        stats[f"{side} l2norm"] = None
    return stats


def _msprobe_result(rows: list[dict[str, Any]]) -> None:
    """msprobe's verdicts (docs/formats.md §4.5): per-row checks, and per-call checks on the outputs.

    A row is an error when its dtype (outside qkv/gate_up names) or shape differs; a call's
    outputs are an error when its inputs' one-thousandth ratio is high (> 0.9) and the outputs'
    low (< 0.1), a warning when the cosine drops by more than 0.1 from inputs to outputs.
    """
    for row in rows:
        messages = []
        if row.get("NPU Dtype") != row.get("Bench Dtype") and not any(
            k in row["Bench Name"] for k in ("qkv", "gate_up")
        ):
            messages.append("The dtype of NPU and Bench are inconsistent.")
        if row.get("NPU Tensor Shape") != row.get("Bench Tensor Shape"):
            messages.append("The shape of NPU and Bench are inconsistent.")
        if row.get("Result") != "error":
            row["Result"] = "error" if messages else "pass"
            row["Err_message"] = json.dumps(messages)
    inputs = [
        r
        for r in rows
        if r["_role"] in ("input", "param") and isinstance(r.get("One Thousandth Err Ratio"), float)
    ]
    outputs = [
        r for r in rows if r["_role"] == "output" and isinstance(r.get("One Thousandth Err Ratio"), float)
    ]
    if not (inputs and outputs):
        return
    call_level, call_message = None, ""
    if (
        min(r["One Thousandth Err Ratio"] for r in inputs) > 0.9
        and min(r["One Thousandth Err Ratio"] for r in outputs) < 0.1
    ):
        call_level, call_message = (
            "error",
            "The output's one thousandth err ratio drops while the inputs' is high.",
        )
    else:
        in_cos = [r["Cosine"] for r in inputs if isinstance(r.get("Cosine"), float)]
        out_cos = [r["Cosine"] for r in outputs if isinstance(r.get("Cosine"), float)]
        if in_cos and out_cos and min(in_cos) > 0.9 and min(in_cos) - min(out_cos) > 0.1:
            call_level, call_message = (
                "warning",
                "The output's cosine drops by more than 0.1 from the inputs'.",
            )
    if call_level is not None:
        for row in outputs:
            if row["Result"] != "error":
                row["Result"] = call_level
            row["Err_message"] = json.dumps([*json.loads(row["Err_message"]), call_message])
