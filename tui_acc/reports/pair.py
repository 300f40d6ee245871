"""The headless report: token verdicts, the first failing token and operator, and exit codes."""

from __future__ import annotations

from typing import Any

import polars as pl

from tui_acc import __version__
from tui_acc.dumps import DumpIndex
from tui_acc.errors import TuiAccError
from tui_acc.metrics.schema import METRIC_COLUMNS, NODE_SCHEMA, NOISE_COLUMNS
from tui_acc.reports.output import EXIT_FAIL, EXIT_PASS
from tui_acc.reports.pair_text import span
from tui_acc.rows import Row
from tui_acc.session import Comparison
from tui_acc.sides import swapped_sides
from tui_acc.verdicts.explain import accumulated, token_failure
from tui_acc.verdicts.labels import first_suspect

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


class UnknownToken(TuiAccError, ValueError):
    """``--token`` names a token that is not in both dumps."""


def build_report(cmp: Comparison, token: int | None = None, all_tokens: bool = False) -> dict[str, Any]:
    """Compute what the report needs: every token's logits, then one token's operators (with
    ``all_tokens``, every token's: a failing operator or a damaged file where the logits pass counts)."""
    engine = cmp.engine
    if token is not None and token not in cmp.pairing.tokens:
        raise UnknownToken(f"token {token} is not in both dumps (paired tokens: {span(cmp.pairing.tokens)})")
    tokens = engine.tokens_frame()
    failing = next(iter(tokens.filter(pl.col("passed").not_())["token"].to_list()), None)
    analysed = token if token is not None else failing
    compared = list(cmp.pairing.tokens) if all_tokens else [analysed] if analysed is not None else []
    failing_ops = pl.DataFrame(schema=NODE_SCHEMA)
    for at in compared:  # one token's rows at a time: only the failing ones are kept
        frame = engine.nodes_frame(at)
        failed = frame.filter(pl.col("outputs_passed").not_() | (pl.col("label") == "local"))
        failing_ops = pl.concat([failing_ops, failed])
        # every token's logits pass: the report shows the first token where an error starts
        if analysed is None and failed.height and _suspect(cmp, frame) is not None:
            analysed = at
    if analysed is None and failing_ops.height:  # only unreadable files: the first token with one
        analysed = failing_ops["token"][0]
    nodes = engine.nodes_frame(analysed) if analysed is not None else pl.DataFrame(schema=NODE_SCHEMA)
    suspect = _suspect(cmp, nodes)
    token_rows = {r["token"]: r for r in tokens.iter_rows(named=True)}
    why = (
        token_failure(token_rows[failing], engine.thresholds, engine.stats_floor)
        if failing is not None
        else None
    )
    engine.flush()
    cache_notes = [engine.cache.problem] if engine.cache is not None and engine.cache.problem else []
    errors = [p.as_dict() for p in cmp.golden.problems + cmp.test.problems]
    errors += [
        {"file": r["golden_path"], "message": error}
        for r in engine.cached_rows()
        if (error := r.get("error"))
    ]
    return {
        "tool": "tui-acc",
        "version": __version__,
        "golden": _side(cmp.golden),
        "test": _side(cmp.test),
        "logits_node": cmp.pairing.logits_node,
        "thresholds": engine.thresholds.as_dict(),
        "tokens": [
            {
                "token": r["token"],
                "cosine": r.get("cosine"),
                "kl": r.get("kl"),
                "passed": r["passed"],
                "verdict": r.get("verdict"),
                "golden_top1": r.get("golden_top1"),
                "test_top1": r.get("test_top1"),
                "stats_only": bool(r.get("stats_only")),
                "norm_rel_diff": r.get("norm_rel_diff"),
                "error": r.get("error"),
                **({key: r.get(key) for key in NOISE_COLUMNS} if cmp.baseline is not None else {}),
            }
            for r in tokens.iter_rows(named=True)
        ],
        "first_failing_token": failing,
        # which bound the first failing token's logits break, with the numbers
        "first_failing_token_reason": why,
        "analysed_token": analysed,
        # the golden's logits less precise than the test's: most likely given the wrong way round
        # (the command line that swaps them is added by the CLI, which has it)
        "swapped": swapped.as_dict() if (swapped := swapped_sides(tokens.iter_rows(named=True))) else None,
        "first_failing_op": op_summary(suspect),
        # where the logits fail and no operator adds error of its own, that is the finding
        "explanation": _explanation(
            cmp, failing if analysed == failing else None, suspect, token_rows, nodes
        ),
        # the tokens whose operators were compared (the others' logits only): the analysed token,
        # or every token with --all-tokens
        "operators_compared_at": compared,
        "failing_ops": failing_ops.height,
        # every failing operator of those tokens: "local" where the error starts (its inputs
        # pass), "inherited" where its inputs were already bad
        "failing": failing_ops.select(
            "token",
            golden="golden_node",
            test="test_node",
            label="label",
            rule="rule",
            local_error="local_error",
            expected_error="expected_error",
            cosine="cosine",
            **({key: key for key in NOISE_COLUMNS} if cmp.baseline is not None else {}),
        ).to_dicts(),
        # each module of the analysed token as a whole: every output inside it as one flat tensor
        "modules": nodes.filter(pl.col("tensors_within") > 0)
        .select(
            golden="golden_node",
            depth="depth",
            tensors="tensors_within",
            cosine="cosine_within",
            rel_euclidean="rel_euclidean_within",
            rmse="rmse_within",
        )
        .to_dicts(),
        "pairs": cmp.pairing.tensor_pair_count(),
        "unmatched": [u.as_dict() for u in cmp.pairing.unmatched],
        "errors": errors,
        "notes": cmp.golden.notes + cmp.test.notes + cmp.pairing.notes + cache_notes,
        "tensor": _single_pair(cmp),
        **_noise_floor(cmp, nodes),
        "_tokens": tokens,
        "_nodes": nodes,
    }


def _explanation(
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
    return f"{found} ({unmatched} operators on one side only not compared)" if unmatched else found


def _noise_floor(cmp: Comparison, nodes: pl.DataFrame) -> dict[str, Any]:
    """With --baseline: which baseline, and every operator of the analysed token against its noise."""
    if cmp.baseline is None:
        return {}
    return {
        "baseline": _side(cmp.baseline),
        "operators": nodes.select(_NOISE_OP_FIELDS)
        .rename({"golden_node": "golden", "test_node": "test", "outputs_passed": "passed"})
        .to_dicts(),
    }


def _suspect(cmp: Comparison, nodes: pl.DataFrame) -> Row | None:
    return first_suspect(cmp.golden.tree, {row["golden_node"]: row for row in nodes.to_dicts()})


def public(report: dict[str, Any]) -> dict[str, Any]:
    """The report without the internal row lists (what ``--json`` prints)."""
    return {k: v for k, v in report.items() if not k.startswith("_")}


def exit_code(report: dict[str, Any]) -> int:
    """0 when everything compared passes, 1 when a failure was found."""
    failed = any(t["passed"] is not True for t in report["tokens"]) or report["failing_ops"] > 0
    return EXIT_FAIL if failed or report["errors"] else EXIT_PASS


def csv_frame(report: dict[str, Any]) -> pl.DataFrame:
    """The operator table of the analysed token, or the token table when no token was analysed."""
    frame: pl.DataFrame = report["_nodes"] if report["analysed_token"] is not None else report["_tokens"]
    return frame


def _side(index: DumpIndex) -> dict[str, Any]:
    return {
        "path": str(index.root),
        "data_dir": str(index.data_dir),
        "format": index.format,
        "tokens": len(index.tokens),
        "order": index.order_source,
    }


def op_summary(row: Row | None) -> dict[str, Any] | None:
    """A node row as ``first_failing_op`` gives it (``report --json``, ``hunt --json``)."""
    if row is None:
        return None
    op = {"token": row["token"], "golden": row["golden_node"], "test": row["test_node"]}
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


def _single_pair(cmp: Comparison) -> dict[str, Any] | None:
    """Every metric of the pair when two single tensor files are compared."""
    if not (cmp.golden.format == cmp.test.format == "tensor"):
        return None
    (node,) = cmp.pairing.node_pairs(0)
    row = cmp.engine.tensor_row(node.tensors[0])
    return {key: row.get(key) for key in _TENSOR_FIELDS}
