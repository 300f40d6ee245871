"""What the pair report says of a token's verdict beside its tables: the culprit as
``first_failing_op`` gives it, the counts, why a failing token has no culprit of its own, each
operator against its noise floor, a side's description, and a single pair's metrics."""

from __future__ import annotations

from typing import Any

import polars as pl

from tui_acc.dumps import DumpIndex
from tui_acc.metrics.schema import METRIC_COLUMNS, NOISE_COLUMNS
from tui_acc.rows import Row
from tui_acc.session import Comparison
from tui_acc.verdicts.explain import accumulated
from tui_acc.verdicts.verdict import TokenVerdict

_OP_FIELDS = (
    "golden_type",
    "test_type",
    *METRIC_COLUMNS,
    "input_cosine",
    # the verdict's rule, what it measured against what it allows, and why (verdicts/rules.py)
    "rule",
    "local_error",
    "expected_error",
    "reason",
    "operator",
    "input_error",
    "output_error",
    "worst_output",
    "shape",
    "golden_dtype",
    "test_dtype",
    *NOISE_COLUMNS,
)
# With --baseline, each operator row of the analysed token: its verdict, error and noise floor
_NOISE_OP_FIELDS = (
    "token",
    "golden_node",
    "test_node",
    "outputs_passed",
    "label",
    "cosine",
    "rmse",
    *NOISE_COLUMNS,
)


def why_no_culprit(
    cmp: Comparison,
    failing: int | None,
    suspect: Row | None,
    token_rows: dict[int, dict[str, Any]],
    nodes: pl.DataFrame,
) -> str | None:
    """The first failing token, analysed, and no operator to blame: the drift its dtype explains,
    said so. Not where an operator there could not be read (it may be the culprit); operators on one
    side only are counted, since nothing about them was compared."""
    if failing is None or suspect is not None or token_rows[failing].get("error"):
        return None
    if nodes.height and nodes["error"].drop_nulls().len():
        return None
    found = accumulated(token_rows[failing].get("test_dtype"))
    unmatched = sum(1 for u in cmp.pairing.unmatched if u.kind == "node" and u.token == failing)
    if unmatched:
        found += f" ({unmatched} operators on one side only not compared)"
    flipped = [r["golden_node"] for r in nodes.iter_rows(named=True) if FLIP in (r.get("reason") or "")]
    if flipped:  # a discrete choice moved by rounding: what most often takes the logits past their bounds
        found += (
            f"; an MoE router kept other experts than the golden between near-equal scores ({flipped[0]})"
        )
    return found


# what a router's reading says of a flip between near-equal scores (verdicts/walk.py's _routed)
FLIP = "near-equal scores flipped"


def later(failing: int, found: TokenVerdict) -> str | None:
    """Where the first failing token has no culprit and a later token has one (``--all-tokens``)."""
    if found.culprit is None:
        return None
    return (
        f"no operator at token {failing} adds error of its own; the first that does is at token {found.token}"
    )


def carried(failing: int | None, earlier: TokenVerdict | None) -> str | None:
    """Where the first failing token's error started at an earlier token, said so."""
    if failing is None or earlier is None or earlier.culprit is None:
        return None
    return (
        f"no operator at token {failing} adds error of its own: the error starts at token "
        f"{earlier.token} in {earlier.culprit.node} and reaches token {failing} through what its "
        "decode steps read of the earlier tokens (the KV cache)"
    )


def noise_operators(nodes: pl.DataFrame) -> list[dict[str, Any]]:
    """With --baseline: every operator of the analysed token against its noise."""
    return (
        nodes.select(_NOISE_OP_FIELDS)
        .rename({"golden_node": "golden", "test_node": "test", "outputs_passed": "passed"})
        .to_dicts()
    )


def counts_of(verdict: TokenVerdict | None) -> dict[str, int] | None:
    """The analysed token's nodes by label, and where a failure shows (local and inherited)."""
    if verdict is None:
        return None
    counts = verdict.counts
    return {
        "failing": counts.failing,
        "local": counts.local,
        "inherited": counts.inherited,
        "contains": counts.contains,
        "nodes": counts.total,
    }


def side_of(index: DumpIndex) -> dict[str, Any]:
    from tui_acc.dumps.sharding import sharding

    return {
        "path": str(index.root),
        "data_dir": str(index.data_dir),
        "format": index.format,
        "tokens": len(index.tokens),
        "order": index.order_source,
        "sharding": sharding(index),  # "tensor-parallel, 2 ranks" where its ranks were gathered
    }


def op_summary(row: Row | None, test: DumpIndex | None = None) -> dict[str, Any] | None:
    """A node row as ``first_failing_op`` gives it (``report --json``, ``hunt --json``); ``test``: the
    test's index, whose ``origins`` say which rank ran a call of its own (an expert, gathered)."""
    if row is None:
        return None
    op = {"token": row["token"], "golden": row["golden_node"], "test": row["test_node"]}
    origin = test.origins.get(row["test_node"]) if test is not None else None
    if origin is not None:  # the rank that ran it, and its name in that rank's dump.json
        op["test_rank"], op["test_record"] = origin
    op.update({key: row.get(key) for key in _OP_FIELDS})
    op["inputs_passed"] = row["inputs_effective"]
    op["inputs_from"] = row.get("inputs_from")
    op["label"] = row.get("label")
    op["in_place"] = row.get("in_place")
    return op


_TENSOR_FIELDS = (
    *METRIC_COLUMNS,
    "numel",
    "golden_dtype",
    "test_dtype",
    "golden_shape",
    "test_shape",
    "golden_nan",
    "golden_inf",
    "test_nan",
    "test_inf",
    "passed",
    "error",
)


def single_pair(cmp: Comparison) -> dict[str, Any] | None:
    """Every metric of the pair when two single tensor files are compared."""
    if not (cmp.golden.format == cmp.test.format == "tensor"):
        return None
    (node,) = cmp.pairing.node_pairs(0)
    row = cmp.engine.tensor_row(node.tensors[0])
    return {key: row.get(key) for key in _TENSOR_FIELDS}
