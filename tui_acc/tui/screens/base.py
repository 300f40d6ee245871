"""What every comparison screen shares: the title line, the status line, CSV export."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual import on
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui_acc.redump import RedumpPlan
from tui_acc.redump.select import plan_for
from tui_acc.tui.screens.export_dialog import offer_export
from tui_acc.tui.screens.host import Host
from tui_acc.tui.screens.redump_dialog import RedumpChoice, RedumpDialog
from tui_acc.tui.screens.sort_dialog import SortDialog
from tui_acc.tui.sorting import Sort, SortColumn, sorted_keys, worst_end

if TYPE_CHECKING:
    import polars as pl


class ViewScreen(Screen[None]):
    """A screen whose current view can be exported as CSV."""

    # At 80 columns the footer holds about eight keys (q Quit last): the rest are in help (?) and ^p.
    BINDINGS = [
        Binding("e", "export", "Export", show=False, id="export"),
        Binding("question_mark", "app.help", "Help", id="help"),
        Binding("n", "next_failure(1)", "Next fail", id="next_failure"),
        Binding("N", "next_failure(-1)", "Prev fail", show=False, id="previous_failure"),
        Binding("g", "edge('top')", "Top", show=False, id="top"),
        Binding("G", "edge('bottom')", "Bottom", show=False, id="bottom"),
        Binding("s", "sort", "Sort", show=False, id="sort"),
        Binding("r", "redump", "Re-dump", id="redump"),
        Binding("S", "reverse_sort", "Reverse sort", show=False, id="reverse_sort"),
    ]

    # What the view is ordered by; ``None`` column is its natural order (described by NATURAL_ORDER).
    sort = Sort()
    NATURAL_ORDER = "natural order"

    def main_table(self) -> DataTable[object]:
        """The table the navigation keys act on."""
        raise NotImplementedError

    def is_failing(self, key: str) -> bool:
        """Whether the row ``key`` of the main table shows a failure."""
        raise NotImplementedError

    def action_next_failure(self, direction: int) -> None:
        """``n`` / ``N``: the next / previous failing row from the cursor."""
        table = self.main_table()
        keys = [str(k.value) for k in table.rows]
        if not keys:
            return
        here = table.cursor_row
        order = range(here + 1, len(keys)) if direction > 0 else range(here - 1, -1, -1)
        target = next((i for i in order if self.is_failing(keys[i])), None)
        if target is None:
            self.notify("No further failure that way." if direction > 0 else "No earlier failure.")
            return
        table.move_cursor(row=target)

    def action_edge(self, where: str) -> None:
        table = self.main_table()
        table.move_cursor(row=0 if where == "top" else max(table.row_count - 1, 0))

    # --- sorting ------------------------------------------------------------------------------

    # The main table's columns: (key, header, width), in screen order.
    table_columns: tuple[tuple[str, str, int], ...] = ()

    def sort_columns(self) -> list[SortColumn]:
        """Every column of the main table, each sorting its bad end first."""
        return [SortColumn(key, label, worst_end(key)) for key, label, _ in self.table_columns]

    def sort_value(self, key: str, column: str) -> object:
        """The value of row ``key`` in ``column`` to order by (None: not known, sorted last)."""
        raise NotImplementedError

    def fill_table(self) -> None:
        """Rebuild the main table's rows in the current order."""
        raise NotImplementedError

    def update_summary(self) -> None:
        raise NotImplementedError

    @property
    def natural_order(self) -> str:
        return self.NATURAL_ORDER

    def ordered(self, keys: list[str]) -> list[str]:
        return sorted_keys(keys, self.sort_value, self.sort)

    def action_sort(self) -> None:
        """``s``: choose a column to sort by (the current one again reverses it)."""
        self.app.push_screen(
            SortDialog(self.sort_columns(), self.sort, self.natural_order),
            lambda picked: None if picked is None else self.apply_sort(picked),
        )

    def action_reverse_sort(self) -> None:
        self.apply_sort(self.sort.reversed())

    @on(DataTable.HeaderSelected)
    def _sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's header sorts by it (the keyboard way is ``s``)."""
        column = next((c for c in self.sort_columns() if c.key == str(event.column_key.value)), None)
        if column is not None:
            self.apply_sort(self.sort.picked(column))

    def apply_sort(self, sort: Sort) -> None:
        """Reorder the table; the cursor stays on the row it was on."""
        table = self.main_table()
        current = self.cursor_key()
        self.sort = sort
        self.fill_table()
        self.update_summary()
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current), animate=False)

    def cursor_key(self) -> str | None:
        table = self.main_table()
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def sort_summary(self) -> str | None:
        return None if self.sort.column is None else f"sorted: {self.sort.describe(self.sort_columns())} (s)"

    # --- re-dump ------------------------------------------------------------------------------

    def redump_target(self) -> tuple[int, str | None]:
        """(token, golden operator or None for the whole token) under the cursor."""
        raise NotImplementedError

    def action_redump(self) -> None:
        """``r``: show the exact re-dump command for what is under the cursor; Enter runs it."""
        try:
            token, operator = self.redump_target()
        except LookupError:
            self.notify("Nothing under the cursor to re-dump.")
            return
        acc = self.acc
        what = f"token {token}" + (f", {operator} and below" if operator else ", every operator")
        # One time for the whole dialog: the folder it shows is the folder the run creates.
        now = acc.clock()

        def make_plan(side: str, typed: str | None) -> RedumpPlan:
            return plan_for(acc.comparison, acc.redump_settings, side, token, operator, now, typed_exec=typed)

        def saved(side: str) -> str | None:
            return acc.redump_settings.side(side).exec

        def run(choice: RedumpChoice | None) -> None:
            if choice is None:
                self.set_status("re-dump cancelled: nothing ran")
                return
            acc.redump_operator = operator
            acc.start_redump(choice)

        self.app.push_screen(RedumpDialog(make_plan, "test", saved, what), run)

    @property
    def acc(self) -> Host:
        return cast(Host, self.app)

    def view_frame(self) -> pl.DataFrame:
        """The rows and columns on screen, in screen order, at full precision."""
        raise NotImplementedError

    def export_stem(self) -> str:
        raise NotImplementedError

    def action_export(self) -> None:
        """``e``: ask where (a fresh name in the export folder is proposed), then write the view; a
        failed write keeps the dialog open with the path as typed."""
        # here, not at the top: export imports polars, which the first frame does without
        from tui_acc.export import with_provenance

        frame = self.view_frame()  # the view as it is now, whatever changes while the dialog is open
        frame = with_provenance(frame, self.acc.comparison)
        offer_export(self, frame, self.acc.export_dir, self.export_stem(), self.acc.clock(), self.set_status)

    def set_status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(text)
        status.set_class(error, "error")
