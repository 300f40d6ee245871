"""``L``: the running (or last) re-dump's output, status and elapsed time; stop it or open its dump."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, RichLog, Static

from tui_acc.tui.screens.host import Host

if TYPE_CHECKING:
    from tui_acc.redump.runner import RedumpRun


def run_status(run: RedumpRun) -> Text:
    """One line: what runs, for how long, and how it ended (words and symbols, not colour alone)."""
    sel = run.plan.selection
    what = f"re-dump {sel.side} token {sel.token}"
    seconds = f"{run.elapsed():.0f} s"
    if run.status == "running":
        return Text(f"⟳ {what}: running {seconds}, {len(run.lines)} lines  (L log · x stop)", style="bold")
    if run.status == "succeeded":
        return Text(f"✓ {what}: finished in {seconds}  (L log · o open the new dump)", style="bold green")
    if run.status == "cancelled":
        return Text(f"■ {what}: stopped after {seconds}", style="yellow")
    if run.status == "detached":
        return Text(f"{what}: left running, logging to {run.plan.log}", style="dim")
    return Text(f"✗ {what}: failed (exit {run.returncode}) after {seconds}  (L log)", style="bold red")


class RedumpLogScreen(Screen[None]):
    """The log panel. Browsing goes on behind it (Esc); the run goes on whatever the terminal does."""

    _seen = 0  # how many of the run's lines are shown

    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="log_back"),
        Binding("x", "stop_redump", "Stop", id="log_stop"),
        Binding("o", "open_redump", "Open new dump", id="log_open"),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """x only while the re-dump runs, o only once it has succeeded: the footer shows a key where it
        does something (the status line says the same)."""
        run = self.acc.redump_run
        if action == "stop_redump":
            return run is not None and run.running
        if action == "open_redump":
            return run is not None and run.status == "succeeded"
        return True

    def action_stop_redump(self) -> None:
        """``x``: stop the running re-dump."""
        self.acc.action_stop_redump()

    def action_open_redump(self) -> None:
        """``o``: open the finished re-dump in place of its side."""
        self.acc.action_open_redump()

    def compose(self) -> ComposeResult:
        """The run's status line above its output (the last 5000 lines), and the keys."""
        yield Header()
        yield Static(id="redump-status")
        yield RichLog(id="redump-log", max_lines=5000, wrap=False, highlight=False, markup=False)
        yield Footer(compact=True)  # every key that matters fits in 80 columns

    def on_mount(self) -> None:
        """Show the run's output so far and its status (or say that no re-dump has run)."""
        run = self.acc.redump_run
        log = self.query_one(RichLog)
        if run is None:
            log.write("No re-dump has run in this session: press r on a token or an operator.")
            return
        self._seen = 0
        self.show_new_lines()
        self.show_status()

    def show_new_lines(self) -> None:
        """Write the run's lines this screen has not shown yet."""
        run = self.acc.redump_run
        if run is None:
            return
        lines, self._seen = run.lines_since(self._seen)
        log = self.query_one(RichLog)
        for line in lines:
            log.write(Text(line))

    def show_status(self) -> None:
        """Refresh the status line: running, finished, stopped, left running or failed, with the time
        taken."""
        run = self.acc.redump_run
        if run is None:
            return
        # query, not query_one: the app's one-second tick may come while the screen is taken down
        for status in self.query("#redump-status").results(Static):
            status.update(run_status(run))
            self.refresh_bindings()  # x and o come and go with the run's state

    @property
    def acc(self) -> Host:
        """The app showing this screen, as the screens may use it (``Host``)."""
        return cast(Host, self.app)
