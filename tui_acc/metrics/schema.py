"""The polars types of the metric rows' frames, derived from the rows' shapes (``rows.py``).

Each row shape is declared once, as a ``TypedDict``; its frame's schema (column order and polars
types) is derived from that declaration, so a row and its frame cannot disagree.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from tui_acc.rows import (
    Anomaly,
    Metrics,
    NodeMeta,
    NodeRow,
    NoiseFloor,
    Sufficient,
    TensorRow,
    TokenRow,
)

__all__ = [
    "ANOMALY_COLUMNS",
    "METRIC_COLUMNS",
    "NODE_META_SCHEMA",
    "NODE_SCHEMA",
    "NOISE_COLUMNS",
    "SUFFICIENT_COLUMNS",
    "TENSOR_SCHEMA",
    "TOKEN_SCHEMA",
    "NodeRow",
    "TensorRow",
    "TokenRow",
    "polars_schema",
    "to_frame",
]

PolarsType = type[pl.DataType] | pl.DataType
_POLARS_OF: dict[type, PolarsType] = {int: pl.Int64, float: pl.Float64, str: pl.String, bool: pl.Boolean}


def polars_schema(shape: type) -> dict[str, PolarsType]:
    """The frame schema of a row ``TypedDict``: its fields in declaration order, as polars types."""
    hints = typing.get_type_hints(shape, vars(sys.modules[shape.__module__]))
    schema = {}
    for name, hint in hints.items():
        kinds = [kind for kind in typing.get_args(hint) if kind is not types.NoneType] or [hint]
        schema[name] = _POLARS_OF[kinds[0]]
    return schema


METRIC_COLUMNS = polars_schema(Metrics)
SUFFICIENT_COLUMNS = polars_schema(Sufficient)
NOISE_COLUMNS = polars_schema(NoiseFloor)
ANOMALY_COLUMNS = polars_schema(Anomaly)
TENSOR_SCHEMA = polars_schema(TensorRow)
TOKEN_SCHEMA = polars_schema(TokenRow)
NODE_META_SCHEMA = polars_schema(NodeMeta)
NODE_SCHEMA = {name: kind for name, kind in polars_schema(NodeRow).items() if name != "provisional"}


def to_frame(rows: Sequence[Mapping[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    """Rows (dicts, extra keys ignored) as a frame with exactly ``schema``'s columns and types."""
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
