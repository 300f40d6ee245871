"""The tables of tui-acc: a DataTable whose cursor row stays on screen when the table is resized,
whose key columns stay on the left while ``←`` ``→`` scroll the rest a group of whole columns at a
time, and whose column widths are fitted to the room (``tui_acc.tui.column_fit``)."""

from __future__ import annotations

from collections.abc import Mapping

from textual import events
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from tui_acc.tui.column_fit import page


class MetricTable(DataTable[object]):
    """Keeps the cursor row visible when the table's height changes.

    The detail panel under the operator table grows with the highlighted operator, and terminals
    are resized: without this the row the user was on (after ``f``, say) can end up below the edge.
    """

    _drawn_width = -1  # the width the cached cells were drawn at

    def on_resize(self, event: events.Resize) -> None:
        """Keep the cursor row in view at the new size; the cells drawn are kept where only the height
        changed."""
        # DataTable's own handler drops every cell it has drawn on any resize. The operator table's
        # height changes with the detail panel under it, operator by operator: each cursor move then
        # drew every visible cell again through rich (30-100 ms on two busy cores). A cell's drawing
        # depends on the widths only (the rows' offsets, the line cache's keys: width, not height).
        if event.size.width == self._drawn_width:
            event.prevent_default()
        self._drawn_width = event.size.width
        if self.row_count:
            self.move_cursor(row=self.cursor_row, animate=False)  # scrolls it into view after layout

    # --- sideways: whole columns ----------------------------------------------------------------

    def _page(self, step: int) -> None:
        columns = self.ordered_columns
        widths = [column.get_render_width(self) for column in columns]
        pinned = sum(widths[: self.fixed_columns])
        spans, x = [], 0
        for index, width in enumerate(widths):
            if index >= self.fixed_columns:
                spans.append((x, x + width))
            x += width
        view = self.scrollable_content_region.width
        target = page(
            spans, round(self.scroll_x), view, pinned, round(self.max_scroll_x), step, 2 * self.cell_padding
        )
        self.scroll_to(x=target, animate=False, immediate=True)  # keys in a row each see the last one

    def action_cursor_right(self) -> None:
        """``→`` with a row cursor: the next columns that do not fit, whole (the key columns stay)."""
        if self.cursor_type != "row":
            super().action_cursor_right()
            return
        self._page(1)

    def action_cursor_left(self) -> None:
        """``←`` with a row cursor: the previous columns, whole (the key columns stay)."""
        if self.cursor_type != "row":
            super().action_cursor_left()
            return
        self._page(-1)

    # --- widths ---------------------------------------------------------------------------------

    def room(self) -> int:
        """The width the cells have (0 before the first layout)."""
        return self.scrollable_content_region.width

    def set_widths(self, widths: Mapping[str, int]) -> bool:
        """Give the columns these widths; whether any changed."""
        changed = False
        for key, width in widths.items():
            column = self.columns.get(ColumnKey(key))
            if column is not None and column.width != width:
                column.width = width
                changed = True
        if changed:
            # DataTable works out its scrollable width (and drops the lines it drew) on idle when
            # told to; a column's width set from outside is not otherwise noticed.
            self._require_update_dimensions = True
            self._clear_caches()
            self.refresh()
        return changed
