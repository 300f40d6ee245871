"""A screen around one main table: moving through its failures, sorting it, exporting it.

The comparison screens (``base.ViewScreen``, which adds re-dump) and the ranks screen share it.
Each declares its own bindings (their words and which the footer shows differ); the actions are
here.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tui_acc.tui.screens.export_dialog import offer_export
from tui_acc.tui.screens.sort_dialog import SortDialog
from tui_acc.tui.sorting import Sort, SortColumn, sorted_keys, worst_end

if TYPE_CHECKING:
    import polars as pl


class TableScreen(Screen[None]):
    """A screen whose main table can be walked failure by failure, sorted and exported."""

    # What the view is ordered by; ``None`` column is its natural order (described by NATURAL_ORDER).
    sort = Sort()
    NATURAL_ORDER = "natural order"
    # What n / N say when there is no failing row further that way.
    NO_LATER_FAILURE = "No further failure that way."
    NO_EARLIER_FAILURE = "No earlier failure."

    def main_table(self) -> DataTable[object]:
        """The table the navigation keys act on."""
        raise NotImplementedError

    def is_failing(self, key: str) -> bool:
        """Whether the row ``key`` of the main table shows a failure."""
        raise NotImplementedError

    # --- navigation ---------------------------------------------------------------------------

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
            self.notify(self.NO_LATER_FAILURE if direction > 0 else self.NO_EARLIER_FAILURE)
            return
        self.move_to(target)

    def action_edge(self, where: str) -> None:
        """``g`` / ``G``: the first / last row."""
        self.move_to(0 if where == "top" else max(self.main_table().row_count - 1, 0))

    def move_to(self, index: int) -> None:
        """Put the main table's cursor on row ``index``."""
        self.main_table().move_cursor(row=index)

    def cursor_key(self) -> str | None:
        """The key of the main table's row under the cursor; None when the table is empty."""
        table = self.main_table()
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

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
        """Rewrite the summary line above the table (counts, progress, the sort in force)."""
        raise NotImplementedError

    @property
    def natural_order(self) -> str:
        """What the sort dialog calls the unsorted order (``NATURAL_ORDER`` unless a screen says more)."""
        return self.NATURAL_ORDER

    def ordered(self, keys: list[str]) -> list[str]:
        """``keys`` in the current sort's order (unchanged when unsorted; rows without a value last)."""
        return sorted_keys(keys, self.sort_value, self.sort)

    def action_sort(self) -> None:
        """``s``: choose a column to sort by (the current one again reverses it)."""
        self.app.push_screen(
            SortDialog(self.sort_columns(), self.sort, self.natural_order),
            lambda picked: None if picked is None else self.sort_by(picked),
        )

    def action_reverse_sort(self) -> None:
        """``S``: the same column the other way round (nothing when the view is unsorted)."""
        self.sort_by(self.sort.reversed())

    @on(DataTable.HeaderSelected)
    def _sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's header of the main table sorts by it (the keyboard way is ``s``)."""
        if event.data_table is not self.main_table():
            return
        column = next((c for c in self.sort_columns() if c.key == str(event.column_key.value)), None)
        if column is not None:
            self.sort_by(self.sort.picked(column))

    def sort_by(self, sort: Sort) -> None:
        """The user's sort (``s``, ``S``, a header): the table reordered from its top, the worst rows,
        the cursor on the first; back in the natural order, the cursor stays on its row."""
        if sort.column is None:
            self.apply_sort(sort)
            return
        self.sort = sort
        self.fill_table()  # from the top: filling scrolls the table home
        self.update_summary()
        self.move_to(0)

    def apply_sort(self, sort: Sort) -> None:
        """Reorder the table; the cursor stays on the row it was on (rows sorted while they were
        computed settle so, under the user's eyes)."""
        table = self.main_table()
        current = self.cursor_key()
        self.sort = sort
        self.fill_table()
        self.update_summary()
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current), animate=False)

    def sort_summary(self) -> str | None:
        """The summary's ``sorted: column ▼ (s)`` part; None in the natural order."""
        return None if self.sort.column is None else f"sorted: {self.sort.describe(self.sort_columns())} (s)"

    # --- export -------------------------------------------------------------------------------

    def view_frame(self) -> pl.DataFrame:
        """The rows and columns on screen, in screen order, at full precision."""
        raise NotImplementedError

    def export_frame(self) -> pl.DataFrame:
        """What ``e`` writes: the view, with where it came from (provenance columns)."""
        raise NotImplementedError

    def export_stem(self) -> str:
        """The start of a fresh export's file name (a timestamp and ``.csv`` follow)."""
        raise NotImplementedError

    def export_folder(self) -> Path:
        """Where a fresh export's name is proposed."""
        raise NotImplementedError

    def export_time(self) -> datetime:
        """The time in a fresh export's name."""
        raise NotImplementedError

    def action_export(self) -> None:
        """``e``: ask where (a fresh name in the export folder is proposed), then write the view; a
        failed write keeps the dialog open with the path as typed."""
        frame = self.export_frame()  # the view as it is now, whatever changes while the dialog is open
        offer_export(
            self, frame, self.export_folder(), self.export_stem(), self.export_time(), self.set_status
        )

    def set_status(self, text: str, error: bool = False) -> None:
        """Show ``text`` on the status line under the table, in the error style where ``error``."""
        status = self.query_one("#status", Static)
        status.update(Text(text))  # plain: brackets in a path or a reason ("[replay]") are not markup
        status.set_class(error, "error")
