"""The headless report of a pair (``tui-acc report GOLDEN TEST``): token verdicts, the first failing
token and operator, as JSON, text or a CSV table, and its exit code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import polars as pl

from tui_acc import __version__
from tui_acc.errors import TuiAccError
from tui_acc.metrics.schema import NODE_SCHEMA, NOISE_COLUMNS, to_frame
from tui_acc.reports.export import provenance, stamped
from tui_acc.reports.findings import (
    carried,
    counts_of,
    later,
    noise_operators,
    op_summary,
    side_of,
    single_pair,
    why_no_culprit,
)
from tui_acc.reports.output import EXIT_FAIL, EXIT_PASS, EXIT_USAGE, Said
from tui_acc.reports.pair_text import format_text, span
from tui_acc.rows import NodeRow
from tui_acc.session import Comparison
from tui_acc.sides import swapped_sides
from tui_acc.verdicts.explain import token_failure
from tui_acc.verdicts.replay_check import Replay
from tui_acc.verdicts.verdict import TokenVerdict


class UnknownToken(TuiAccError, ValueError):
    """``--token`` names a token that is not in both dumps."""


class Pictures(Protocol):
    """What ``--plot`` drew (plots/ticket.py's Plots; the plots sit above the reports)."""

    problems: list[str]

    def as_dict(self) -> dict[str, Any]:
        """The report's ``plots`` object in ``--json``."""
        ...

    def lines(self) -> list[str]:
        """The report's text about them: where the files went, one line each."""
        ...


@dataclass(frozen=True)
class PairReport(Said):
    """What ``report GOLDEN TEST`` found, in the order ``--json`` gives it (``tool`` and ``version``
    first); the tables behind the CSV, and what ``--replay``, ``--csv`` and ``--plot`` added."""

    golden: dict[str, Any]
    test: dict[str, Any]
    logits_node: str
    thresholds: dict[str, Any]
    tokens: list[dict[str, Any]]
    first_failing_token: int | None
    # which bound the first failing token's logits break, with the numbers
    first_failing_token_reason: str | None
    analysed_token: int | None
    # the golden's logits less precise than the test's: most likely given the wrong way round, with
    # the command line that swaps them
    swapped: dict[str, Any] | None
    first_failing_op: dict[str, Any] | None
    # where the logits fail and no operator adds error of its own, that is the finding
    explanation: str | None
    # the tokens whose operators were compared (the others' logits only): the analysed token, or
    # every token with --all-tokens
    operators_compared_at: list[int]
    # the operators of those tokens where a failure shows: local and inherited ones
    failing_ops: int
    # every node of those tokens where a failure shows: "local" where the error starts, "inherited"
    # where it fails with error that came in (the modules holding a local one are in ``counts``)
    failing: list[dict[str, Any]]
    # the analysed token's nodes by label, as the TUI's header counts them
    counts: dict[str, int] | None
    # each module of the analysed token as a whole: every output inside it as one flat tensor
    modules: list[dict[str, Any]]
    pairs: int
    unmatched: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    notes: list[str]
    tensor: dict[str, Any] | None
    # with --baseline: which baseline, and every operator of the analysed token against its noise
    baseline: dict[str, Any] | None
    operators: list[dict[str, Any]] | None
    # not in the JSON: the token and operator tables (the CSV's), and the export's source_* columns
    token_table: pl.DataFrame = field(repr=False)
    node_table: pl.DataFrame = field(repr=False)
    provenance: dict[str, str] = field(repr=False)
    replay: Replay | None = None
    csv: str | None = None
    plots: Pictures | None = None
    # with --ray: the cluster's nodes, the bytes that crossed between them (cluster/pair_on_ray.py)
    ray: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The report as ``--json`` gives it (before ``strict_json``): the fields above in their
        order, then ``baseline`` and ``operators``, ``replay``, ``csv`` and ``plots`` where asked for;
        the tables and provenance are left out."""
        said: dict[str, Any] = {
            "tool": "tui-acc",
            "version": __version__,
            "golden": self.golden,
            "test": self.test,
            "logits_node": self.logits_node,
            "thresholds": self.thresholds,
            "tokens": self.tokens,
            "first_failing_token": self.first_failing_token,
            "first_failing_token_reason": self.first_failing_token_reason,
            "analysed_token": self.analysed_token,
            "swapped": self.swapped,
            "first_failing_op": self.first_failing_op,
            "explanation": self.explanation,
            "operators_compared_at": self.operators_compared_at,
            "failing_ops": self.failing_ops,
            "failing": self.failing,
            "counts": self.counts,
            "modules": self.modules,
            "pairs": self.pairs,
            "unmatched": self.unmatched,
            "errors": self.errors,
            "notes": self.notes,
            "tensor": self.tensor,
        }
        if self.baseline is not None:
            said.update(baseline=self.baseline, operators=self.operators)
        if self.replay is not None:
            said["replay"] = self.replay.as_dict()
        said.update(self.csv_said())
        if self.plots is not None:
            said["plots"] = self.plots.as_dict()
        if self.ray is not None:
            said["ray"] = self.ray
        return said

    def text(self) -> str:
        """What the terminal shows: the summary, then the replay, the CSV and the plots asked for."""
        text = format_text(self.body())
        if self.replay is not None:
            text += "\n" + "\n".join(self.replay.describe()) + "\n"
        text += self.csv_line()
        if self.plots is not None:
            text += "\n".join(self.plots.lines()) + "\n"
        return text

    def frame(self) -> pl.DataFrame:
        """The CSV: the operator table of the analysed token, or the token table when no token was
        analysed, with the source_* columns every export carries."""
        table = self.node_table if self.analysed_token is not None else self.token_table
        return stamped(table, self.provenance)

    @property
    def problems(self) -> list[str]:
        """A picture asked for and not drawn (said on stderr)."""
        return [f"--plot: {problem}" for problem in self.plots.problems] if self.plots is not None else []

    @property
    def exit_code(self) -> int:
        """0 when everything compared passes, 1 when a failure was found, 2 when a picture asked for
        was not drawn (not a pass)."""
        if self.problems:
            return EXIT_USAGE
        failed = any(t["passed"] is not True for t in self.tokens) or self.failing_ops > 0
        return EXIT_FAIL if failed or self.errors else EXIT_PASS


def build_report(
    cmp: Comparison, token: int | None = None, all_tokens: bool = False, swap_command: str | None = None
) -> PairReport:
    """Compute what the report needs: every token's logits, then one token's operators (with
    ``all_tokens``, every token's: a failing operator or a damaged file where the logits pass counts).
    ``swap_command``: the command line with the dumps swapped, said where they seem the wrong way round."""
    engine, judge = cmp.engine, cmp.verdicts
    if token is not None and token not in cmp.pairing.tokens:
        raise UnknownToken(f"token {token} is not in both dumps (paired tokens: {span(cmp.pairing.tokens)})")
    tokens = engine.tokens_frame()
    failing = next(iter(tokens.filter(pl.col("passed").not_())["token"].to_list()), None)
    analysed = token if token is not None else failing
    compared = list(cmp.pairing.tokens) if all_tokens else [analysed] if analysed is not None else []
    shown: list[NodeRow] = []
    failing_ops = 0  # local and inherited nodes, as every view counts them
    for at in compared:  # one token's verdict at a time: only where a failure shows is kept
        verdict = judge.token(at)
        shown += verdict.failing()
        failing_ops += verdict.counts.failing
        # every token's logits pass: the report shows the first token where an error starts
        if analysed is None and verdict.culprit is not None:
            analysed = at
    if analysed is None and shown:  # only unreadable files: the first token with one
        analysed = shown[0]["token"]
    token_rows = {r["token"]: r for r in tokens.iter_rows(named=True)}
    verdict_at: TokenVerdict | None = judge.token(analysed) if analysed is not None else None
    carried_from, passed_over = None, None
    if (
        token is None
        and failing is not None
        and analysed == failing
        and verdict_at
        and not verdict_at.culprit
    ):
        # no operator of the first failing token adds error of its own: it may have come from an
        # earlier token, through what its decode steps read of them (the KV cache)
        earlier = judge.earlier_culprit(failing)
        if earlier is not None:
            carried_from, analysed, verdict_at = failing, earlier.token, earlier
            paired = cmp.pairing.tokens  # judged: the tokens up to the earlier culprit, and the failing one
            compared = sorted({*compared, *paired[: paired.index(earlier.token) + 1]})
        elif all_tokens:  # every token judged: the first later culprit is named, and why
            found = next((v for at in compared if at > failing and (v := judge.token(at)).culprit), None)
            if found is not None:
                said = why_no_culprit(cmp, failing, None, token_rows, judge.frame(failing))
                passed_over = "; ".join(filter(None, (said, later(failing, found))))
                analysed, verdict_at = found.token, found
    nodes = (
        to_frame(verdict_at.rows, NODE_SCHEMA) if verdict_at is not None else pl.DataFrame(schema=NODE_SCHEMA)
    )
    suspect = verdict_at.culprit_row if verdict_at is not None else None
    why = (
        token_failure(
            token_rows[failing],
            engine.thresholds,
            engine.stats_floor,
            engine.pass_fail.computed_in(token_rows[failing]),
        )
        if failing is not None
        else None
    )
    engine.flush()
    cache_notes = [engine.cache.problem] if engine.cache is not None and engine.cache.problem else []
    errors = [p.as_dict() for p in cmp.golden.problems + cmp.test.problems]
    errors += [
        {"file": _file_at_fault(r, error), "message": error}
        for r in engine.cached_rows()
        if (error := r.get("error"))
    ]
    swapped = swapped_sides(tokens.iter_rows(named=True))
    return PairReport(
        golden=side_of(cmp.golden),
        test=side_of(cmp.test),
        logits_node=cmp.pairing.logits_node,
        thresholds=engine.thresholds.as_dict(),
        tokens=[
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
        first_failing_token=failing,
        first_failing_token_reason=why,
        analysed_token=analysed,
        swapped=replace(swapped, command=swap_command).as_dict() if swapped else None,
        first_failing_op=op_summary(suspect, cmp.test),
        explanation=carried(carried_from, verdict_at)
        or passed_over
        or why_no_culprit(cmp, failing if analysed == failing else None, suspect, token_rows, nodes),
        operators_compared_at=compared,
        failing_ops=failing_ops,
        failing=[
            {
                "token": row["token"],
                "golden": row["golden_node"],
                "test": row["test_node"],
                **{key: row.get(key) for key in ("label", "rule", "local_error", "expected_error", "cosine")},
                **({key: row.get(key) for key in NOISE_COLUMNS} if cmp.baseline is not None else {}),
            }
            for row in shown
        ],
        counts=counts_of(verdict_at),
        modules=nodes.filter(pl.col("tensors_within") > 0)
        .select(
            golden="golden_node",
            depth="depth",
            tensors="tensors_within",
            cosine="cosine_within",
            rel_euclidean="rel_euclidean_within",
            rmse="rmse_within",
        )
        .to_dicts(),
        pairs=cmp.pairing.tensor_pair_count(),
        unmatched=[u.as_dict() for u in cmp.pairing.unmatched],
        errors=errors,
        notes=cmp.golden.notes + cmp.test.notes + cmp.pairing.notes + cache_notes,
        tensor=single_pair(cmp),
        baseline=side_of(cmp.baseline) if cmp.baseline is not None else None,
        operators=noise_operators(nodes) if cmp.baseline is not None else None,
        token_table=tokens,
        node_table=nodes,
        provenance=provenance(cmp),
    )


def _file_at_fault(row: Mapping[str, Any], error: str) -> str:
    """The file a row's error is about: the one its message names first (a damaged test file names
    the test's), else the golden's."""
    test_path = row.get("test_path")
    if test_path and error.startswith(f"{test_path}:") and not error.startswith(f"{row['golden_path']}:"):
        return str(test_path)
    return str(row["golden_path"])
