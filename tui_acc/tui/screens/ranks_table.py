"""What the check across ranks shows of each row: the columns (each with its worst end), a row's
cells, the operator's name fitted to its column, and the detail line under the table."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from tui_acc.collectives.check import RankRow
from tui_acc.tui import formatting as fmt
from tui_acc.tui.sorting import SortColumn, Worst

# (key, header, width, worst end): the main table's columns
# The key columns first, pinned while the metrics scroll beside them (→: the next ones, whole)
COLUMNS: tuple[tuple[str, str, int, Worst], ...] = (
    ("token", "Token", 5, "low"),
    ("rank", "Rank", 4, "low"),
    ("passed", "Verdict", 7, "low"),
    ("op", "Operator", 16, "low"),  # the narrowest; as wide as the longest name where there is room
    ("cosine_similarity", "Cosine", 9, "low"),
    ("max_relative_error", "MaxRelErr", 10, "high"),
    ("mean_relative_error", "MeanRelErr", 10, "high"),
    ("relative_euclidean_distance", "RelEucl", 10, "high"),
    ("beyond_bound", "Beyond", 6, "high"),
    ("worst_ratio", "xBound", 9, "high"),
)
FIXED = 4  # token, rank, verdict, operator
KEEP = 5  # and the cosine, in view without scrolling
_NOTES = {"token": "first to last", "op": "A to Z", "rank": "first to last", "passed": "failures first"}


@dataclass(frozen=True)
class RankSortColumn(SortColumn):
    """A column of this screen: its own worst end (its metrics are msit's names, not the pair's)."""

    @property
    def note(self) -> str:
        """What picking it does, in the sort dialog (this screen's words for its own columns)."""
        return _NOTES.get(self.key) or ("highest first" if self.worst == "high" else "lowest first")


def row_key(row: RankRow) -> str:
    """``token|rank|operator``: the table key of ``row``, unique in a run."""
    return f"{row['token']}|{row['rank']}|{row['op']}"


def is_bad(row: RankRow) -> bool:
    """Whether the row disagrees or could not be checked (ERR)."""
    return row["passed"] is False or bool(row["error"])


def rank_cells(row: RankRow, op: Text) -> list[Text | str]:
    """The row's cells, in the order of ``COLUMNS`` (``op``: its operator cell, fitted)."""
    passed = row["passed"]
    if row["error"]:
        verdict = Text("ERR", style=fmt.palette().error)
    elif passed is None:
        verdict = Text("…", style=fmt.PENDING_STYLE)
    else:
        verdict = (
            Text("pass", style=fmt.palette().passed) if passed else Text("FAIL", style=fmt.palette().failed)
        )
    ok = passed is not False
    beyond = "-" if row["beyond_bound"] is None else str(row["beyond_bound"])
    return [
        str(row["token"]),
        str(row["rank"]),
        verdict,
        op,
        fmt.figure(fmt.cosine(row["cosine_similarity"]), ok),
        fmt.figure(fmt.num(row["max_relative_error"]), ok),
        fmt.figure(fmt.num(row["mean_relative_error"]), ok),
        fmt.figure(fmt.num(row["relative_euclidean_distance"]), ok),
        fmt.figure(beyond, ok),
        fmt.figure(ratio(row["worst_ratio"]), ok),
    ]


def op_cell(row: RankRow, width: int, longest: int) -> Text:
    """The operator's name in a column ``width`` wide; an ATB path by its layers' index where the
    column cannot hold every name whole (``longest``: ``3/8_AllReduceOperation``), elided in the
    middle where it must."""
    op = row["op"] if width >= longest else fmt.compact_path(row["op"])
    return fmt.failing(fmt.elide_middle(op, width), row["passed"] is False)


def detail_text(row: RankRow, margin: float) -> Text | str:
    """Under the table: the row's token, operator and rank, with its error or how it was judged."""
    head = f"token {row['token']} · {row['op']} · rank {row['rank']} ({row['rank_folder']})"
    if row["error"]:
        return Text(f"{head}\n{row['error']}", style=fmt.palette().error)
    judged = (
        f"{row['kind']} ({row['reduction']}) · {row['dtype']} · {row['numel']} elements · "
        f"{row['beyond_bound']} beyond {margin:g} x the rounding bound "
        f"(worst {ratio(row['worst_ratio'])} x)"
    )
    return f"{head}\n{judged}"


def ratio(value: float | None) -> str:
    """A ratio to the bound, as the table writes it."""
    return "-" if value is None else fmt.num(value)
