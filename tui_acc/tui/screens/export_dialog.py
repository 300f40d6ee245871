"""The export dialog: a proposed CSV path that Enter accepts, or any other the user types (its
extension picks the format). It writes the file itself, so that a failed write leaves it open with
the path as typed, the reason shown, for the user to fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui_acc.reports.export import ExportError, existing_target, expanded
from tui_acc.tui.title import shown_path

if TYPE_CHECKING:
    import polars as pl
    from textual.screen import Screen


@dataclass(frozen=True)
class ExportChoice:
    """Where to write, and whether the user agreed to replace a file that is already there."""

    path: Path
    overwrite: bool
    written: Path | None = None  # where the file is, once written


_HINT = "Enter: write (.csv; .xlsx or .parquet by extension)   Esc: cancel"


class ExportDialog(ModalScreen[ExportChoice | None]):
    """Asks where to write ``rows`` rows of ``view``; never agrees to overwrite without a second Enter.
    ``write`` (raising ``ExportError``) writes the choice and says where; without it the choice is
    handed back unwritten."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="cancel")]

    def __init__(
        self,
        proposed: Path,
        rows: int,
        view: str,
        base_dir: Path,
        write: Callable[[ExportChoice], Path] | None = None,
    ) -> None:
        super().__init__()
        self.write = write
        self.proposed = proposed
        self.rows = rows
        self.view = view
        self.base_dir = base_dir
        # The path the user was warned about: Enter on it again means "yes, replace it".
        self.confirming: Path | None = None

    def compose(self) -> ComposeResult:
        """The title (how many rows of which view), the path box holding the proposed name, and the keys."""
        with Vertical(id="export-dialog"):
            yield Static(f"Export {self.rows} rows of {self.view}", id="export-title")
            yield Input(value=shown_path(self.proposed, Path.cwd()), id="export-path")
            yield Static(_HINT, id="export-hint")

    def on_mount(self) -> None:
        """The cursor starts in the path box."""
        self.query_one("#export-path", Input).focus()

    def chosen_path(self, typed: str) -> Path:
        """The path ``typed`` names: ``~`` expanded, a relative one taken from ``base_dir``."""
        path = expanded(Path(typed.strip()))
        return path if path.is_absolute() else self.base_dir / path

    def show_hint(self, text: str, warning: bool) -> None:
        """Replace the line under the path box with ``text``, in the warning style where ``warning``."""
        hint = self.query_one("#export-hint", Static)
        hint.update(Text(text))  # plain: a path's or a hint's brackets ("tui-acc[xlsx]") are not markup
        hint.set_class(warning, "warning")

    def warn(self, text: str) -> None:
        """Show ``text`` in the warning style under the path box; the dialog stays open."""
        self.show_hint(text, warning=True)

    def on_input_changed(self, event: Input.Changed) -> None:
        """An edited name drops a pending "exists, Enter again replaces it" warning."""
        if self.confirming is not None:  # a new name: the warning no longer applies
            self.confirming = None
            self.show_hint(_HINT, warning=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: write to the typed path (via ``write``) and close; an existing file needs a second
        Enter, and a path that cannot be written keeps the dialog open with a warning."""
        if not event.value.strip():
            self.warn("Type a file name, or Esc to cancel.")
            return
        path = self.chosen_path(event.value)
        try:
            exists = existing_target(path)
        except ExportError as exc:  # a folder, a link to nothing, a name too long: said, the dialog stays
            self.confirming = None
            self.warn(f"Not written: {exc}")
            return
        if exists and self.confirming != path:
            self.confirming = path
            self.warn(
                f"{shown_path(path, Path.cwd())} exists. Enter again replaces it; edit the name to keep it."
            )
            return
        choice = ExportChoice(path, overwrite=self.confirming == path)
        if self.write is not None:
            try:
                choice = ExportChoice(choice.path, choice.overwrite, self.write(choice))
            except ExportError as exc:  # stay open, the typed path kept: the user fixes it or Esc
                self.confirming = None
                self.warn(f"Not written: {exc}")
                return
        self.dismiss(choice)

    def action_cancel(self) -> None:
        """Esc: close without writing (the dialog answers None)."""
        self.dismiss(None)


def offer_export(
    screen: Screen[None],
    frame: pl.DataFrame,
    folder: Path,
    stem: str,
    now: datetime,
    say: Callable[[str], None],
) -> None:
    """``e`` on any view: propose a fresh name in ``folder``, write ``frame`` where the user accepts
    (a failed write keeps the dialog open with the path as typed), and say where it went."""
    from tui_acc.reports.export import fresh_path, write_export  # polars: never before the first frame

    def write(choice: ExportChoice) -> Path:
        return write_export(frame, choice.path, overwrite=choice.overwrite)

    def written(choice: ExportChoice | None) -> None:
        if choice is None or choice.written is None:
            say("export cancelled")
            return
        say(f"exported {frame.height} rows to {choice.written}")
        screen.notify(str(choice.written), title=f"Exported {frame.height} rows", markup=False)

    proposed = fresh_path(folder, stem, now)
    view = stem.removeprefix("tui-acc-")
    screen.app.push_screen(ExportDialog(proposed, frame.height, view, folder, write), written)
