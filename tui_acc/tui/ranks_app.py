"""``tui-acc ranks DUMP``: the check across one run's ranks, an app of its own (no golden run, no
comparison, no re-dump: what AccApp holds for a pair is not there)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from textual.binding import Binding

from tui_acc.collectives.check import RanksCheck
from tui_acc.tui.screens.ranks import RanksScreen
from tui_acc.tui.screens.ranks_help import RanksHelp
from tui_acc.tui.terminal_app import TerminalApp
from tui_acc.tui.title import shown_path


class RanksApp(TerminalApp):
    """Per token, every collective operator's output on every rank against the golden of its inputs."""

    CSS_PATH = ["app.tcss", "ranks.tcss"]
    TITLE = "tui-acc ranks"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", id="help", show=False),
    ]

    def __init__(
        self,
        check: RanksCheck,
        *,
        export_dir: Path | None = None,
        greeting: str | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        super().__init__(greeting)
        self.check = check
        self.export_dir = export_dir or Path.cwd()
        self.clock = clock  # export names carry a timestamp; tests pin it
        self.sub_title = shown_path(Path(check.ranks.path), Path.cwd())

    def on_mount(self) -> None:
        """Open the ranks screen and end on SIGHUP/SIGTERM as q does."""
        self.push_screen(RanksScreen(self.check, self.export_dir, self.clock))
        self.end_on_signals(self.exit)  # as q does

    def action_help(self) -> None:
        """``?``: the keys and the rule each collective is judged by (with this check's margin)."""
        self.push_screen(RanksHelp(self.check.margin))
