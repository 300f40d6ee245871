"""What every comparison screen shares: the title line, the status line, CSV export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from tui_acc.export import ExportError, fresh_path, write_csv
from tui_acc.tui.messages import ExportWritten

if TYPE_CHECKING:
    from tui_acc.tui.app import AccApp


class ViewScreen(Screen[None]):
    """A screen whose current view can be exported as CSV."""

    BINDINGS = [
        Binding("e", "export", "Export", id="export"),
        Binding("question_mark", "app.help", "Help", id="help"),
    ]

    @property
    def acc(self) -> AccApp:
        return self.app  # type: ignore[return-value]

    def view_frame(self) -> pl.DataFrame:
        """The rows and columns on screen, in screen order, at full precision."""
        raise NotImplementedError

    def export_stem(self) -> str:
        raise NotImplementedError

    def action_export(self) -> None:
        frame = self.view_frame()
        try:
            path = write_csv(frame, fresh_path(self.acc.export_dir, self.export_stem()))
        except ExportError as exc:
            self.set_status(f"export failed: {exc}", error=True)
            self.notify(str(exc), title="Export failed", severity="error")
            return
        self.set_status(f"exported {frame.height} rows to {path}")
        self.notify(str(path), title=f"Exported {frame.height} rows")
        self.post_message(ExportWritten(Path(path), frame.height))

    def set_status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(text)
        status.set_class(error, "error")
