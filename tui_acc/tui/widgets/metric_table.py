"""The tables of tui-acc: a DataTable whose cursor row stays on screen when the table is resized."""

from __future__ import annotations

from textual import events
from textual.widgets import DataTable


class MetricTable(DataTable[object]):
    """Keeps the cursor row visible when the table's height changes.

    The detail panel under the operator table grows with the highlighted operator, and terminals
    are resized: without this the row the user was on (after ``f``, say) can end up below the edge.
    """

    def on_resize(self, event: events.Resize) -> None:
        if self.row_count:
            self.move_cursor(row=self.cursor_row, animate=False)  # scrolls it into view after layout
