"""What every tui-acc app does with its terminal, which may be an SSH session that drops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterable

from textual.app import App, SystemCommand
from textual.driver import Driver
from textual.screen import Screen

from tui_acc.tui import formatting as fmt
from tui_acc.tui.palette import binding_commands


class TerminalApp(App[None]):
    """NO_COLOR honoured, a driver that survives a hangup, SIGHUP/SIGTERM ending the app as ``q``
    does, a greeting once mounted, and a command palette of the screen's own keys."""

    def __init__(self, greeting: str | None = None) -> None:
        # NO_COLOR asks for no colour codes (no-color.org), and textual's answer for a truecolor
        # theme is to send every colour as its grey; with ANSI colours it sends none at all (its
        # NoColor filter). Read before App.__init__, which takes NO_COLOR out of the environment.
        super().__init__(ansi_color=True if "NO_COLOR" in os.environ else None)
        fmt.use_monochrome(self.no_color)  # NO_COLOR: failures in bold and reverse, not in grey
        self.greeting = greeting

    def end_on_signals(self, end: Callable[[], object]) -> None:
        """A dropped SSH session (SIGHUP) or a kill (SIGTERM) calls ``end``; then the greeting."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGHUP, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, end)
        if self.greeting:
            self.notify(self.greeting, timeout=12, markup=False)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this platform; on Linux one that survives a dropped SSH session."""
        driver = super().get_driver_class()
        if driver.__module__ != "textual.drivers.linux_driver":  # Windows, or TEXTUAL_DRIVER set
            return driver
        from tui_acc.tui.driver import HangupSafeDriver  # needs termios: imported where it exists

        return HangupSafeDriver

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Every key of this screen and of the app (palette.py), and Textual's own (theme, keys...)."""
        yield from binding_commands(self, screen)
        yield from (c for c in super().get_system_commands(screen) if c.title != "Quit")  # "app: quit"
