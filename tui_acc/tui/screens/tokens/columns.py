"""What the token list shows: its columns for the pair, each token's cells, the order a column sorts
by, and the frame ``e`` exports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from tui_acc.rows import NOISE_FIELDS, Row
from tui_acc.session import Comparison
from tui_acc.tui import formatting as fmt

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.metrics.schema import PolarsType

Columns = tuple[tuple[str, str, int], ...]  # (key, header, width), in screen order

COLUMNS: Columns = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("cosine", "Cosine", 9),
    ("kl", "KL", 9),
    ("max_abs_err", "MaxAbsErr", 9),
    ("top1", "Top-1 g/t", 11),
    ("shape", "Logits shape", 14),
)
SINGLE_FIELDS = ("anomalies", "first_anomaly", "anomaly")
# --all-tokens: each token's local operators and the first of them (◆), as the sweep finds them
LOCAL_COLUMN = ("local_ops", "Local", 6)
LOCAL_FIELDS = ("local_ops", "first_local")
# The exported token table (``view_frame``): column -> the TokenRow field it shows (and is typed as)
_EXPORTED = {
    "token": "token",
    "verdict": "verdict",  # pending until computed
    "cosine": "cosine",
    "kl": "kl",
    "max_abs_err": "max_abs_err",
    "golden_top1": "golden_top1",
    "test_top1": "test_top1",
    "logits_shape": "shape",
    "stats_only": "stats_only",
    "norm_rel_diff": "norm_rel_diff",
    "max_diff": "max_diff",
    "mean_diff": "mean_diff",
    "error": "error",
}
# One dump checked on its own (tui-acc DUMP): where an anomaly starts, not how far from a golden
SINGLE_COLUMNS: Columns = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("anomalies", "Starts", 6),
    ("anomaly", "Kind", 8),
    ("first_anomaly", "First anomalous operator", 40),
)
# When a side holds statistics only, cosine and KL cannot be had: the L2 norms and stats are compared.
STATS_COLUMNS: Columns = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("norm_rel_diff", "NormRel", 9),
    ("max_diff", "MaxDiff", 10),
    ("mean_diff", "MeanDiff", 10),
    ("shape", "Logits shape", 14),
)

_VERDICT_RANK = {"fail": 0, "error": 1, "near-tie": 2, "pass": 3}
# the test's logits node, where it is named otherwise than the golden's (14_LmHead beside root.lm_head)
TEST_LOGITS_COLUMN = ("test_node", "Test logits", 22)


def columns_for(cmp: Comparison, all_tokens: bool = False) -> Columns:
    """The token list's columns for the pair: statistics only, one dump, a baseline; with
    ``all_tokens``, each token's local operators after its verdict. Whether the logits are named
    differently on each side is known once a token is paired (a GE dump's token: a thousand file
    headers), which is the worker's job: the screen adds ``TEST_LOGITS_COLUMN`` when a row says so
    (``names_logits_apart``)."""
    columns = STATS_COLUMNS if cmp.golden.statistics_only or cmp.test.statistics_only else COLUMNS
    if cmp.single:
        return SINGLE_COLUMNS
    if cmp.baseline is not None:  # the logits' error over the baseline's: what the verdict weighs
        at = next(i for i, (key, _, _) in enumerate(columns) if key in ("kl", "norm_rel_diff"))
        columns = (*columns[: at + 1], ("noise_ratio", "×noise", 8), *columns[at + 1 :])
    if all_tokens:
        columns = (*columns[:2], LOCAL_COLUMN, *columns[2:])
    return columns


def names_logits_apart(row: Row) -> bool:
    """Whether a token's row holds logits the two sides name differently."""
    return bool(row.get("test_node")) and row.get("test_node") != row.get("node")


def token_cells(row: Row, columns: Columns, pending: bool = False) -> list[Text | str]:
    """The cells of a token's row, in the order of ``columns`` (``pending``: not computed yet)."""
    passed = row.get("passed")
    top1: Text | str = "-"
    if row.get("golden_top1") is not None:
        same = row["golden_top1"] == row["test_top1"]
        top1 = fmt.failing(f"{row['golden_top1']}/{row['test_top1']}", not same)
    cells: dict[str, Text | str] = {
        "token": fmt.styled(str(row["token"]), None if pending else passed),
        "passed": fmt.token_verdict(row.get("verdict"), pending),
        "cosine": fmt.figure(fmt.cosine(row.get("cosine")), passed),
        "kl": fmt.figure(fmt.num(row.get("kl")), passed),
        "max_abs_err": fmt.figure(fmt.num(row.get("max_abs_err"))),
        "norm_rel_diff": fmt.figure(fmt.num(row.get("norm_rel_diff")), passed),
        "max_diff": fmt.figure(fmt.num(row.get("max_diff"))),
        "mean_diff": fmt.figure(fmt.num(row.get("mean_diff"))),
        "noise_ratio": fmt.figure(fmt.ratio(row.get("noise_ratio")), passed),
        "anomalies": fmt.figure(str(row["anomalies"]) if row.get("anomalies") is not None else "-", passed),
        "anomaly": fmt.failing(row.get("anomaly") or "-", bool(row.get("anomaly"))),
        "first_anomaly": row.get("first_anomaly") or "-",
        "local_ops": _local_cell(row.get("local_ops")),
        "top1": top1,
        "shape": row.get("shape") or "-",
        "test_node": row.get("test_node") or "",
    }
    return [cells[key] for key, _, _ in columns]


def _local_cell(count: object) -> Text | str:
    """How many operators of the token are local: ``…`` until the sweep judged it."""
    if not isinstance(count, int):
        return Text("…", style=fmt.PENDING_STYLE)
    return fmt.failing(f"{count} L", True) if count else "-"


def token_sort_value(token: int, row: Row, column: str) -> object:
    """The token number, its verdict's rank (fail first), a flipped top-1 first, else the row's metric."""
    if column == "token":
        return token
    if column == "passed":
        return _VERDICT_RANK.get(row.get("verdict") or "")
    if column == "top1":  # the flipped ones first
        return None if row.get("golden_top1") is None else row["golden_top1"] == row["test_top1"]
    return row.get(column)


def token_frame(
    rows: list[Row], *, with_noise: bool, single: bool, with_locals: bool = False
) -> pl.DataFrame:
    """The exported token table, a row per token in the order given: its metrics and verdict word
    (noise figures with a baseline; for one dump on its own, the anomaly it starts with; with
    ``with_locals``, each token's local operators and the first of them)."""
    import polars as pl

    frame = [
        {column: row.get(field) for column, field in _EXPORTED.items()}
        | {"token": row["token"], "verdict": _verdict_word(row)}
        | {key: row.get(key) for key in NOISE_FIELDS if with_noise}
        | {key: row.get(key) for key in SINGLE_FIELDS if single}
        | {key: row.get(key) for key in LOCAL_FIELDS if with_locals}
        for row in rows
    ]
    return pl.DataFrame(frame, schema=_token_export_schema(with_noise, single, with_locals))


def _token_export_schema(
    with_noise: bool = False, single: bool = False, with_locals: bool = False
) -> dict[str, PolarsType]:
    """The exported token table's columns, each typed as the row field it shows (``TokenRow``, by
    ``schema.py``); with a baseline, its noise figures at the end; for one dump checked on its own,
    where each token's first anomaly starts."""
    from tui_acc.metrics.schema import TOKEN_SCHEMA

    extra = (
        *(NOISE_FIELDS if with_noise else ()),
        *(SINGLE_FIELDS if single else ()),
        *(LOCAL_FIELDS if with_locals else ()),
    )
    return {column: TOKEN_SCHEMA[field] for column, field in _EXPORTED.items()} | {
        field: TOKEN_SCHEMA[field] for field in extra
    }


def _verdict_word(row: Row) -> str:
    return str(row.get("verdict") or "pending")
