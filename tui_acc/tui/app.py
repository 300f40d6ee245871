"""The Textual application: the comparison, the screen stack, the row cache's saves; the re-dumps are
``redump_lifecycle.RedumpLifecycle``'s, which the app holds."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from textual.binding import Binding
from textual.content import Content
from textual.events import Resize
from textual.message import Message
from textual.worker import Worker, WorkerState

from tui_acc.config import FILE_NAME
from tui_acc.dumps.model import DumpError
from tui_acc.dumps.sharding import sharding
from tui_acc.redump import RedumpSettings
from tui_acc.redump.runner import RedumpRun
from tui_acc.session import Comparison, open_comparison
from tui_acc.tui import formatting as fmt
from tui_acc.tui.redump_lifecycle import RedumpLifecycle
from tui_acc.tui.screens.help import HelpScreen
from tui_acc.tui.screens.host import Host
from tui_acc.tui.screens.problems import ProblemsScreen
from tui_acc.tui.screens.redump_dialog import RedumpChoice
from tui_acc.tui.screens.tokens import TokenScreen
from tui_acc.tui.screens.view_state import OperatorView
from tui_acc.tui.terminal_app import TerminalApp
from tui_acc.tui.title import SEPARATOR, shown_path

_HELP = "help"  # the installed help screen's name


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
        Binding("R", "ranks", "Ranks", id="ranks", show=False),
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
        all_tokens: bool = False,
        nodes_said: Callable[[], str] | None = None,
    ) -> None:
        """``start_at``: a token whose operators open at once, the cursor on its first failing one
        (``tui-acc hunt`` ends there); Esc goes back to the token list. ``swap``: the command line
        with golden and test swapped, for the warning when the golden is the less precise side.
        ``all_tokens``: every token's operators are judged in the background once the logits are
        compared (``report --all-tokens``'s view); ``f`` then finds a culprit where no logits fail.
        ``nodes_said``: a Ray run's line of nodes (``--ray``), shown under the table, every second."""
        super().__init__(greeting)
        self.start_at = start_at
        self.swap_command = swap
        self.all_tokens = all_tokens
        self.nodes_said = nodes_said
        self.comparison = comparison
        self._cache_warned = False  # a row cache that cannot be used is said once, not per worker
        # Computed rows are written to the disk cache on a thread of their own, one flush at a time
        # in the order asked: the event loop never waits for SQLite (nor for a slow or full disk).
        self._cache_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tui-acc-cache")
        # re-dumps: how to open a new dump with this session's options, and the tui-acc.toml an
        # inference command typed in the dialog is remembered in
        self.opener = opener or open_comparison
        self.config_file = config_file or Path.cwd() / FILE_NAME
        self.redumps = RedumpLifecycle(self, redump or RedumpSettings())
        self.export_dir = export_dir or Path.cwd()
        # Export names carry a timestamp; tests and screenshots pin the clock to stay reproducible.
        self.clock = clock
        self.operator_views: dict[int, OperatorView] = {}  # reopening a token shows it as it was left
        self.show_title()

    def show_title(self) -> None:
        """The pair compared (``format_title`` fits it to the header's width)."""
        cwd = Path.cwd()
        golden, test = (shown_path(side.root, cwd) for side in (self.comparison.golden, self.comparison.test))
        if (split := sharding(self.comparison.test)) is not None:
            test = f"{test} ({split}, gathered)"  # a sharded test read whole
        # one dump checked on its own: its path alone (no "golden"/"test" sides to name)
        self.sub_title = f"check of {golden}" if self.comparison.single else f"{golden}{SEPARATOR}{test}"

    def on_mount(self) -> None:
        """Open the token list (and, with ``start_at``, that token's operators), tick the re-dump line
        every second, and end on SIGHUP/SIGTERM as q does."""
        self.push_screen(TokenScreen())
        if self.start_at is not None:
            from tui_acc.tui.screens.operators import OperatorScreen

            self.push_screen(OperatorScreen(self.start_at, at_first_failure=True))
        self.set_interval(1.0, self.redumps.show_state)
        if self.nodes_said is not None:
            self.set_interval(1.0, self.show_nodes)
        # ended as q ends it: a re-dump in progress is stopped and computed rows are saved
        self.end_on_signals(self._end_on_signal)

    def show_nodes(self) -> None:
        """Refresh the current screen's line of Ray nodes (each node's ranks, state and rows)."""
        from rich.text import Text
        from textual.app import ScreenStackError
        from textual.widgets import Static

        if self.nodes_said is None:
            return
        line = Text(self.nodes_said())  # node labels hold [ids]: not markup
        try:
            bars = self.screen.query("#nodes-bar")
        except ScreenStackError:  # the timer's last tick while the app closes
            return
        for bar in bars:
            if isinstance(bar, Static):
                bar.update(line)

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
            if not self.is_screen_installed(_HELP):  # kept once made: the next ? shows it at once
                self.install_screen(HelpScreen(), _HELP)
            self.push_screen(_HELP)

    def action_problems(self) -> None:
        """``u``: the notes and the operators left unmatched (of the re-dumped selection when a re-dump is
        open)."""
        if not isinstance(self.screen, ProblemsScreen):
            opened = self.redumps.opened
            narrow = opened.plan.selection if opened is not None else None
            self.push_screen(ProblemsScreen(self.comparison, narrow))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed background computation becomes visible; finished work is saved."""
        if event.state == WorkerState.SUCCESS:
            self.save_rows(self.comparison)
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(
                f"{event.worker.name}: {event.worker.error}", title="Computation failed", severity="error"
            )

    # gc.freeze once the token list is complete; None: in a terminal, not under a test's headless
    # driver (a test process would keep the cycles of every test after it).
    freeze_heap: bool | None = None
    # how long after the token list is shown again the heap is frozen: the closed screen's removal
    # (a task of its own) has finished by then, so it is collected rather than frozen
    freeze_delay = 1.0
    _freeze_pending = False

    def on_token_screen_tokens_finished(self) -> None:
        """The token list is complete (its screen's message, bubbled up): the heap is frozen, once
        the list is what is shown."""
        self._freeze_pending = True
        self._freeze_if_listed()

    def on_token_screen_shown_again(self) -> None:
        """The token list is shown again (an operator screen opened while it was being compared has
        closed): the freeze it was waiting for, once that screen is gone."""
        if self._freeze_pending:
            self.set_timer(self.freeze_delay, self._freeze_if_listed)

    def _freeze_if_listed(self) -> None:
        """What is in memory once the token list is complete (the modules, the comparison's indexes and
        engine, the token screen) lives as long as the comparison. Python's full collections walked
        all of it every few seconds while frames were drawn, 70-240 ms each at 120x40 on two busy
        cores: a key pressed then waited. Frozen, they walk only what came after. Only while the
        token list is the screen shown, after a collection: a screen open then, or garbage not yet
        collected, would be frozen with it and never collected."""
        if not self._freeze_pending or not isinstance(self.screen, TokenScreen):
            return
        self._freeze_pending = False
        if self.freeze_heap if self.freeze_heap is not None else not self.is_headless:
            gc.collect()
            gc.freeze()

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
            self.notify(f"{message.error}", title="Row cache not written", severity="warning", markup=False)
        self.warn_about_cache()

    def warn_about_cache(self) -> None:
        """Once: the row cache could not be read or written (results are computed again next time)."""
        engine = self.comparison.built_engine
        cache = engine.cache if engine is not None else None
        if cache is not None and cache.problem and not self._cache_warned:
            self._cache_warned = True
            self.notify(cache.problem, title="Row cache", severity="warning")

    def switch_comparison(self, comparison: Comparison, token: int | None, operator: str | None) -> None:
        """Compare ``comparison`` from now on, shown at ``token`` and ``operator`` where it has them."""
        self.save_rows(self.comparison)  # the rows of the comparison being replaced are kept
        if self.comparison.built_engine is not None:
            self.comparison.built_engine.close()
        gc.unfreeze()  # the comparison replaced can be collected; the new one's is frozen when listed
        self._freeze_pending = False
        self.comparison = comparison
        self.operator_views.clear()  # another dump: its names and verdicts are not the ones left
        self.show_title()
        while len(self.screen_stack) > 1:
            self.pop_screen()
        self.push_screen(TokenScreen())
        if token is not None and token in comparison.pairing.tokens:
            from tui_acc.tui.screens.operators import OperatorScreen

            self.push_screen(OperatorScreen(token, select=operator))

    # --- re-dump: the keys and what the screens use, RedumpLifecycle's --------------------------

    def start_redump(self, choice: RedumpChoice) -> None:
        """Run the re-dump ``choice`` in the background; its lines go to the re-dump log (L)."""
        self.redumps.start(choice)

    @property
    def redump_run(self) -> RedumpRun | None:
        """The running or last re-dump (None: none has run)."""
        return self.redumps.run

    @redump_run.setter
    def redump_run(self, run: RedumpRun | None) -> None:
        self.redumps.run = run

    @property
    def redump_settings(self) -> RedumpSettings:
        """Which dumper each side uses, with the inference commands remembered."""
        return self.redumps.settings

    @redump_settings.setter
    def redump_settings(self, settings: RedumpSettings) -> None:
        self.redumps.settings = settings

    @property
    def redump_operator(self) -> str | None:
        """The golden operator the re-dump was asked for (reopened with the cursor on it)."""
        return self.redumps.operator

    @redump_operator.setter
    def redump_operator(self, operator: str | None) -> None:
        self.redumps.operator = operator

    def action_redump_log(self) -> None:
        """``L``: the re-dump log (its output as it comes, and its status)."""
        self.redumps.show_log()

    def action_stop_redump(self) -> None:
        """``x`` in the re-dump log: stop the running re-dump (its whole process group)."""
        self.redumps.stop()

    def action_open_redump(self) -> None:
        """``o`` in the re-dump log: the finished re-dump in place of its side, at the same token and
        operator."""
        self.redumps.open_finished()

    def action_original_dump(self) -> None:
        """``O``: after ``o``, back to the dumps tui-acc started with, at the same token and operator."""
        self.redumps.back_to_original()

    def action_ranks(self) -> None:
        """``R``: a gathered test's collectives on every rank against what their inputs give (the
        ``tui-acc ranks`` check of the test's own dump), Esc back to the comparison."""
        if sharding(self.comparison.test) is None:
            self.notify("R checks a sharded test's ranks: this test was read as one", severity="warning")
            return
        from tui_acc.collectives.check import RanksCheck
        from tui_acc.collectives.rank_set import open_ranks
        from tui_acc.tui.screens.ranks import RanksFromComparison

        test = self.comparison.test
        try:  # read as the comparison read it: links out of the dump only where it followed them
            ranks = open_ranks(str(test.root), follow_links=test.load_policy.root is None)
        except DumpError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(RanksFromComparison(RanksCheck(ranks), self.export_dir, self.clock))

    async def action_quit(self) -> None:
        """``q``: quit; while a re-dump runs, first ask whether to stop it, leave it running or stay."""
        self.redumps.quit()

    def _end_on_signal(self) -> None:
        """SIGHUP/SIGTERM: end the way q does, without asking (the terminal may already be gone);
        unmounting stops a re-dump in progress."""
        self.exit()

    async def on_unmount(self) -> None:
        """No orphans: a run the user did not choose to leave running stops with tui-acc; the rows
        computed so far are saved. Both wait on threads: exiting waits for them, the loop does not."""
        await self.redumps.stop_on_exit()
        last = self.save_rows(self.comparison)  # after any flush still queued
        self._cache_writer.shutdown(wait=False)  # no more flushes; the queued ones still run
        await asyncio.wrap_future(last)


def _provides_host(app: AccApp) -> Host:
    """Never called: mypy checks here that AccApp provides what the screens use of it (``Host``)."""
    return app
