"""App-level facts that more than one screen reacts to."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message


class ExportWritten(Message):
    """A view was exported to a CSV file."""

    def __init__(self, path: Path, rows: int) -> None:
        super().__init__()
        self.path = path
        self.rows = rows
