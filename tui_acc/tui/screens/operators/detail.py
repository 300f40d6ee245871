"""The panel under the operator table: the highlighted operator's tensors (``d`` gives them the room),
or where a tensor's error sits (``m``; ``[`` ``]`` the operator's other tensors)."""

from __future__ import annotations

from textual import on
from textual.reactive import var
from textual.widgets import DataTable

from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.tui.widgets.error_map import ErrorMapView
from tui_acc.tui.widgets.tensor_detail import TensorDetail, TensorPanel


class DetailPanel(OperatorScreenBase):
    """The detail panel: what it shows follows the cursor."""

    # d: the panel takes the room of all but a few of the table's rows (app.tcss, -detail-zoomed)
    detail_zoomed: var[bool] = var(False, init=False, toggle_class="-detail-zoomed")

    @on(DataTable.RowHighlighted, "#ops")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail(str(event.row_key.value))

    def show_detail(self, name: str | None) -> None:
        """Show operator ``name``'s tensors and, when it is shown, its error picture (None: nothing)."""
        self.track_screen()
        node = self._pairs.get(name) if name else None
        engine = self.acc.comparison.engine
        self.query_one(TensorDetail).show(node, engine, self._rows.get(name) if name else None)
        self.query_one(ErrorMapView).show(node, engine)

    def action_error_map(self) -> None:
        """``m``: the detail panel pictures where a tensor's error sits, or shows the numbers again."""
        picture = self.query_one(ErrorMapView)
        picture.display = not picture.display
        self._show_numbers(not picture.display)  # at 80x24 there is room for one
        self.show_detail(self.cursor_key())

    def action_error_map_step(self, by: int) -> None:
        """``]`` / ``[``: the picture of the operator's next or previous tensor."""
        self.query_one(ErrorMapView).step(by)

    def action_detail(self) -> None:
        """``d``: the panel takes the room (every tensor of the operator, the table kept to a few rows
        around the cursor), or gives it back; the numbers replace the error picture."""
        if not self.detail_zoomed and self.query_one(ErrorMapView).display:
            self.action_error_map()
        self.detail_zoomed = not self.detail_zoomed

    def _show_numbers(self, shown: bool) -> None:
        """The tensors' numbers in the panel, or nothing of them (the panel with them)."""
        panel = self.query_one(TensorPanel)
        if not shown:
            self.detail_zoomed = False  # the room is the numbers'
            if panel.has_focus:
                self.ops_table().focus()
        panel.display = shown
        self.query_one(TensorDetail).display = shown

    def watch_detail_zoomed(self, zoomed: bool) -> None:
        """Given back: the keys go to the table again; either way the panel starts at its top."""
        panel = self.query_one(TensorPanel)
        if not zoomed and panel.has_focus:
            self.ops_table().focus()
        panel.scroll_home(animate=False)
