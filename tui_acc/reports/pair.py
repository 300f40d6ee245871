"""The headless report: token verdicts, the first failing token and operator, and exit codes."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tui_acc import __version__, numbers
from tui_acc.dumps import DumpIndex
from tui_acc.errors import TuiAccError
from tui_acc.metrics.schema import METRIC_COLUMNS, NODE_SCHEMA, NOISE_COLUMNS
from tui_acc.rows import Row
from tui_acc.session import Comparison
from tui_acc.sides import Swapped, swapped_sides
from tui_acc.verdicts.explain import accumulated, token_failure
from tui_acc.verdicts.labels import first_suspect

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

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


# how the text report counts the failing operators of a token, by label
_LABELS = {"local": "local", "inherited": "inherited", "contains": "containing it"}


class UnknownToken(TuiAccError, ValueError):
    """``--token`` names a token that is not in both dumps."""


def build_report(cmp: Comparison, token: int | None = None, all_tokens: bool = False) -> dict[str, Any]:
    """Compute what the report needs: every token's logits, then one token's operators (with
    ``all_tokens``, every token's: a failing operator or a damaged file where the logits pass counts)."""
    engine = cmp.engine
    if token is not None and token not in cmp.pairing.tokens:
        raise UnknownToken(f"token {token} is not in both dumps (paired tokens: {_span(cmp.pairing.tokens)})")
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


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity made ``null`` (strict JSON readers reject them); each
    object that held one says which in ``non_finite`` (``{"rel_euclidean": "inf"}``: an all-zero golden
    makes relative errors infinite)."""
    if isinstance(value, dict):
        cleaned = {key: strict_json(item) for key, item in value.items()}
        lost = {key: _spelled(item) for key, item in value.items() if _non_finite(item)}
        if lost:
            cleaned["non_finite"] = lost
        return cleaned
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return None if _non_finite(value) else value


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _spelled(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def exit_code(report: dict[str, Any]) -> int:
    """0 when everything compared passes, 1 when a failure was found."""
    failed = any(t["passed"] is not True for t in report["tokens"]) or report["failing_ops"] > 0
    return EXIT_FAIL if failed or report["errors"] else EXIT_PASS


def csv_frame(report: dict[str, Any]) -> pl.DataFrame:
    """The operator table of the analysed token, or the token table when no token was analysed."""
    frame: pl.DataFrame = report["_nodes"] if report["analysed_token"] is not None else report["_tokens"]
    return frame


def format_text(report: dict[str, Any]) -> str:
    """A terminal summary of the report."""
    lines = [
        f"tui-acc {report['version']}",
        *(f"{side:<6}  {_side_line(report[side])}" for side in ("golden", "test")),
        *([f"noise   {_side_line(report['baseline'])} (--baseline)"] if "baseline" in report else []),
        f"logits  {report['logits_node']}",
        *_swapped_lines(report.get("swapped")),
        "",
        f"{'token':>5}  {'verdict':<7}  {'cosine':>10}  {'KL':>10}  top-1 golden/test",
    ]
    stats = any(t["stats_only"] for t in report["tokens"])
    if stats:
        lines[-1] = (
            f"{'token':>5}  {'verdict':<7}  {'norm rel':>10}   (statistics only: max, min, mean, norm)"
        )
    for t in report["tokens"]:
        verdict = {"error": "ERROR", "fail": "FAIL"}.get(t["verdict"] or "", t["verdict"] or "?")
        top1 = f"{t['golden_top1']}/{t['test_top1']}" if t["golden_top1"] is not None else "-"
        if stats:
            lines.append(f"{t['token']:>5}  {verdict:<7}  {numbers.number(t['norm_rel_diff']):>10}")
        else:
            lines.append(
                f"{t['token']:>5}  {verdict:<7}  {numbers.cosine(t['cosine']):>10}"
                f"  {numbers.number(t['kl']):>10}  {top1}"
            )
    lines.append("")
    failing = report["first_failing_token"]
    why = f" ({report['first_failing_token_reason']})" if report.get("first_failing_token_reason") else ""
    lines.append(f"first failing token: {failing if failing is not None else 'none'}{why}")
    op = report["first_failing_op"]
    if report["analysed_token"] is not None:
        if op:
            partner = f" <-> {op['test']} ({op['test_type']})" if op["test"] != op["golden"] else ""
            inputs = (
                "inputs pass" if op["inputs_from"] == "files" else f"inputs pass (fed by {op['inputs_from']})"
            )
            if op["in_place"]:
                inputs += f"; in place: {op['in_place']}"
            lines.append(
                f"first failing op at token {op['token']}: {op['golden']} ({op['golden_type']}){partner}"
                f"  cosine {numbers.cosine(op['cosine'])}  max abs {numbers.number(op['max_abs_err'])}"
                f"  {op['label']}, {inputs}" + _noise_text(op, "baseline" in report)
            )
            lines.append(
                f"  its inputs: cosine {numbers.cosine(op.get('input_cosine'))}"
                f"  rel eucl {numbers.number(op.get('input_error'))};"
                f"  its output: rel eucl {numbers.number(op.get('output_error'))}"
            )
            if op.get("rule"):
                lines.append(f"  judged by {op['rule']}: {op.get('reason') or ''}")
            at_token = [f for f in report["failing"] if f["token"] == op["token"]]
            counts = {label: sum(1 for f in at_token if f["label"] == label) for label in _LABELS}
            said = ", ".join(f"{n} {_LABELS[label]}" for label, n in counts.items() if n)
            lines.append(f"  failing ops at that token: {len(at_token)} ({said})")
            if report["modules"]:
                whole = min(report["modules"], key=lambda m: m["depth"])  # the outermost module
                lines.append(
                    f"  all {whole['tensors']} operator outputs inside {whole['golden']}:"
                    f" cosine {numbers.cosine(whole['cosine'])}"
                    f"  rel eucl {numbers.number(whole['rel_euclidean'])}"
                )
        else:
            lines.append(f"first failing op at token {report['analysed_token']}: none found")
    if report.get("explanation"):
        lines.append(f"  {report['explanation']}")
    if not report.get("tensor"):  # two tensor files: there are no operators to speak of
        lines.append(_compared_line(report))
    if report.get("tensor"):
        lines.append("")
        lines += [f"  {key:<14} {_shown(key, value)}" for key, value in report["tensor"].items()]
        lines.append("")
    lines.append(
        f"tensor pairs: {report['pairs']}   unmatched: {len(report['unmatched'])}{_unmatched_summary(report)}"
    )
    if report["unmatched"]:  # listed by --json and the TUI's u: a ticket needs the count
        lines[-1] += "  (--json or the TUI's u list them)"
    for e in report["errors"][:20]:
        lines.append(f"error: {e['file']}: {e['message']}")
    lines += [f"note: {n}" for n in _notes(report)]
    return "\n".join(lines) + "\n"


def _notes(report: dict[str, Any]) -> list[str]:
    """The notes, each once: one both dumps raise (their paths told apart) is said for both."""
    sides = {report[side]["data_dir"]: side for side in ("golden", "test") if report.get(side)}
    said: dict[str, list[str]] = {}
    for note in report["notes"]:
        where, _, text = note.partition(": ")
        key, who = (text, sides[where]) if where in sides and text else (note, "")
        said.setdefault(key, []).append(who)
    return [
        f"({' and '.join(w for w in whose if w)}) {text}" if any(whose) else text
        for text, whose in said.items()
    ]


def _swapped_lines(swapped: dict[str, Any] | None) -> list[str]:
    if not swapped:
        return []
    said = Swapped(swapped["golden_dtype"], swapped["test_dtype"], swapped.get("command"))
    return [f"warning: {said.headline()}", f"         {said.how_to_swap()}"]


def _noise_text(op: dict[str, Any], with_baseline: bool) -> str:
    if not with_baseline:
        return ""
    ratio = op.get("noise_ratio")
    return "  (no baseline tensor)" if ratio is None else f"  {numbers.ratio(ratio)} the baseline's error"


def _compared_line(report: dict[str, Any]) -> str:
    """Which tokens' operators were compared: a passing report says how far it looked."""
    compared: list[int] = report["operators_compared_at"]
    every = [t["token"] for t in report["tokens"]]
    if not compared:
        return "operators compared at: no token (no token's logits fail; --all-tokens compares them all)"
    where = (
        f"every token ({_span(compared)})"
        if compared == every and len(every) > 1
        else f"token {_span(compared)}"
    )
    line = f"operators compared at: {where}"
    failing_tokens = sorted({f["token"] for f in report["failing"]})
    if len(compared) > 1:
        line += f"; failing ops: {report['failing_ops']}" + (
            f" at token{'s' if len(failing_tokens) > 1 else ''} {_span(failing_tokens)}"
            if failing_tokens
            else ""
        )
    return line


def _unmatched_summary(report: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for u in report["unmatched"]:
        key = f"{u['kind']}s only in {u['side']}"
        counts[key] = counts.get(key, 0) + 1
    return f" ({', '.join(f'{n} {k}' for k, n in counts.items())})" if counts else ""


def _side_line(side: dict[str, Any]) -> str:
    return f"{side['path']}  ({side['format']}, {side['tokens']} tokens, order: {side['order']})"


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


def _span(tokens: list[int]) -> str:
    if not tokens:
        return "none"
    if len(tokens) == 1:
        return str(tokens[0])
    return f"{tokens[0]}..{tokens[-1]}" if tokens == list(range(tokens[0], tokens[-1] + 1)) else str(tokens)


def _shown(key: str, value: Any) -> Any:
    if not isinstance(value, float):
        return value
    return numbers.cosine(value) if key == "cosine" else numbers.number(value)
