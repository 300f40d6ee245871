"""``tui-acc ranks DUMP``: the check across one run's ranks, an app of its own (no golden run, no
comparison, no re-dump: what AccApp holds for a pair is not there)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import Screen

from tui_acc.collectives.check import RanksCheck
from tui_acc.tui import formatting as fmt
from tui_acc.tui.palette import binding_commands
from tui_acc.tui.screens.ranks import RanksScreen
from tui_acc.tui.screens.ranks_help import RanksHelp
from tui_acc.tui.title import shown_path


class RanksApp(App[None]):
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
        export_dir: Path | None = None,
        greeting: str | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        super().__init__()
        fmt.use_monochrome(self.no_color)
        self.check = check
        self.export_dir = export_dir or Path.cwd()
        self.clock = clock  # export names carry a timestamp; tests pin it
        self.greeting = greeting
        self.sub_title = shown_path(Path(check.ranks.path), Path.cwd())

    def on_mount(self) -> None:
        self.push_screen(RanksScreen(self.check, self.export_dir, self.clock))
        # a dropped SSH session (SIGHUP) or a kill (SIGTERM) ends the app the way q does
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.exit)
        if self.greeting:
            self.notify(self.greeting, timeout=12)

    def get_driver_class(self) -> type[Driver]:
        """On Linux, AccApp's driver that survives a dropped SSH session."""
        driver = super().get_driver_class()
        if driver.__module__ != "textual.drivers.linux_driver":  # Windows, or TEXTUAL_DRIVER set
            return driver
        from tui_acc.tui.driver import HangupSafeDriver  # needs termios: imported where it exists

        return HangupSafeDriver

    def action_help(self) -> None:
        self.push_screen(RanksHelp(self.check.margin))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from binding_commands(self, screen)
        yield from (c for c in super().get_system_commands(screen) if c.title != "Quit")
