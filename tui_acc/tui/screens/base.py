"""What every comparison screen shares: a main table (navigation, sort, export: ``TableScreen``),
re-dump, and the app the screens read the comparison from."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from textual.binding import Binding

from tui_acc.redump import RedumpPlan
from tui_acc.redump.select import plan_for
from tui_acc.tui.screens.host import Host
from tui_acc.tui.screens.redump_dialog import RedumpChoice, RedumpDialog
from tui_acc.tui.screens.table_screen import TableScreen

if TYPE_CHECKING:
    import polars as pl


class ViewScreen(TableScreen):
    """A comparison screen: its view can be exported, and what is under the cursor dumped again."""

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
        # the re-dump line under the table says "o open the new dump" once one has finished
        Binding("o", "open_redump", "Open re-dump", show=False, id="open_redump"),
    ]

    # --- re-dump ------------------------------------------------------------------------------

    def action_open_redump(self) -> None:
        """``o``: open the finished re-dump in place of its side, here as in the log (L)."""
        self.acc.action_open_redump()

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
        """The app showing this screen, as the screens may use it (``Host``)."""
        return cast(Host, self.app)

    # --- export: the app's folder and clock, the comparison's provenance ------------------------

    def export_frame(self) -> pl.DataFrame:
        """The view plus the comparison's provenance columns (both dumps' paths, the thresholds, the
        tui-acc version)."""
        # here, not at the top: export imports polars, which the first frame does without
        from tui_acc.reports.export import with_provenance

        return with_provenance(self.view_frame(), self.acc.comparison)

    def export_folder(self) -> Path:
        """The app's export folder (the working directory unless the app was given one)."""
        return self.acc.export_dir

    def export_time(self) -> datetime:
        """The app's clock now (tests and screenshots pin it, so export names are reproducible)."""
        return self.acc.clock()
