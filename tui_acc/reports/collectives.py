"""``tui-acc report --ranks DUMP``: the check across ranks without a UI (JSON, CSV, text, exit code).

JSON: ``collectives`` (a row per token, operator and rank: the four metrics, ``passed``, and what
judged it: ``dtype``, ``beyond_bound``, ``worst_ratio``, ``error``) and ``first_bad``
(``{token, op, rank}`` or null). Exit 0 when every rank's output agrees with its golden, 1 when one
disagrees or cannot be judged (a rank lacking the operator, a damaged file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui_acc import numbers
from tui_acc.collectives.check import METRICS, RankRow, RanksCheck
from tui_acc.reports.export import stamped
from tui_acc.reports.output import EXIT_FAIL, EXIT_PASS, Said

if TYPE_CHECKING:
    import polars as pl
# a row's columns, in the order the JSON, the CSV and the screen's export give them
COLUMNS = (
    "token",
    "op",
    "rank",
    *METRICS,
    "passed",
    "rank_folder",
    "kind",
    "reduction",
    "dtype",
    "numel",
    "beyond_bound",
    "worst_ratio",
    "error",
)


@dataclass(frozen=True)
class RanksReport(Said):
    """What ``report --ranks RUN`` found, in the order ``--json`` gives it."""

    dump: str
    format: str
    ranks: list[str]
    margin: float
    collectives: list[dict[str, Any]]
    first_bad: dict[str, Any] | None
    failed: int
    unjudged: int
    errors: list[dict[str, Any]]
    notes: list[str]
    # not in the JSON: the export's source_* columns
    provenance: dict[str, str] = field(repr=False)
    csv: str | None = None
    ray: dict[str, Any] | None = None  # a Ray run's nodes, ranks not compared and bytes (docs/cluster.md)

    def body(self) -> dict[str, Any]:
        """The report as ``--json`` gives it (before ``strict_json``): the run, its ranks and margin,
        every row, the first that disagrees, the counts, errors and notes; ``csv`` once written."""
        said: dict[str, Any] = {
            "dump": self.dump,
            "format": self.format,
            "ranks": self.ranks,
            "margin": self.margin,
            "collectives": self.collectives,
            "first_bad": self.first_bad,
            "failed": self.failed,
            "unjudged": self.unjudged,
            "errors": self.errors,
            "notes": self.notes,
            **self.csv_said(),
        }
        if self.ray is not None:  # only where the run was spread over a cluster
            said["ray"] = self.ray
        return said

    def text(self) -> str:
        """What the terminal shows: the summary, then where the CSV went."""
        return _format_text(self.body()) + "\n" + self.csv_line()

    def frame(self) -> pl.DataFrame:
        """The CSV: every row, with the source_* columns every export carries."""
        return stamped(rows_frame(self.collectives), self.provenance)

    @property
    def exit_code(self) -> int:
        """0 when every rank's output agrees with its golden, 1 when one disagrees or cannot be judged
        (or no collective was found)."""
        judged_all = not self.failed and not self.unjudged and not self.errors
        return EXIT_PASS if judged_all and self.collectives else EXIT_FAIL


def build_report(check: RanksCheck, should_stop: Callable[[], bool] | None = None) -> RanksReport:
    """The report of every token's collectives, each rank's row judged now (this loads every rank's
    tensors of every collective not yet checked: call it off the UI thread). ``should_stop`` is asked
    between collectives; once true, the report holds the rows judged so far."""
    rows = check.all_rows(should_stop)
    bad = next((row for row in rows if row["passed"] is False), None)
    return RanksReport(
        dump=check.ranks.path,
        format=check.ranks.format,
        ranks=list(check.ranks.names),
        margin=check.margin,
        collectives=[public_row(row) for row in rows],
        first_bad=None if bad is None else {"token": bad["token"], "op": bad["op"], "rank": bad["rank"]},
        failed=sum(1 for row in rows if row["passed"] is False),
        unjudged=sum(1 for row in rows if row["passed"] is None),
        errors=[p.as_dict() for p in check.ranks.problems],
        notes=list(check.ranks.notes),
        provenance=provenance(check),
        ray=check.said(),
    )


def public_row(row: RankRow) -> dict[str, Any]:
    """A row as the JSON and the CSV give it: the COLUMNS, in their order."""
    return {key: row[key] for key in COLUMNS}  # type: ignore[literal-required]


def rows_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as the JSON gives them (``public_row``), as a frame in COLUMNS' order and types."""
    import polars as pl

    schema = {
        "token": pl.Int64,
        "op": pl.String,
        "rank": pl.Int64,
        **dict.fromkeys(METRICS, pl.Float64),
        "passed": pl.Boolean,
        "rank_folder": pl.String,
        "kind": pl.String,
        "reduction": pl.String,
        "dtype": pl.String,
        "numel": pl.Int64,
        "beyond_bound": pl.Int64,
        "worst_ratio": pl.Float64,
        "error": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def with_provenance(frame: pl.DataFrame, check: RanksCheck) -> pl.DataFrame:
    """``frame`` (the ranks screen's table) with the run's ``provenance`` columns."""
    return stamped(frame, provenance(check))


def provenance(check: RanksCheck) -> dict[str, str]:
    """The constant ``source_*`` columns every export carries (export.py's rule): which run, which
    margin, which tui-acc."""
    from tui_acc import __version__

    return {
        "source_dump": str(Path(check.ranks.path).resolve()),
        "source_margin": f"{check.margin:g}",
        "source_tui_acc": __version__,
    }


LISTED = 50  # rows that disagree or cannot be judged, listed in the text report (--json has all)


def _format_text(report: dict[str, Any]) -> str:
    """Per token, its collectives and how many rows disagree; then the rows that need a look."""
    ranks = report["ranks"]
    rows = report["collectives"]
    lines = [
        f"run     {report['dump']} ({report['format']}, {len(ranks)} ranks: {', '.join(ranks)})",
        f"rule    |out - sum| <= {report['margin']:g} x gamma_(N-1) x sum|x| per element (docs/ranks.md)",
        "",
        f"{'token':>5}  {'collectives':>11}  {'rows':>5}  {'disagree':>8}  {'not judged':>10}",
    ]
    per_token: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        per_token.setdefault(row["token"], []).append(row)
    for token, mine in per_token.items():
        ops = len({row["op"] for row in mine})
        bad = sum(1 for row in mine if row["passed"] is False)
        unjudged = sum(1 for row in mine if row["passed"] is None)
        lines.append(f"{token:>5}  {ops:>11}  {len(mine):>5}  {bad:>8}  {unjudged:>10}")
    attention = [row for row in rows if row["passed"] is not True]
    if attention:
        lines += [
            "",
            f"{'token':>5}  {'rank':>4}  {'verdict':<7}  {'cosine':>10}  {'max rel':>10}  {'mean rel':>10}"
            f"  {'rel eucl':>10}  {'beyond':>7}  op",
        ]
    for row in attention[:LISTED]:
        verdict = "ERROR" if row["passed"] is None else "FAIL"
        beyond = "-" if row["beyond_bound"] is None else str(row["beyond_bound"])
        metrics = (
            numbers.number(row[name])
            for name in ("max_relative_error", "mean_relative_error", "relative_euclidean_distance")
        )
        cosine = numbers.cosine(row["cosine_similarity"])
        lines.append(
            f"{row['token']:>5}  {row['rank']:>4}  {verdict:<7}  {cosine:>10}"
            + "".join(f"  {m:>10}" for m in metrics)
            + f"  {beyond:>7}  {row['op']}"
        )
        if row["error"]:
            lines.append(f"{'':>13}{row['error']}")
    if len(attention) > LISTED:
        lines.append(f"  ... and {len(attention) - LISTED} more (--json lists them all)")
    lines.append("")
    bad = report["first_bad"]
    where = "none" if bad is None else f"token {bad['token']}, {bad['op']}, rank {bad['rank']}"
    lines.append(f"first disagreeing: {where}")
    failed, unjudged = report["failed"], report["unjudged"]
    lines.append(f"rows: {len(rows)}   disagree: {failed}   not judged: {unjudged}")
    lines += [f"error: {e['file']}: {e['message']}" for e in report["errors"][:20]]
    lines += [f"note: {n}" for n in report["notes"]]
    if "ray" in report:
        lines += _ray_lines(report["ray"])
    return "\n".join(lines)


def _ray_lines(ray: dict[str, Any]) -> list[str]:
    """A Ray run's nodes, the ranks not compared and the bytes that crossed between nodes."""
    lines = [f"ray     {ray['address']}: {len(ray['nodes'])} nodes"]
    for node in ray["nodes"]:
        held = ", ".join(node["ranks"]) or "no ranks"
        why = f" ({node['reason']})" if node["reason"] else ""
        lines.append(f"  node {node['node']}: {node['state']}{why}: {held}")
    lines += [
        f"  not compared: rank {n['rank']} ({n['rank_folder']}): {n['reason']}" for n in ray["not_compared"]
    ]
    sizes = ", ".join(f"{k} {v}" for k, v in ray["bytes"].items())
    lines.append(f"  bytes: {sizes}")
    return lines
