"""The Textual application: the comparison, the screen stack, and the re-dump in progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from textual import work
from textual.binding import Binding
from textual.content import Content
from textual.events import Resize
from textual.message import Message
from textual.widgets import Static
from textual.worker import Worker, WorkerState, get_current_worker

from tui_acc.config import FILE_NAME
from tui_acc.dumps import DumpError
from tui_acc.redump import RedumpError, RedumpSettings, remember_exec
from tui_acc.redump.runner import EXIT_GRACE, STOP_GRACE, RedumpRun
from tui_acc.redump.settings import SettingsError
from tui_acc.session import Comparison, open_comparison
from tui_acc.tui import formatting as fmt
from tui_acc.tui.messages import OneInFlight
from tui_acc.tui.screens.help import HelpScreen
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.screens.problems import ProblemsScreen
from tui_acc.tui.screens.redump_dialog import QuitDialog, RedumpChoice
from tui_acc.tui.screens.redump_log import RedumpLogScreen, run_status
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.tui.screens.view_state import OperatorView
from tui_acc.tui.terminal_app import TerminalApp
from tui_acc.tui.title import SEPARATOR, shown_path


class AccApp(TerminalApp):
    """``tui-acc GOLDEN TEST``: tokens -> operators -> tensors."""

    CSS_PATH = "app.tcss"
    TITLE = "tui-acc"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("L", "redump_log", "Re-dump log", id="redump_log", show=False),
        Binding("question_mark", "help", "Help", id="help", show=False),
        Binding("u", "problems", "Notes and unmatched", id="problems", show=False),
        Binding("O", "original_dump", "Back to the original dump", id="original_dump", show=False),
    ]

    def __init__(
        self,
        comparison: Comparison,
        *,
        export_dir: Path | None = None,
        greeting: str | None = None,
        clock: Callable[[], datetime] = datetime.now,
        redump: RedumpSettings | None = None,
        opener: Callable[[Path, Path], Comparison] | None = None,
        config_file: Path | None = None,
        start_at: int | None = None,
        swap: str | None = None,
    ) -> None:
        """``start_at``: a token whose operators open at once, the cursor on its first failing one
        (``tui-acc hunt`` ends there); Esc goes back to the token list. ``swap``: the command line
        with golden and test swapped, for the warning when the golden is the less precise side."""
        super().__init__(greeting)
        self.start_at = start_at
        self.swap_command = swap
        self.comparison = comparison
        self._cache_warned = False  # a row cache that cannot be used is said once, not per worker
        self._log_news = OneInFlight()  # a chatty dumper's lines come in a few messages, not one each
        # Computed rows are written to the disk cache on a thread of their own, one flush at a time
        # in the order asked: the event loop never waits for SQLite (nor for a slow or full disk).
        self._cache_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tui-acc-cache")
        # re-dumps: which dumper each side uses, how to open a new dump with this session's options,
        # and the tui-acc.toml an inference command typed in the dialog is remembered in
        self.redump_settings = redump or RedumpSettings()
        self.opener = opener or open_comparison
        self.config_file = config_file or Path.cwd() / FILE_NAME
        self.redump_run: RedumpRun | None = None
        self.export_dir = export_dir or Path.cwd()
        # Export names carry a timestamp; tests and screenshots pin the clock to stay reproducible.
        self.clock = clock
        self.operator_views: dict[int, OperatorView] = {}  # reopening a token shows it as it was left
        # the dumps tui-acc started with (O goes back to them after o opened a re-dump)
        self.original = (comparison.golden.root, comparison.test.root)
        self.opened_redump: RedumpRun | None = None  # the re-dump that replaced a side, if any
        self.show_title()

    def show_title(self) -> None:
        """The pair compared (``format_title`` fits it to the header's width)."""
        cwd = Path.cwd()
        golden, test = (shown_path(side.root, cwd) for side in (self.comparison.golden, self.comparison.test))
        # one dump checked on its own: its path alone (no "golden"/"test" sides to name)
        self.sub_title = f"check of {golden}" if self.comparison.single else f"{golden}{SEPARATOR}{test}"

    def on_mount(self) -> None:
        """Open the token list (and, with ``start_at``, that token's operators), tick the re-dump line
        every second, and end on SIGHUP/SIGTERM as q does."""
        self.push_screen(TokenScreen())
        if self.start_at is not None:
            self.push_screen(OperatorScreen(self.start_at, at_first_failure=True))
        self.set_interval(1.0, self.show_redump_state)
        # ended as q ends it: a re-dump in progress is stopped and computed rows are saved
        self.end_on_signals(self._end_on_signal)

    # The header's room beside textual's icon (8 cells) and clock space (10 cells).
    _HEADER_ROOM = 18

    def format_title(self, title: str, sub_title: str) -> Content:
        """``tui-acc — golden G  test T``: both sides named, paths elided in the middle to fit."""
        golden, sep, test = sub_title.partition(SEPARATOR)
        room = self.size.width - self._HEADER_ROOM - len(title) - len(" — ")
        if sep:
            sub_title = fmt.sides_title(golden, test, room)
        return super().format_title(title, fmt.elide_middle(sub_title, max(room, 8)))

    def on_resize(self, event: Resize) -> None:
        """Refit the header's title (the two dumps' paths) to the new width."""
        self.mutate_reactive(AccApp.sub_title)  # the headers refit the title to the new width

    def action_help(self) -> None:
        """``?``: the help screen (keys, columns, verdicts); nothing when it is already shown."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_problems(self) -> None:
        """``u``: the notes and the operators left unmatched (of the re-dumped selection when a re-dump is
        open)."""
        if not isinstance(self.screen, ProblemsScreen):
            narrow = self.opened_redump.plan.selection if self.opened_redump is not None else None
            self.push_screen(ProblemsScreen(self.comparison, narrow))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed background computation becomes visible; finished work is saved."""
        if event.state == WorkerState.SUCCESS:
            self.save_rows(self.comparison)
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(
                f"{event.worker.name}: {event.worker.error}", title="Computation failed", severity="error"
            )

    class RowsSaved(Message):
        """A flush of the row cache ended (``error``: what it raised, if anything)."""

        def __init__(self, error: BaseException | None) -> None:
            super().__init__()
            self.error = error

    def save_rows(self, comparison: Comparison) -> Future[None]:
        """Write the comparison's new rows to the disk cache, off the event loop (none yet: nothing
        has been computed, and the engine is not built for it)."""
        engine = comparison.built_engine
        saved = self._cache_writer.submit(engine.flush if engine is not None else lambda: None)
        saved.add_done_callback(lambda done: self.post_message(self.RowsSaved(done.exception())))
        return saved

    def on_acc_app_rows_saved(self, message: RowsSaved) -> None:
        """A row-cache flush ended: its write error, if any, becomes a warning."""
        if message.error is not None:  # RowCache keeps the errors it expects in ``problem``
            self.notify(f"{message.error}", title="Row cache not written", severity="warning")
        self.warn_about_cache()

    def warn_about_cache(self) -> None:
        """Once: the row cache could not be read or written (results are computed again next time)."""
        engine = self.comparison.built_engine
        cache = engine.cache if engine is not None else None
        if cache is not None and cache.problem and not self._cache_warned:
            self._cache_warned = True
            self.notify(cache.problem, title="Row cache", severity="warning")

    # --- re-dump ------------------------------------------------------------------------------

    class RedumpLines(Message):
        """New lines in the re-dump's log: at most one such message waits at a time, however fast
        a chatty dumper writes (the screen reads what it has not shown from the run)."""

    class RedumpEnded(Message):
        pass

    def start_redump(self, choice: RedumpChoice) -> None:
        """Run the confirmed plan in the background; browsing goes on."""
        if self.redump_run is not None and self.redump_run.running:
            self.notify("A re-dump is already running (L shows it, x stops it).", severity="warning")
            return
        if choice.remember:
            try:
                remember_exec(self.config_file, choice.plan.selection.side, choice.remember)
            except (SettingsError, OSError) as exc:
                self.notify(str(exc), title="Command not remembered", severity="warning")
            self.redump_settings = self.redump_settings.with_exec(choice.plan.selection.side, choice.remember)

        def line(_text: str) -> None:  # on the log follower's thread
            if self._log_news.arrive():
                self.post_message(self.RedumpLines())

        def ended(_run: RedumpRun) -> None:
            self.post_message(self.RedumpEnded())

        run = RedumpRun(choice.plan, on_line=line, on_exit=ended)
        try:
            run.start()
        except RedumpError as exc:
            self.notify(str(exc), title="Re-dump not started", severity="error")
            return
        self.redump_run = run
        self.notify(f"{choice.plan.command_line()}", title="Re-dump started (L: log)")
        self.show_redump_state()

    def on_acc_app_redump_lines(self, message: RedumpLines) -> None:
        """New re-dump output: the log screen, if shown, appends it."""
        self._log_news.handled()  # lines after this point post a new message
        if isinstance(self.screen, RedumpLogScreen):
            self.screen.show_new_lines()

    def on_acc_app_redump_ended(self, message: RedumpEnded) -> None:
        """The re-dump process ended: say whether it succeeded (o opens it) or failed (with its exit
        status)."""
        run = self.redump_run
        self.show_redump_state()
        if run is None:
            return
        if run.status == "succeeded":
            self.notify("o in the log (L) opens it in place of that side.", title="Re-dump finished")
        elif run.status == "failed":
            self.notify(
                f"exit status {run.returncode}; the log (L) says why.",
                title="Re-dump failed",
                severity="error",
            )

    def show_redump_state(self) -> None:
        """Refresh the re-dump line of the current screen (every second while one runs)."""
        run = self.redump_run
        if run is None:
            return
        status = run_status(run)
        if isinstance(self.screen, RedumpLogScreen):
            self.screen.show_status()
        for bar in self.screen.query("#redump-bar"):
            if isinstance(bar, Static):
                bar.update(status)
                bar.add_class("active")

    def action_redump_log(self) -> None:
        """``L``: the re-dump log (its output as it comes, and its status)."""
        if not isinstance(self.screen, RedumpLogScreen):
            self.push_screen(RedumpLogScreen())

    def action_stop_redump(self) -> None:
        """``x`` in the re-dump log: stop the running re-dump (its whole process group); a note when none
        runs."""
        run = self.redump_run
        if run is None or not run.running:
            self.notify("No re-dump is running.")
            return
        self.stop_redump(run)
        self.notify("Stopping the re-dump (its whole process group)…")

    @work(group="redump-stop", exit_on_error=False, name="stop re-dump")
    async def stop_redump(self, run: RedumpRun, then_exit: bool = False) -> None:
        """SIGTERM, and SIGKILL if it outlives the grace: seconds spent on a thread, not the loop."""
        await asyncio.to_thread(run.stop, STOP_GRACE)
        if then_exit:
            self.exit()

    def action_open_redump(self) -> None:
        """Open the finished re-dump in place of its side, at the same token and operator."""
        run = self.redump_run
        if run is None or run.status != "succeeded":
            self.notify(
                "No finished re-dump to open."
                if run is None or run.running
                else "The re-dump did not succeed."
            )
            return
        self.notify(f"{run.plan.out}", title="Opening the re-dump…")
        self.open_redump(run)

    class RedumpOpened(Message):
        """A finished re-dump was read, ready to take its side's place."""

        def __init__(self, run: RedumpRun, comparison: Comparison) -> None:
            super().__init__()
            self.run = run
            self.comparison = comparison

    @work(thread=True, exclusive=True, group="redump-open", exit_on_error=False, name="open re-dump")
    def open_redump(self, run: RedumpRun) -> None:
        """Read the new dump (a folder scan) off the event loop; the screens switch when it is read."""
        side = run.plan.selection.side
        golden = run.plan.out if side == "golden" else self.comparison.golden.root
        test = run.plan.out if side == "test" else self.comparison.test.root
        try:
            comparison = self.opener(Path(golden), Path(test))
        except DumpError as exc:
            self.notify(str(exc), title="Cannot open the re-dump", severity="error")  # thread-safe
            return
        if not get_current_worker().is_cancelled:  # "o" again: the later open wins
            self.post_message(self.RedumpOpened(run, comparison))

    def on_acc_app_redump_opened(self, message: RedumpOpened) -> None:
        """Switch to the new comparison, at the same token and operator."""
        run = message.run
        self.switch_comparison(message.comparison, run.plan.selection.token, self.redump_operator)
        self.opened_redump = run
        self.notify(f"{run.plan.selection.side} is now {run.plan.out}  (O: back)", title="Re-dump opened")

    def switch_comparison(self, comparison: Comparison, token: int | None, operator: str | None) -> None:
        """Compare ``comparison`` from now on, shown at ``token`` and ``operator`` where it has them."""
        self.save_rows(self.comparison)  # the rows of the comparison being replaced are kept
        if self.comparison.built_engine is not None:
            self.comparison.built_engine.close()
        self.comparison = comparison
        self.operator_views.clear()  # another dump: its names and verdicts are not the ones left
        self.show_title()
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(TokenScreen())
        if token is not None and token in comparison.pairing.tokens:
            self.push_screen(OperatorScreen(token, select=operator))

    def action_original_dump(self) -> None:
        """``O``: after ``o``, back to the dumps tui-acc started with, at the same token and operator."""
        if self.opened_redump is None:
            self.notify("The original dumps are the ones open.")
            return
        screen = self.screen
        token = screen.token if isinstance(screen, OperatorScreen) else None
        operator = screen.cursor_key() if isinstance(screen, OperatorScreen) else None
        self.notify(f"{self.original[0]}  vs  {self.original[1]}", title="Opening the original dumps…")
        self.open_original(token, operator)

    class OriginalOpened(Message):
        def __init__(self, comparison: Comparison, token: int | None, operator: str | None) -> None:
            super().__init__()
            self.comparison, self.token, self.operator = comparison, token, operator

    @work(thread=True, exclusive=True, group="redump-open", exit_on_error=False, name="open the original")
    def open_original(self, token: int | None, operator: str | None) -> None:
        """Read the original dumps again (a folder scan) off the event loop."""
        try:
            comparison = self.opener(*self.original)
        except DumpError as exc:
            self.notify(str(exc), title="Cannot open the original dumps", severity="error")  # thread-safe
            return
        if not get_current_worker().is_cancelled:
            self.post_message(self.OriginalOpened(comparison, token, operator))

    def on_acc_app_original_opened(self, message: OriginalOpened) -> None:
        """The original dumps are read again (``O``): compare them from now on, at the same token and
        operator."""
        self.switch_comparison(message.comparison, message.token, message.operator)
        self.opened_redump = None
        self.notify("the original dumps are open again", title="Back to the original")

    # The golden operator the re-dump was asked for (reopened with the cursor on it).
    redump_operator: str | None = None

    async def action_quit(self) -> None:
        """``q``: quit; while a re-dump runs, first ask whether to stop it, leave it running or stay."""
        run = self.redump_run
        if run is None or not run.running:
            self.exit()
            return

        def decide(choice: str | None) -> None:
            if choice == "stop":
                self.notify("Stopping the re-dump (its whole process group), then quitting…")
                self.stop_redump(run, then_exit=True)
            elif choice == "detach":
                run.detach()
                self.exit()

        self.push_screen(QuitDialog(str(run.plan.log)), decide)

    def _end_on_signal(self) -> None:
        """SIGHUP/SIGTERM: end the way q does, without asking (the terminal may already be gone);
        unmounting stops a re-dump in progress."""
        self.exit()

    async def on_unmount(self) -> None:
        """No orphans: a run the user did not choose to leave running stops with tui-acc; the rows
        computed so far are saved. Both wait on threads: exiting waits for them, the loop does not."""
        if self.redump_run is not None:  # a stop under way, too: it may still be in its grace
            await asyncio.to_thread(self.redump_run.stop, EXIT_GRACE)
        last = self.save_rows(self.comparison)  # after any flush still queued
        self._cache_writer.shutdown(wait=False)  # no more flushes; the queued ones still run
        await asyncio.wrap_future(last)
