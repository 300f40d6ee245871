"""Node rows and their verdicts, derived from a token's tensor rows.

Two steps. ``node_frame`` is polars over the tensor rows: per node, the input, output and weight
verdicts, its worst output (whose metrics the node shows), the first error, and whether a dumped
input is its own output (an in-place op). ``judge`` then walks the nodes in execution order: where
a node's inputs were not dumped, or were overwritten by the op itself, what fed it decides (the
previous sibling's outputs, or the parent's input), which depends on the rows before it; that walk
follows the tree, so it is a loop over nodes, not a frame expression.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from tui_acc.dumps.model import NodeTree
from tui_acc.metrics.schema import ANOMALY_COLUMNS, METRIC_COLUMNS, NOISE_COLUMNS, NodeRow

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
# What identifies the same data on one side: equal shape, dtype, max, min, mean and L2 norm.
_FINGERPRINT = ("shape", "dtype", "max", "min", "mean", "norm")

_ROLE = pl.col("role")
_ERROR = pl.col("error")
_PASSED = pl.col("passed")


def node_frame(tensors: pl.DataFrame, nodes: pl.DataFrame) -> pl.DataFrame:
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
        input_cosine=pl.col("cosine").fill_null(0.0).filter(_ROLE == "input").min(),
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
    return joined.join(_in_place(rows), on="golden_node", how="left", maintain_order="left").with_columns(
        outputs_unknown=pl.col("outputs_unknown").fill_null(False)
    )


def _all_passed(mask: pl.Expr) -> pl.Expr:
    """Whether every row under ``mask`` passed; null when there is none."""
    chosen = _PASSED.filter(mask)
    return pl.when(chosen.len() > 0).then(chosen.all())


def _in_place(rows: pl.DataFrame) -> pl.DataFrame:
    """``"input_0=output (golden)"`` where a dumped input is its op's output, bit for bit.

    That is what an in-place op (``SiLU(inplace=True)``, ``add_``) leaves in a dump, because the
    input is saved after the op ran: comparing those "inputs" repeats the output comparison, so an
    error starting in the op would look inherited. Equal shape, dtype, min, max, mean and L2 norm
    (on a tensor that is not constant: equal by coincidence too often) identify the same data.
    """
    found = []
    for order, side in enumerate(("golden", "test")):
        print_ = [f"{side}_{key}" for key in _FINGERPRINT]
        known = pl.all_horizontal(pl.col(c).is_not_null() for c in print_) & (
            pl.col(f"{side}_max") != pl.col(f"{side}_min")
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


def judge(rows: list[NodeRow], tree: NodeTree) -> list[NodeRow]:
    """Effective input verdict, suspect flag and label of each row (in execution order), in place.

    Where a node's inputs were not dumped (ATB child ops, modules called with keyword arguments),
    its input is what fed it: the outputs of the previous sibling that has outputs, or for a first
    child, its parent's input. "local": the error starts here; "inherited": its inputs were
    already bad; "contains": the error starts in one of its children.
    """
    judged: dict[str, NodeRow] = {}
    for row in rows:
        judge_one(row, judged, tree)
        judged[row["golden_node"]] = row
    mark_containers(judged, tree)
    return rows


def judge_one(row: NodeRow, earlier: Mapping[str, NodeRow], tree: NodeTree) -> NodeRow:
    """``row``'s verdicts, from the rows before it (``earlier``, by golden name)."""
    row["inputs_effective"], row["inputs_from"] = row["inputs_passed"], "files"
    if row["inputs_passed"] is None or row.get("in_place"):
        # An in-place op's dumped input is its output (the hook ran after it): what fed it decides.
        fed, source = _feed(row["golden_node"], earlier, tree)
        if fed is not None or row["inputs_passed"] is None:
            row["inputs_effective"], row["inputs_from"] = fed, source
    failing = row["outputs_passed"] is False and not row.get("outputs_unknown")
    row["suspect"] = failing and row["inputs_effective"] is not False
    row["label"] = ("local" if row["suspect"] else "inherited") if failing else None
    return row


def mark_containers(judged: Mapping[str, NodeRow], tree: NodeTree) -> list[NodeRow]:
    """A failing module whose error starts in one of its children is labelled "contains"; returns
    the rows whose label changed."""
    changed = []
    for name, row in judged.items():
        if row["label"] != "local":
            continue
        parent = tree.nodes[name].parent
        while parent is not None:
            above = judged.get(parent)
            if above is not None and above["label"] == "local":
                above["label"] = "contains"
                changed.append(above)
            parent = tree.nodes[parent].parent
    return changed


def _feed(name: str, earlier: Mapping[str, NodeRow], tree: NodeTree) -> tuple[bool | None, str | None]:
    current = name
    while True:
        parent = tree.nodes[current].parent
        if parent is None:
            return None, None
        siblings = tree.children(parent)
        for previous in reversed(siblings[: siblings.index(current)]):
            row = earlier.get(previous)
            if row is not None and row["outputs_passed"] is not None and not row.get("outputs_unknown"):
                return bool(row["outputs_passed"]), previous
        parent_row = earlier.get(parent)
        if parent_row is not None and parent_row.get("inputs_effective") is not None:
            return bool(parent_row["inputs_effective"]), parent
        current = parent  # a parent with no rows (a container): look one level up


def first_suspect(tree: NodeTree, rows: Mapping[str, Any]) -> Any:
    """The innermost, earliest suspect in execution order: a module and its child can both qualify
    (the parent's output fails because the child's does); the child is the answer."""

    def search(name: str) -> NodeRow | None:
        for child in tree.children(name):
            found = search(child)
            if found is not None:
                return found
        row = rows.get(name)
        return row if row is not None and row["suspect"] else None

    return search(tree.root)
