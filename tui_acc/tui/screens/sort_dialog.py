"""``s``: pick the column to order the table by (again on the same column reverses it)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui_acc.tui.sorting import Sort, SortColumn

_NATURAL = "__natural__"


class SortDialog(ModalScreen[Sort | None]):
    """A list of the table's columns; Enter sorts by the highlighted one, Esc leaves the order alone."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="cancel_sort"),
        Binding("j", "move('down')", "Down", show=False, id="sort_down"),
        Binding("k", "move('up')", "Up", show=False, id="sort_up"),
    ]

    def __init__(self, columns: list[SortColumn], current: Sort, natural: str) -> None:
        super().__init__()
        self.columns = columns
        self.current = current
        self.natural = natural

    def compose(self) -> ComposeResult:
        """The natural order, then every column with what picking it does (the current one marked ▲/▼)."""
        options = [Option(self.natural + ("   ← now" if self.current.column is None else ""), id=_NATURAL)]
        for column in self.columns:
            note = column.note
            if column.key == self.current.column:
                note = f"{'▼' if self.current.descending else '▲'} now; Enter reverses"
            options.append(Option(f"{column.label:<14} {note}", id=column.key))
        with Vertical(id="sort-dialog"):
            yield Static("Sort by", id="sort-title")
            yield OptionList(*options, id="sort-columns")
            yield Static("Enter: sort   Esc: cancel   S: reverse", id="sort-hint")

    def on_mount(self) -> None:
        """The highlight starts on the current sort."""
        listing = self.query_one(OptionList)
        keys = [_NATURAL, *(c.key for c in self.columns)]
        listing.highlighted = keys.index(self.current.column) if self.current.column in keys else 0
        listing.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter: answer the picked sort (the current column again reverses it)."""
        picked = next((c for c in self.columns if c.key == event.option.id), None)
        self.dismiss(self.current.picked(picked))

    def action_move(self, direction: str) -> None:
        """``j`` / ``k``: the highlight one column down / up."""
        listing = self.query_one(OptionList)
        listing.action_cursor_down() if direction == "down" else listing.action_cursor_up()

    def action_cancel(self) -> None:
        """Esc: close with the sort unchanged (the dialog answers None)."""
        self.dismiss(None)
