"""The check across ranks: per token, every collective operator's output on every rank against the
golden of every rank's input (``tui_acc.collectives``), rows arriving as a worker computes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import get_current_worker

from tui_acc.collectives.check import RankRow, RanksCheck
from tui_acc.tui import formatting as fmt
from tui_acc.tui.column_fit import Spec, fit
from tui_acc.tui.screens.ranks_table import (
    COLUMNS,
    FIXED,
    KEEP,
    RankSortColumn,
    detail_text,
    is_bad,
    op_cell,
    rank_cells,
    row_key,
)
from tui_acc.tui.screens.table_screen import TableScreen
from tui_acc.tui.sorting import Sort, SortColumn
from tui_acc.tui.widgets.metric_table import MetricTable

if TYPE_CHECKING:
    import polars as pl


class RanksScreen(TableScreen):
    """Rows of (token, operator, rank); a token list with counts beside them."""

    BINDINGS = [
        Binding("f", "first_bad", "First bad", id="first_bad"),
        Binding("n", "next_failure(1)", "Next bad", id="next_failure"),
        Binding("N", "next_failure(-1)", "Prev bad", show=False, id="previous_failure"),
        Binding("e", "export", "Export", id="export"),
        Binding("s", "sort", "Sort", id="sort"),
        Binding("S", "reverse_sort", "Reverse sort", show=False, id="reverse_sort"),
        Binding("g", "edge('top')", "Top", show=False, id="top"),
        Binding("G", "edge('bottom')", "Bottom", show=False, id="bottom"),
        Binding("j", "cursor('down')", "Down", show=False, id="down"),
        Binding("k", "cursor('up')", "Up", show=False, id="up"),
        Binding("tab", "app.focus_next", "Tokens / rows", show=False, id="focus_next"),
        Binding("question_mark", "app.help", "Help", id="help"),
    ]

    class RowsComputed(Message):
        """One collective's rows (every rank's), from the worker."""

        def __init__(self, rows: list[RankRow]) -> None:
            super().__init__()
            self.rows = rows

    class AllComputed(Message):
        """Every token's collectives are checked."""

    NATURAL_ORDER = "execution order"
    NO_LATER_FAILURE = "No further disagreement that way."
    NO_EARLIER_FAILURE = "No earlier disagreement."

    def __init__(self, check: RanksCheck, export_dir: Path, clock: Callable[[], datetime]) -> None:
        super().__init__()
        self.check = check
        self._export_dir = export_dir
        self._clock = clock
        self.sort = Sort()
        self.rows: dict[str, RankRow] = {}  # what the worker sent: the UI never computes
        self.natural: list[str] = []  # keys in execution order (token, then operator, then rank)
        self.tokens = check.tokens()  # names only: no token folder is walked for it
        self.counts: dict[int, list[int]] = {t: [0, 0, 0] for t in self.tokens}  # ops, rows, bad
        self.all_computed = False
        self.jump_pending = False
        self.disagreeing = 0  # kept as rows arrive: the summary never walks every row
        self.unjudged = 0
        self.longest_op = 0  # the longest operator name seen: the column's natural width
        self.op_width = next(width for key, _, width, _ in COLUMNS if key == "op")

    def compose(self) -> ComposeResult:
        """The summary, the token list beside the rows of (token, operator, rank), the row's detail, the
        status line."""
        yield Header()
        yield Static(id="summary")
        with Horizontal(id="ranks-main"):
            yield MetricTable(id="rank-tokens", cursor_type="row", zebra_stripes=True)
            yield MetricTable(id="collectives", cursor_type="row", zebra_stripes=True)
        yield Static(id="detail")
        if self.check.status() is not None:  # a Ray run: each node's ranks and how it is doing
            yield Static(id="nodes")
        yield Static(id="status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """List every token (pending), lay out the columns and start the check on a worker thread."""
        tokens = self.query_one("#rank-tokens", DataTable)
        for key, label, width in (("token", "Token", 5), ("ops", "Ops", 3), ("bad", "Bad", 3)):
            tokens.add_column(label, key=key, width=width)
        for token in self.tokens:
            tokens.add_row(str(token), Text("…", style=fmt.PENDING_STYLE), "", key=str(token))
        table = self.main_table()
        for key, label, width, _ in COLUMNS:
            table.add_column(label, key=key, width=width)
        table.fixed_columns = FIXED
        self.update_summary()
        self.update_nodes()
        table.focus()
        self.compute()

    def update_nodes(self) -> None:
        """A Ray run's line of nodes: each one's ranks and state (working, done, lost and why)."""
        line = self.check.status()
        if line is not None:
            self.query_one("#nodes", Static).update(Text(line))  # node labels hold [ids]: not markup

    # --- the worker -------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="ranks", exit_on_error=False, name="ranks check")
    def compute(self) -> None:
        """Token by token, collective by collective, in execution order: the rows reach the screen
        as they are computed, and ``f`` has its answer as soon as the first disagreement is found."""
        worker = get_current_worker()
        for token in self.tokens:
            for collective in self.check.collectives(token):
                if worker.is_cancelled:
                    return
                self.post_message(self.RowsComputed(self.check.rows(collective)))
        self.post_message(self.AllComputed())

    def on_resize(self) -> None:
        """Refit the operator column to the new width."""
        self.call_after_refresh(self._fit_columns)

    def _fit_columns(self) -> None:
        """The operator column as wide as its longest name where the room allows (column_fit.fit);
        names elided in the middle (their end says which collective)."""
        table = self.query_one("#collectives", MetricTable)
        room = table.room()
        if room <= 0:
            return
        specs = [
            Spec(key, width, max(self.longest_op, width) if key == "op" else width)
            for key, _, width, _ in COLUMNS
        ]
        widths = fit(specs, room, 2 * table.cell_padding, FIXED, KEEP, "op")
        if table.set_widths(widths) and widths["op"] != self.op_width:
            self.op_width = widths["op"]
            for key in list(table.rows):
                row = self.rows[str(key.value)]
                table.update_cell(key, "op", self._op_cell(row))

    @on(RowsComputed)
    def _show_rows(self, message: RowsComputed) -> None:
        table = self.main_table()
        longest = self.longest_op
        for row in message.rows:
            key = row_key(row)
            self.longest_op = max(self.longest_op, len(row["op"]))
            if key in self.rows:
                continue
            self.rows[key] = row
            self.natural.append(key)
            table.add_row(*self._cells(row), key=key)
            counts = self.counts.setdefault(row["token"], [0, 0, 0])
            counts[1] += 1
            counts[2] += is_bad(row)
            self.disagreeing += row["passed"] is False
            self.unjudged += bool(row["error"])
        if message.rows:
            token = message.rows[0]["token"]
            self.counts[token][0] += 1
            self._update_token(token)
        if self.longest_op > longest or table.row_count == len(message.rows):
            self._fit_columns()
        # a scrollbar that appears with the rows narrows the room: fitted again once it is drawn
        self.call_after_refresh(self._fit_columns)
        if table.row_count == len(message.rows):
            self.show_detail()  # the first rows: the cursor is on one
        self.update_summary()
        self.update_nodes()
        if self.jump_pending:
            self._jump_when_known()

    @on(AllComputed)
    def _finished(self) -> None:
        self.all_computed = True
        if self.sort.column is not None:  # sorted while computing: settle the order now
            self.apply_sort(self.sort)
        self.update_summary()
        self.update_nodes()
        if self.jump_pending:
            self._jump_when_known()

    # --- the view -------------------------------------------------------------------------------

    def main_table(self) -> DataTable[object]:
        """The table of (token, operator, rank) rows."""
        return self.query_one("#collectives", DataTable)

    def _cells(self, row: RankRow) -> list[Text | str]:
        return rank_cells(row, self._op_cell(row))

    def _op_cell(self, row: RankRow) -> Text:
        return op_cell(row, self.op_width, self.longest_op)

    def _update_token(self, token: int) -> None:
        ops, _rows, bad = self.counts[token]
        table = self.query_one("#rank-tokens", DataTable)
        table.update_cell(str(token), "ops", str(ops))
        table.update_cell(str(token), "bad", fmt.failing(str(bad), bad > 0) if bad else "0")

    def update_summary(self) -> None:
        """Ranks and their layout, rows, how many disagree (or are not judged), the margin, progress and
        the sort."""
        ranks = self.check.ranks
        bad, unjudged = self.disagreeing, self.unjudged
        done = (
            sum(1 for counts in self.counts.values() if counts[0])
            if not self.all_computed
            else len(self.tokens)
        )
        progress = "" if self.all_computed else f" · checking token {done}/{len(self.tokens)}"
        parts = [
            f"{ranks.size} ranks ({ranks.format})",
            f"{len(self.rows)} rows",
            f"{bad} disagree" + (f", {unjudged} not judged" if unjudged else ""),
            f"margin {self.check.margin:g}",
        ]
        sort = self.sort_summary()
        self.query_one("#summary", Static).update(
            " · ".join(parts) + progress + (f" · {sort}" if sort else "")
        )

    @on(DataTable.RowHighlighted, "#collectives")
    def show_detail(self) -> None:
        """Under the table: the highlighted row's token, operator and rank, with its error or how it was
        judged."""
        key = self.cursor_key()
        row = self.rows.get(key) if key is not None else None
        detail = self.query_one("#detail", Static)
        if row is None:
            detail.update("")
            return
        detail.update(detail_text(row, self.check.margin))

    @on(DataTable.RowSelected, "#rank-tokens")
    def _go_to_token(self, event: DataTable.RowSelected) -> None:
        """Enter on a token: the first of its rows in the table (a failing one first)."""
        token = int(str(event.row_key.value))
        keys = [str(k.value) for k in self.main_table().rows]
        mine = [i for i, k in enumerate(keys) if self.rows[k]["token"] == token]
        if not mine:
            self.set_status(f"token {token}: no collective checked yet")
            return
        target = next((i for i in mine if is_bad(self.rows[keys[i]])), mine[0])
        self.move_to(target)

    # --- keys -------------------------------------------------------------------------------------

    def action_first_bad(self) -> None:
        """``f``: the first (token, operator, rank) whose output disagrees, in execution order."""
        self.jump_pending = True
        self._jump_when_known()

    def _jump_when_known(self) -> None:
        first = next((k for k in self.natural if self.rows[k]["passed"] is False), None)
        if first is not None:
            self.jump_pending = False
            self.move_to(self.main_table().get_row_index(first))
            row = self.rows[first]
            self.set_status(f"first disagreement: token {row['token']}, {row['op']}, rank {row['rank']}")
        elif self.all_computed:
            self.jump_pending = False
            self.notify(
                "Every rank's output agrees with its golden." if self.rows else "No collective found."
            )
        else:
            self.set_status("looking for the first disagreement … (rows appear as they are checked)")

    def action_cursor(self, direction: str) -> None:
        """``j`` / ``k``: the cursor one row down / up in the focused table (the rows, else the tokens)."""
        focused = self.focused if isinstance(self.focused, DataTable) else self.main_table()
        focused.action_cursor_down() if direction == "down" else focused.action_cursor_up()

    def is_failing(self, key: str) -> bool:
        """Whether the row disagrees or could not be checked (ERR)."""
        return is_bad(self.rows[key])

    def move_to(self, index: int) -> None:
        """The cursor on row ``index``, the focus on the table, the row's detail below it."""
        table = self.main_table()
        table.focus()
        table.move_cursor(row=index)
        self.show_detail()

    # --- sorting ------------------------------------------------------------------------------------

    def sort_columns(self) -> list[SortColumn]:
        """Every column, each with its own worst end (msit's metric names)."""
        return [RankSortColumn(key, label, worst) for key, label, _, worst in COLUMNS]

    def fill_table(self) -> None:
        """Rebuild the rows in the current order, from the rows the worker sent."""
        table = self.main_table()
        table.clear()
        for key in self.ordered(self.natural):
            table.add_row(*self._cells(self.rows[key]), key=key)

    def sort_value(self, key: str, column: str) -> object:
        """The row's field; the verdict as 0 (fails) / 1 (passes), None while not judged."""
        row = self.rows[key]
        if column == "passed":
            return None if row["passed"] is None else int(bool(row["passed"]))
        return row[column]  # type: ignore[literal-required]

    # --- export -----------------------------------------------------------------------------------

    def view_frame(self) -> pl.DataFrame:
        """The rows in the table's order, the columns ``tui-acc ranks --csv`` writes."""
        from tui_acc.reports import collectives as ranks_report

        keys = [str(k.value) for k in self.main_table().rows]
        return ranks_report.rows_frame([ranks_report.public_row(self.rows[k]) for k in keys])

    def export_frame(self) -> pl.DataFrame:
        """The view with the check's provenance (the dump's path, the margin, the tui-acc version)."""
        from tui_acc.reports import collectives as ranks_report

        return ranks_report.with_provenance(self.view_frame(), self.check)

    def export_stem(self) -> str:
        """``tui-acc-ranks``."""
        return "tui-acc-ranks"

    def export_folder(self) -> Path:
        """The folder given to the app (the working directory by default)."""
        return self._export_dir

    def export_time(self) -> datetime:
        """The app's clock now (pinned by tests and screenshots)."""
        return self._clock()


class RanksFromComparison(RanksScreen):
    """The check across ranks opened from a comparison (``R``): Esc goes back to it, ``?`` is this
    check's help."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="ranks_back"),
        Binding("question_mark", "ranks_help", "Help", id="help"),
    ]

    def action_ranks_help(self) -> None:
        from tui_acc.tui.screens.ranks_help import RanksHelp

        self.app.push_screen(RanksHelp(self.check.margin))
