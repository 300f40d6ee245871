"""``tui-acc report DUMP``: one dump checked on its own (anomalies/), as JSON, text or a CSV frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tui_acc import __version__
from tui_acc.anomalies.rules import anomaly_text
from tui_acc.reports.output import EXIT_FAIL, EXIT_PASS, Said
from tui_acc.reports.pair import UnknownToken
from tui_acc.session import Comparison

_ANOMALY_SCHEMA = {
    "token": pl.Int64,
    "op": pl.String,
    "type": pl.String,
    "tensor": pl.String,
    "kind": pl.String,
    "figure": pl.Float64,
    "label": pl.String,
    "dtype": pl.String,
    "shape": pl.String,
    "file": pl.String,
}


@dataclass(frozen=True)
class SingleReport(Said):
    """What ``report DUMP`` found, in the order ``--json`` gives it (``tool`` and ``version`` first)."""

    dump: dict[str, Any]
    rules: dict[str, Any]
    tokens: list[dict[str, Any]]
    anomalies: list[dict[str, Any]]
    first_anomaly: dict[str, Any] | None
    checked_tokens: list[int]
    errors: list[dict[str, Any]]
    notes: list[str]
    csv: str | None = None

    def body(self) -> dict[str, Any]:
        """The report as ``--json`` gives it (before ``strict_json``): the fields above in their
        order, ``csv`` once written."""
        said: dict[str, Any] = {
            "tool": "tui-acc",
            "version": __version__,
            "dump": self.dump,
            "rules": self.rules,
            "tokens": self.tokens,
            "anomalies": self.anomalies,
            "first_anomaly": self.first_anomaly,
            "checked_tokens": self.checked_tokens,
            "errors": self.errors,
            "notes": self.notes,
            **self.csv_said(),
        }
        return said

    def text(self) -> str:
        """What the terminal shows: the summary, then where the CSV went."""
        return _format_text(self.body()) + "\n" + self.csv_line()

    def frame(self) -> pl.DataFrame:
        """The CSV: one row per anomalous tensor."""
        return pl.DataFrame(self.anomalies, schema=_ANOMALY_SCHEMA)

    @property
    def exit_code(self) -> int:
        """1 when an anomaly (or a damaged file) was found, 0 when the dump is clean."""
        return EXIT_FAIL if self.anomalies or self.errors else EXIT_PASS


def build_report(cmp: Comparison, token: int | None = None) -> SingleReport:
    """Every token's operators (or ``token``'s), each tensor's anomaly, and the first where one starts."""
    engine = cmp.engine
    if token is not None and token not in cmp.pairing.tokens:
        raise UnknownToken(f"token {token} is not in the dump (tokens: {list(cmp.pairing.tokens)})")
    tokens = [token] if token is not None else list(cmp.pairing.tokens)
    token_rows = engine.token_rows(tokens)
    anomalies: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    for at in tokens:
        verdict = cmp.verdicts.token(at)
        nodes = {row["golden_node"]: row for row in verdict.rows}
        for row in engine.tensors_frame(at).iter_rows(named=True):
            if row.get("anomaly") is None:
                continue
            node = nodes.get(row["golden_node"], {})
            anomalies.append(
                {
                    "token": at,
                    "op": row["golden_node"],
                    "type": node.get("golden_type"),
                    "tensor": row["slot"],
                    "kind": row["anomaly"],
                    "figure": row["anomaly_figure"],
                    # where it starts (local), or what came in with the inputs (inherited)
                    "label": node.get("label") if row["role"] == "output" else "input",
                    "dtype": row.get("test_dtype"),
                    "shape": row.get("test_shape"),
                    "file": row.get("test_path"),
                }
            )
        suspect = verdict.culprit_row
        if first is None and suspect is not None:
            worst = next(
                (
                    a
                    for a in anomalies
                    if a["token"] == at and a["op"] == suspect["golden_node"] and a["label"] != "input"
                ),
                None,
            )
            first = {
                "token": at,
                "op": suspect["golden_node"],
                "type": suspect.get("golden_type"),
                "tensor": worst["tensor"] if worst else suspect.get("worst_output"),
                "kind": worst["kind"] if worst else suspect.get("anomaly"),
                "figure": worst["figure"] if worst else suspect.get("anomaly_figure"),
            }
    errors = [p.as_dict() for p in cmp.golden.problems]
    errors += [
        {"file": r["test_path"], "message": error} for r in engine.cached_rows() if (error := r.get("error"))
    ]
    index = cmp.golden
    return SingleReport(
        dump={
            "path": str(index.root),
            "data_dir": str(index.data_dir),
            "format": index.format,
            "tokens": len(index.tokens),
            "order": index.order_source,
        },
        rules={"jump_factor": engine.settings.jump_factor, "jump_floor": engine.settings.jump_floor},  # type: ignore[attr-defined]
        tokens=[
            {
                key: row.get(key)
                for key in ("token", "verdict", "anomalies", "first_anomaly", "anomaly", "error")
            }
            for row in token_rows
        ],
        anomalies=anomalies,
        first_anomaly=first,
        checked_tokens=tokens,
        errors=errors,
        notes=index.notes + cmp.pairing.notes,
    )


def _format_text(report: dict[str, Any]) -> str:
    dump = report["dump"]
    lines = [
        f"dump    {dump['path']}  ({dump['format']}, {dump['tokens']} tokens, order: {dump['order']})",
        "checked on its own (no golden): NaN, Inf, float16 overflow, all-zero outputs, magnitude jumps",
        "",
        f"{'token':>5}  {'verdict':<7}  {'starts':>6}  first anomalous operator",
    ]
    for t in report["tokens"]:
        verdict = {"fail": "ANOMALY", "error": "ERROR"}.get(t["verdict"] or "", t["verdict"] or "?")
        where = f"{t['first_anomaly']} ({t['anomaly']})" if t["first_anomaly"] else "-"
        lines.append(f"{t['token']:>5}  {verdict:<7}  {t['anomalies'] or 0:>6}  {where}")
    lines.append("")
    first = report["first_anomaly"]
    if first:
        lines.append(
            f"first anomaly: token {first['token']}, {first['op']} ({first['type']}), {first['tensor']}: "
            f"{first['kind']} ({anomaly_text(first['kind'], first['figure'])})"
        )
    else:
        lines.append(
            "first anomaly: none" + (" where one starts (only inherited ones)" if report["anomalies"] else "")
        )
    lines.append(f"anomalous tensors: {len(report['anomalies'])}")
    for e in report["errors"][:20]:
        lines.append(f"error: {e['file']}: {e['message']}")
    lines += [f"note: {n}" for n in report["notes"]]
    return "\n".join(lines)
