"""Node rows derived from a token's tensor rows (polars), before they are labelled.

Per node: the input, output and weight verdicts of its tensors, its worst output (whose metrics the
node shows), the first error, and whether a dumped input is its own output (an in-place op). The
labels (local, inherited, contains) come after, from ``tui_acc.verdicts``: they depend on the rows
before each node, so they are a walk over the tree, not a frame expression. A module's row also
gets the aggregate of every output inside it (``add_within``) once its insides are known.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import cast

import polars as pl

from tui_acc.dumps.model import NodeTree
from tui_acc.metrics.aggregate import within_each_module
from tui_acc.metrics.schema import (
    ANOMALY_COLUMNS,
    METRIC_COLUMNS,
    NODE_META_SCHEMA,
    NOISE_COLUMNS,
    TENSOR_SCHEMA,
    NodeRow,
    TensorRow,
    to_frame,
)
from tui_acc.pairing import NodePair
from tui_acc.rows import SAME_DATA_FIELDS

# A node row shows its worst output: these columns are copied from that output's row.
FROM_WORST_OUTPUT = (
    *METRIC_COLUMNS,
    "stats_only",
    "norm_rel_diff",
    "max_diff",
    "min_diff",
    "mean_diff",
    "golden_dtype",
    "test_dtype",
    *NOISE_COLUMNS,
    *ANOMALY_COLUMNS,
)

_ROLE = pl.col("role")
# an msprobe Tensor./Torch. record whose API name is not an in-place one (``add_``, ``__iadd__``)
_OUT_OF_PLACE_API = (
    r"^(?:Tensor|Torch)\.(?:__[a-hj-z][a-z0-9_]*__|[A-Za-z0-9_]*[A-Za-z0-9])\.\d+\.(?:forward|backward)$"
)
_ERROR = pl.col("error")
_PASSED = pl.col("passed")


def node_rows_of(nodes: Sequence[tuple[int, NodePair]], tensor_rows: Sequence[TensorRow]) -> list[NodeRow]:
    """Node rows (metrics, output verdict; not yet judged) of ``nodes``, each with its place in the
    token's execution order, from their tensors' rows (``node_frame``)."""
    meta = to_frame(
        [
            {
                "token": node.token,
                "order": order,
                "depth": node.depth,
                "golden_node": node.golden,
                "test_node": node.test,
                "golden_type": node.golden_type,
                "test_type": node.test_type,
            }
            for order, node in nodes
        ],
        NODE_META_SCHEMA,
    )
    inserted = {node.golden for _, node in nodes if node.inserted}
    frame = node_frame(to_frame(tensor_rows, TENSOR_SCHEMA), meta, inserted)
    return cast(list[NodeRow], frame.to_dicts())


def add_within(rows: dict[str, NodeRow], tensor_rows: Sequence[TensorRow], tree: NodeTree) -> list[NodeRow]:
    """Add to each module's row (``rows`` by golden name) the aggregate of every output inside it
    (``*_within``, ``aggregate.py``); returns the rows changed."""
    within = within_each_module(to_frame(tensor_rows, TENSOR_SCHEMA), tree)
    changed = []
    for sums in within.iter_rows(named=True):
        row = rows.get(sums.pop("golden_node"))
        if row is not None:
            row.update(cast(NodeRow, sums))
            changed.append(row)
    return changed


def node_frame(tensors: pl.DataFrame, nodes: pl.DataFrame, inserted: Collection[str] = ()) -> pl.DataFrame:
    """One row per node of ``nodes`` (NODE_META_SCHEMA, in execution order) from its tensor rows.

    ``tensors`` holds the rows of those nodes (TENSOR_SCHEMA), in each node's slot order.
    """
    rows = tensors.with_row_index("_i").with_columns(
        # the worst output first: errors, then failures, then the lowest similarity
        _rank=pl.when(_ERROR.is_not_null()).then(0).when(~_PASSED).then(1).otherwise(2),
        _similarity=pl.coalesce(
            pl.col("cosine"),
            1.0 - pl.min_horizontal(pl.col("norm_rel_diff"), pl.lit(3.0)),
            pl.lit(-2.0),
        ),
    )
    outputs = _ROLE == "output"
    failing_outputs = outputs & ~_PASSED
    worst = pl.when(outputs.any()).then(
        pl.struct("slot", "golden_shape", *FROM_WORST_OUTPUT)
        .sort_by(~outputs, "_rank", "_similarity", "_i")
        .first()
    )
    per_node = rows.group_by("golden_node").agg(
        # an input that could not be read says nothing about what came in: the others, or what fed it, do
        inputs_passed=_all_passed((_ROLE == "input") & _ERROR.is_null()),
        outputs_passed=_all_passed(outputs),
        # weights are reported, not counted as inputs: a wrong weight makes its op the suspect
        params_passed=_all_passed(_ROLE == "param"),
        # the worst input cosine measured (none where no input has one: statistics, integers)
        input_cosine=pl.col("cosine").filter(_ROLE == "input").min(),
        error=_ERROR.drop_nulls().first(),
        # its outputs fail only because a file could not be read or compared: no evidence either
        # way, so it is neither a suspect nor what judges the operator after it
        outputs_unknown=(
            (outputs.sum() > 0)
            & (failing_outputs & _ERROR.is_null()).sum().eq(0)
            & (failing_outputs.sum() > 0)
        ),
        _worst=worst,
    )
    per_node = per_node.with_columns(
        pl.col("_worst").struct.field("slot").alias("worst_output"),
        pl.col("_worst").struct.field("golden_shape").alias("shape"),
        *[pl.col("_worst").struct.field(c).alias(c) for c in FROM_WORST_OUTPUT],
    ).drop("_worst")
    joined = nodes.join(per_node, on="golden_node", how="left", maintain_order="left")
    in_place = _in_place(rows, inserted)
    return joined.join(in_place, on="golden_node", how="left", maintain_order="left").with_columns(
        outputs_unknown=pl.col("outputs_unknown").fill_null(False)
    )


def _all_passed(mask: pl.Expr) -> pl.Expr:
    """Whether every row under ``mask`` passed; null when there is none."""
    chosen = _PASSED.filter(mask)
    return pl.when(chosen.len() > 0).then(chosen.all())


def _in_place(rows: pl.DataFrame, inserted: Collection[str]) -> pl.DataFrame:
    """``"input_0=output (golden)"`` where a dumped input is its op's output, bit for bit.

    That is what an in-place op (``SiLU(inplace=True)``, ``add_``) leaves in a dump, because the
    input is saved after the op ran: comparing those "inputs" repeats the output comparison, so an
    error starting in the op would look inherited. Equal shape, dtype, min, max, mean and L2 norm
    (on a tensor that is not constant: equal by coincidence too often) identify the same data.
    An msprobe record of a tensor method or torch function is in place only by its name (``add_``,
    ``__iadd__``): ``x * (1 + w)`` with a zero ``w`` gives back its input bit for bit, and is no
    in-place op. ``inserted``: ops GE inserted, whose golden output is their golden input by
    construction (pairing/ge_inserted.py): only their test side is looked at.
    """
    rows = rows.filter(~pl.col("golden_node").str.contains(_OUT_OF_PLACE_API))
    found = []
    for order, side in enumerate(("golden", "test")):
        print_ = [f"{side}_{key}" for key in SAME_DATA_FIELDS]
        own = pl.col("golden_node").is_in(list(inserted)) if side == "golden" and inserted else pl.lit(False)
        known = (
            ~own
            & pl.all_horizontal(pl.col(c).is_not_null() for c in print_)
            & (pl.col(f"{side}_max") != pl.col(f"{side}_min"))
        )
        fields = rows.filter(known).select("golden_node", "_i", "slot", "role", *print_)
        inputs = fields.filter(_ROLE == "input").drop("role")
        outputs = fields.filter(_ROLE == "output").drop("role")
        pairs = inputs.join(outputs, on=["golden_node", *print_], suffix="_out")
        found.append(
            pairs.select(
                "golden_node",
                _side=pl.lit(order),
                _in=pl.col("_i"),
                _out=pl.col("_i_out"),
                in_place=pl.format("{}={} ({})", "slot", "slot_out", pl.lit(side)),
            )
        )
    matches = pl.concat(found).sort("_side", "_in", "_out")
    return matches.group_by("golden_node").agg(pl.col("in_place").first())
