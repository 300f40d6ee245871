"""Exact aggregates over many tensor pairs, from their sufficient statistics alone.

Each row keeps n, Σg², Σt², Σg·t and Σ(t-g)²; the cosine, relative distance and RMSE of a whole
layer or token, as if all its outputs were one flat tensor, follow without re-reading a file. Rows
without sums (an error, statistics only) are left out and not counted.
"""

from __future__ import annotations

import polars as pl

from tui_acc.dumps.model import NodeTree

AGGREGATE_SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "tensors": pl.Int64,
    "cosine": pl.Float64,
    "rel_euclidean": pl.Float64,
    "rmse": pl.Float64,
}

_SUMS = ("n", "sum_gg", "sum_tt", "sum_gt", "sum_dd")


def aggregate(rows: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """AGGREGATE_SCHEMA's columns over ``rows`` (TENSOR_SCHEMA), per group of ``by`` or over all."""
    usable = rows.filter(pl.col("n").is_not_null() & pl.col("error").is_null())
    totals = [pl.len().alias("tensors"), *(pl.col(c).cast(pl.Float64).sum() for c in _SUMS)]
    summed = usable.group_by(by, maintain_order=True).agg(*totals) if by else usable.select(*totals)
    return summed.select(*(by or []), *_derived())


def _derived() -> list[pl.Expr]:
    tensors = pl.col("tensors")
    gg, tt, gt, dd, n = (pl.col(c) for c in ("sum_gg", "sum_tt", "sum_gt", "sum_dd", "n"))
    product = gg * tt
    compared = (tensors > 0) & (n > 0)  # n: elements finite on both sides; none, nothing to say
    cosine = (
        pl.when(~compared)
        .then(None)
        .when((gg == 0) & (tt == 0))
        .then(1.0)  # both all zero: the same
        .when((gg == 0) | (tt == 0))
        .then(0.0)
        # √(Σg²·Σt²) as the kernel takes it (exactly 1 for equal tensors), unless the product
        # overflows; clipped: rounding can put |Σg·t| a hair above it
        .otherwise(
            (gt / pl.when(product.is_finite()).then(product.sqrt()).otherwise(gg.sqrt() * tt.sqrt())).clip(
                -1.0, 1.0
            )
        )
    )
    rel = (
        pl.when(~compared)
        .then(None)
        .when(gg > 0)
        .then((dd / gg).sqrt())
        .when(dd == 0)
        .then(0.0)
        .otherwise(float("inf"))
    )
    rmse = pl.when(n > 0).then((dd / n).sqrt())
    return [
        tensors.cast(pl.Int64),
        cosine.cast(pl.Float64).alias("cosine"),
        rel.cast(pl.Float64).alias("rel_euclidean"),
        rmse.cast(pl.Float64).alias("rmse"),
    ]


def within_each_module(tensors: pl.DataFrame, tree: NodeTree) -> pl.DataFrame:
    """Per module: the aggregate of every output of the operators inside it (the leaves below it),
    as one flat tensor: how far a whole layer has drifted, not only its last output. Columns
    ``golden_node`` and AGGREGATE_SCHEMA's, suffixed ``_within``."""
    leaves = {name for name in tree.nodes if not tree.children(name)}
    outputs = tensors.filter((pl.col("role") == "output") & pl.col("golden_node").is_in(leaves))
    # in the rows' order throughout: a float sum depends on its order, and the same dumps must give
    # the same digits at every run (unique() and join() would otherwise order by a seeded hash)
    owners = [
        (leaf, ancestor)
        for leaf in outputs["golden_node"].unique(maintain_order=True).to_list()
        for ancestor in _ancestors(tree, leaf)
    ]
    links = pl.DataFrame(owners, schema={"golden_node": pl.String, "module": pl.String}, orient="row")
    grouped = aggregate(outputs.join(links, on="golden_node", maintain_order="left"), by=["module"])
    return grouped.rename({"module": "golden_node", **{c: f"{c}_within" for c in AGGREGATE_SCHEMA}})


def _ancestors(tree: NodeTree, name: str) -> list[str]:
    found = []
    parent = tree.nodes[name].parent
    while parent is not None:
        found.append(parent)
        parent = tree.nodes[parent].parent
    return found
