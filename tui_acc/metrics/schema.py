"""Column names and polars types of the metric frames, shared by every front end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

Row = dict[str, Any]  # a tensor, node or token row: the columns of its schema below, by name

METRIC_COLUMNS: dict[str, type[pl.DataType] | pl.DataType] = {
    "cosine": pl.Float64,
    "max_abs_err": pl.Float64,
    "mean_abs_err": pl.Float64,
    "max_rel_err": pl.Float64,
    "mean_rel_err": pl.Float64,
    "rel_euclidean": pl.Float64,
    "abs_euclidean": pl.Float64,
    "rmse": pl.Float64,
    "kl": pl.Float64,
    "thousandth_ratio": pl.Float64,
    "five_thousandths_ratio": pl.Float64,
}

# Per-tensor sums from which any aggregate (a layer, a token) is exact without re-reading data.
SUFFICIENT_COLUMNS: dict[str, type[pl.DataType] | pl.DataType] = {
    "n": pl.Int64,
    "sum_gg": pl.Float64,
    "sum_tt": pl.Float64,
    "sum_gt": pl.Float64,
    "sum_dd": pl.Float64,
}

TENSOR_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "token": pl.Int64,
    "golden_node": pl.String,
    "test_node": pl.String,
    "slot": pl.String,
    "role": pl.String,
    "passed": pl.Boolean,
    **METRIC_COLUMNS,
    "numel": pl.Int64,
    "golden_dtype": pl.String,
    "test_dtype": pl.String,
    "golden_shape": pl.String,
    "test_shape": pl.String,
    "golden_nan": pl.Int64,
    "golden_inf": pl.Int64,
    "test_nan": pl.Int64,
    "test_inf": pl.Int64,
    "golden_max": pl.Float64,
    "golden_min": pl.Float64,
    "golden_mean": pl.Float64,
    "test_max": pl.Float64,
    "test_min": pl.Float64,
    "test_mean": pl.Float64,
    "golden_norm": pl.Float64,
    "test_norm": pl.Float64,
    "golden_top1": pl.Int64,
    "test_top1": pl.Int64,
    "topk_overlap": pl.Float64,
    "top1_logprob_gap": pl.Float64,
    "top1_mutual": pl.Boolean,
    "worst_index": pl.Int64,
    "worst_golden": pl.Float64,
    "worst_test": pl.Float64,
    **SUFFICIENT_COLUMNS,
    "stats_only": pl.Boolean,
    "golden_checksum": pl.String,
    "test_checksum": pl.String,
    "golden_is_nan": pl.Boolean,
    "test_is_nan": pl.Boolean,
    **{f"{s}_diff": pl.Float64 for s in ("max", "min", "mean", "norm")},
    **{f"{s}_rel_diff": pl.Float64 for s in ("max", "min", "mean", "norm")},
    "error": pl.String,
    "golden_path": pl.String,
    "test_path": pl.String,
}

TOKEN_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "token": pl.Int64,
    "passed": pl.Boolean,
    "verdict": pl.String,
    "top1_logprob_gap": pl.Float64,
    "cosine": pl.Float64,
    "kl": pl.Float64,
    "max_abs_err": pl.Float64,
    "rel_euclidean": pl.Float64,
    "golden_top1": pl.Int64,
    "test_top1": pl.Int64,
    "topk_overlap": pl.Float64,
    "golden_dtype": pl.String,
    "test_dtype": pl.String,
    "shape": pl.String,
    "node": pl.String,
    "test_node": pl.String,
    "stats_only": pl.Boolean,
    "norm_rel_diff": pl.Float64,
    "max_diff": pl.Float64,
    "mean_diff": pl.Float64,
    "error": pl.String,
}

# What a node is, before any of its tensors is compared (from the pairing).
NODE_META_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "token": pl.Int64,
    "order": pl.Int64,
    "depth": pl.Int64,
    "golden_node": pl.String,
    "test_node": pl.String,
    "golden_type": pl.String,
    "test_type": pl.String,
}

NODE_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    **NODE_META_SCHEMA,
    "inputs_passed": pl.Boolean,
    "inputs_effective": pl.Boolean,
    "inputs_from": pl.String,
    "outputs_passed": pl.Boolean,
    "params_passed": pl.Boolean,
    "suspect": pl.Boolean,
    "label": pl.String,
    "input_cosine": pl.Float64,
    "worst_output": pl.String,
    "in_place": pl.String,
    **METRIC_COLUMNS,
    "golden_dtype": pl.String,
    "test_dtype": pl.String,
    "shape": pl.String,
    "stats_only": pl.Boolean,
    "norm_rel_diff": pl.Float64,
    "max_diff": pl.Float64,
    "min_diff": pl.Float64,
    "mean_diff": pl.Float64,
    "error": pl.String,
}


def to_frame(rows: Sequence[Mapping[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    """Rows (dicts, extra keys ignored) as a frame with exactly ``schema``'s columns and types."""
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
