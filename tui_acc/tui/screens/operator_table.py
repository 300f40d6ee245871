"""The operator table's columns and its export: what the operator screen shows of each row, and the
frame ``e`` writes (no textual: the export is data)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tui_acc.pairing import NodePair
from tui_acc.rows import ANOMALY_FIELDS, NOISE_FIELDS, Row
from tui_acc.verdicts.verdict import row_failing as failing

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.metrics.schema import PolarsType

# Ordered so that at 80 columns the verdicts and the main metric are on screen: the first
# PRIORITY columns stay in view at any width; the Operator column takes the room they leave.
PRIORITY = 5
FIXED = 4  # #, Operator, In, Out: pinned on the left, the metrics scroll beside them
NAME_MIN = 12  # the Operator column's narrowest: a layer index, an ellipsis and most of a leaf
COLUMNS = (
    ("order", "#", 3),
    ("name", "Operator", 18),
    ("inputs", "In", 2),
    ("outputs", "Out", 3),
    ("cosine", "Cosine", 8),
    ("max_abs_err", "MaxAbsErr", 9),
    ("rel_euclidean", "RelEucl", 9),
    ("thousandth_ratio", "≤1e-3", 6),
    ("type", "Type", 14),
    ("shape", "Shape", 14),
)


# One dump checked on its own: what is wrong with the worst output, and its figure
SINGLE_COLUMNS = (
    ("order", "#", 3),
    ("name", "Operator", 18),
    ("inputs", "In", 2),
    ("outputs", "Out", 3),
    ("anomaly", "Kind", 8),
    ("anomaly_figure", "Figure", 14),
    ("type", "Type", 14),
    ("shape", "Shape", 14),
)
# With --baseline: the output's error over the baseline's (the verdict is against 3x or 2x it)
NOISE_COLUMN = ("noise_ratio", "×noise", 8)

STATS_COLUMNS = (
    ("order", "#", 3),
    ("name", "Operator", 18),
    ("inputs", "In", 2),
    ("outputs", "Out", 3),
    ("norm_rel_diff", "NormRel", 9),
    ("max_diff", "MaxDiff", 10),
    ("min_diff", "MinDiff", 10),
    ("mean_diff", "MeanDiff", 10),
    ("type", "Type", 14),
    ("shape", "Shape", 14),
)


# The exported operator table (``view_frame``): the pair's names, from the screen's pairs (a row not
# computed yet has them too), as column -> the NodeRow field that types it; then row fields as they are
_EXPORTED_NAMES = {
    "token": "token",
    "order": "order",
    "operator": "golden_node",
    "test_operator": "test_node",
    "type": "golden_type",
    "test_type": "test_type",
}
# the In column: where the inputs were not dumped (or overwritten in place), the verdict of what fed
# the operator, and which operator that was; label: local, contains or inherited (the Out column's L/c/i)
_EXPORTED_VERDICTS = ("inputs_passed", "inputs_effective", "inputs_from", "outputs_passed", "label")
# which rule judged it, what it measured and allowed (verdicts/rules.py), then the figures
_EXPORTED_FIGURES = (
    "rule",
    "local_error",
    "expected_error",
    "reason",
    "cosine",
    "max_abs_err",
    "rel_euclidean",
    "thousandth_ratio",
    "stats_only",
    "norm_rel_diff",
    "max_diff",
    "min_diff",
    "mean_diff",
    "shape",
    "error",
)


def operator_frame(
    token: int, rows: Sequence[tuple[int, NodePair, Row, bool]], *, with_noise: bool, single: bool
) -> pl.DataFrame:
    """The exported operator table of ``token``: one row per (order, node pair, its row, whether it
    is ◆), in the order given; with a baseline, its noise figures; for one dump checked on its own,
    each operator's anomaly. A node not computed yet has its names and types, and nulls."""
    import polars as pl

    frame = [
        {
            "token": token,
            "order": order,
            "operator": node.golden,
            "test_operator": node.test,
            "type": node.golden_type,
            "test_type": node.test_type,
            **{key: row.get(key) for key in _EXPORTED_VERDICTS},
            "first_failing": suspect,
            **{key: row.get(key) for key in _EXPORTED_FIGURES},
            **{key: row.get(key) for key in NOISE_FIELDS if with_noise},
            **{key: row.get(key) for key in ANOMALY_FIELDS if single},
        }
        for order, node, row, suspect in rows
    ]
    return pl.DataFrame(frame, schema=op_export_schema(with_noise, single))


def shown_passed(row: Row) -> bool | None:
    """The Out column's ✓ or ✗ (verdicts/labels.failing: an operator that adds error shows ✗ even
    where its output is within the thresholds)."""
    found = failing(row)
    return None if found is None else not found


def op_export_schema(with_noise: bool = False, single: bool = False) -> dict[str, PolarsType]:
    """The exported operator table's columns, each typed as the row field it shows (``NodeRow``, by
    ``schema.py``); with a baseline, its noise figures at the end; for one dump checked on its own,
    each operator's anomaly."""
    import polars as pl

    from tui_acc.metrics.schema import ANOMALY_COLUMNS, NODE_SCHEMA, NOISE_COLUMNS

    return {
        **{column: NODE_SCHEMA[field] for column, field in _EXPORTED_NAMES.items()},
        **{field: NODE_SCHEMA[field] for field in _EXPORTED_VERDICTS},
        "first_failing": pl.Boolean,  # the screen's own: the ◆ row, no field of a row
        **{field: NODE_SCHEMA[field] for field in _EXPORTED_FIGURES},
        **(NOISE_COLUMNS if with_noise else {}),
        **(ANOMALY_COLUMNS if single else {}),
    }
