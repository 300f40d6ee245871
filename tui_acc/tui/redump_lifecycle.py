"""A session's re-dumps, from the confirmed command to the new dump on screen.

One runs at a time, in the background, while browsing goes on: its lines reach the log screen (``L``)
a few at a time, ``x`` there stops it (its whole process group, waited for on a thread), ``o`` opens
the finished dump in place of its side at the same token and operator, ``O`` goes back to the dumps
tui-acc started with. Quitting asks first while one runs; leaving stops it unless the user chose to
leave it running. ``AccApp`` holds one and binds its keys to it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

from textual.app import App, ScreenStackError
from textual.widgets import Static
from textual.worker import get_current_worker

from tui_acc.dumps import DumpError
from tui_acc.redump import RedumpError, RedumpSettings, remember_exec
from tui_acc.redump.runner import EXIT_GRACE, STOP_GRACE, RedumpRun
from tui_acc.redump.settings import SettingsError
from tui_acc.session import Comparison
from tui_acc.tui.messages import OneInFlight
from tui_acc.tui.screens.redump_dialog import QuitDialog, RedumpChoice


class _Session(Protocol):
    """What the re-dumps use of the app besides Textual's ``App``."""

    comparison: Comparison
    config_file: Path  # where a command typed in the dialog is remembered
    opener: Callable[[Path, Path], Comparison]  # a pair opened with this session's options

    def switch_comparison(self, comparison: Comparison, token: int | None, operator: str | None) -> None:
        """Compare ``comparison`` from now on, shown at ``token`` and ``operator``."""


class RedumpLifecycle:
    """The running (or last) re-dump of the app, and the dumps it replaced."""

    def __init__(self, app: App[Any], settings: RedumpSettings) -> None:
        """``settings``: which dumper each side uses ([redump] of tui-acc.toml)."""
        self._app = app
        self._session = cast(_Session, app)  # the app, as the re-dumps use it
        self.settings = settings
        self.run: RedumpRun | None = None
        self.operator: str | None = None  # the golden operator the re-dump was asked for
        self.opened: RedumpRun | None = None  # the re-dump that replaced a side, if any
        # the dumps tui-acc started with (O goes back to them after o opened a re-dump)
        comparison = self._session.comparison
        self.original = (comparison.golden.root, comparison.test.root)
        self._log_news = OneInFlight()  # a chatty dumper's lines come in a few messages, not one each

    # --- running ------------------------------------------------------------------------------

    def start(self, choice: RedumpChoice) -> None:
        """Run the confirmed plan in the background; browsing goes on."""
        app = self._app
        if self.run is not None and self.run.running:
            app.notify("A re-dump is already running (L shows it, x stops it).", severity="warning")
            return
        if choice.remember:
            try:
                remember_exec(self._session.config_file, choice.plan.selection.side, choice.remember)
            except (SettingsError, OSError) as exc:
                app.notify(str(exc), title="Command not remembered", severity="warning", markup=False)
            self.settings = self.settings.with_exec(choice.plan.selection.side, choice.remember)

        def line(_text: str) -> None:  # on the log follower's thread
            if self._log_news.arrive():
                app.call_later(self._new_lines)  # thread-safe: posted to the app's queue

        def ended(_run: RedumpRun) -> None:
            app.call_later(self._ended)

        run = RedumpRun(choice.plan, on_line=line, on_exit=ended)
        try:
            run.start()
        except RedumpError as exc:
            app.notify(str(exc), title="Re-dump not started", severity="error", markup=False)
            return
        self.run = run
        app.notify(f"{choice.plan.command_line()}", title="Re-dump started (L: log)", markup=False)
        self.show_state()

    def _new_lines(self) -> None:
        """New re-dump output: the log screen, if shown, appends it."""
        from tui_acc.tui.screens.redump_log import RedumpLogScreen

        self._log_news.handled()  # lines after this point post a new message
        if isinstance(self._app.screen, RedumpLogScreen):
            self._app.screen.show_new_lines()

    def _ended(self) -> None:
        """The re-dump process ended: say whether it succeeded (o opens it) or failed (with its exit
        status)."""
        run = self.run
        self.show_state()
        if run is None:
            return
        if run.status == "succeeded":
            self._app.notify("o opens it in place of that side (L: its log).", title="Re-dump finished")
        elif run.status == "failed":
            said = f"exit status {run.returncode}; the log (L) says why."
            self._app.notify(said, title="Re-dump failed", severity="error", markup=False)

    def show_state(self) -> None:
        """Refresh the re-dump line of the current screen (every second while one runs)."""
        run = self.run
        if run is None:
            return
        from tui_acc.tui.screens.redump_log import RedumpLogScreen, run_status

        status = run_status(run)
        try:
            screen = self._app.screen
        except ScreenStackError:  # the timer's last tick while the app closes: nothing to refresh
            return
        if isinstance(screen, RedumpLogScreen):
            screen.show_status()
        for bar in screen.query("#redump-bar"):
            if isinstance(bar, Static):
                bar.update(status)
                bar.add_class("active")

    def show_log(self) -> None:
        """``L``: the re-dump log (its output as it comes, and its status)."""
        from tui_acc.tui.screens.redump_log import RedumpLogScreen

        if not isinstance(self._app.screen, RedumpLogScreen):
            self._app.push_screen(RedumpLogScreen())

    # --- stopping -----------------------------------------------------------------------------

    def stop(self) -> None:
        """``x`` in the log: stop the running re-dump (its whole process group); a note when none runs."""
        run = self.run
        if run is None or not run.running:
            self._app.notify("No re-dump is running.")
            return
        self._stop(run)
        self._app.notify("Stopping the re-dump (its whole process group)…")

    def _stop(self, run: RedumpRun, then_exit: bool = False) -> None:
        async def stop() -> None:  # SIGTERM, and SIGKILL if it outlives the grace: waited on a thread
            await asyncio.to_thread(run.stop, STOP_GRACE)
            if then_exit:
                self._app.exit()

        self._app.run_worker(stop(), group="redump-stop", exit_on_error=False, name="stop re-dump")

    def quit(self) -> None:
        """``q``: quit; while a re-dump runs, first ask whether to stop it, leave it running or stay."""
        run = self.run
        if run is None or not run.running:
            self._app.exit()
            return

        def decide(choice: str | None) -> None:
            if choice == "stop":
                self._app.notify("Stopping the re-dump (its whole process group), then quitting…")
                self._stop(run, then_exit=True)
            elif choice == "detach":
                run.detach()
                self._app.exit()

        self._app.push_screen(QuitDialog(str(run.plan.log)), decide)

    async def stop_on_exit(self) -> None:
        """No orphans: a run the user did not choose to leave running stops with tui-acc (a stop under
        way too: it may still be in its grace), waited for on a thread."""
        if self.run is not None:
            await asyncio.to_thread(self.run.stop, EXIT_GRACE)

    # --- opening the new dump, and going back ---------------------------------------------------

    def open_finished(self) -> None:
        """``o`` in the log: open the finished re-dump in place of its side, at the same token and
        operator."""
        run = self.run
        if run is None or run.status != "succeeded":
            unfinished = run is None or run.running
            self._app.notify("No finished re-dump to open." if unfinished else "The re-dump did not succeed.")
            return
        self._app.notify(f"{run.plan.out}", title="Opening the re-dump…", markup=False)
        self._open_off_the_loop(functools.partial(self._read_redump, run), "open re-dump")

    def _read_redump(self, run: RedumpRun) -> None:
        """Worker thread: read the new dump (a folder scan); the screens switch once it is read."""
        side = run.plan.selection.side
        comparison = self._session.comparison
        golden = run.plan.out if side == "golden" else comparison.golden.root
        test = run.plan.out if side == "test" else comparison.test.root
        try:
            opened = self._session.opener(Path(golden), Path(test))
        except DumpError as exc:
            self._app.notify(
                str(exc), title="Cannot open the re-dump", severity="error", markup=False
            )  # thread-safe
            return
        if not get_current_worker().is_cancelled:  # "o" again: the later open wins
            self._app.call_later(self._redump_read, run, opened)

    def _redump_read(self, run: RedumpRun, comparison: Comparison) -> None:
        """Switch to the new comparison, at the same token and operator."""
        self._session.switch_comparison(comparison, run.plan.selection.token, self.operator)
        self.opened = run
        side = run.plan.selection.side
        self._app.notify(f"{side} is now {run.plan.out}  (O: back)", title="Re-dump opened", markup=False)

    def back_to_original(self) -> None:
        """``O``: after ``o``, back to the dumps tui-acc started with, at the same token and operator."""
        if self.opened is None:
            self._app.notify("The original dumps are the ones open.")
            return
        from tui_acc.tui.screens.operators import OperatorScreen

        screen = self._app.screen
        token = screen.token if isinstance(screen, OperatorScreen) else None
        operator = screen.cursor_key() if isinstance(screen, OperatorScreen) else None
        self._app.notify(
            f"{self.original[0]}  vs  {self.original[1]}", title="Opening the original dumps…", markup=False
        )
        self._open_off_the_loop(functools.partial(self._read_original, token, operator), "open the original")

    def _read_original(self, token: int | None, operator: str | None) -> None:
        """Worker thread: read the original dumps again (a folder scan)."""
        try:
            comparison = self._session.opener(*self.original)
        except DumpError as exc:
            title = "Cannot open the original dumps"
            self._app.notify(str(exc), title=title, severity="error", markup=False)  # thread-safe
            return
        if not get_current_worker().is_cancelled:
            self._app.call_later(self._original_read, comparison, token, operator)

    def _original_read(self, comparison: Comparison, token: int | None, operator: str | None) -> None:
        """The original dumps are read again: compare them from now on, at the same token and operator."""
        self._session.switch_comparison(comparison, token, operator)
        self.opened = None
        self._app.notify("the original dumps are open again", title="Back to the original")

    def _open_off_the_loop(self, read: Callable[[], None], name: str) -> None:
        """A dump is read on a thread; a later ``o`` or ``O`` cancels the earlier read (exclusive)."""
        app = self._app
        app.run_worker(read, thread=True, exclusive=True, group="redump-open", exit_on_error=False, name=name)
