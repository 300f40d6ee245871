"""The Textual application: holds the comparison and the screen stack, nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from tui_acc.session import Comparison
from tui_acc.tui.screens.help import HelpScreen
from tui_acc.tui.screens.problems import ProblemsScreen
from tui_acc.tui.screens.tokens import TokenScreen


class AccApp(App[None]):
    """``tui-acc GOLDEN TEST``: tokens -> operators -> tensors."""

    CSS_PATH = "app.tcss"
    TITLE = "tui-acc"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", id="help", show=False),
        Binding("u", "problems", "Unmatched", id="problems", show=False),
    ]

    def __init__(
        self,
        comparison: Comparison,
        export_dir: Path | None = None,
        greeting: str | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        super().__init__()
        self.comparison = comparison
        self.export_dir = export_dir or Path.cwd()
        # Export names carry a timestamp; tests and screenshots pin the clock to stay reproducible.
        self.clock = clock
        self.greeting = greeting
        self.sub_title = f"{comparison.golden.root}  vs  {comparison.test.root}"

    def on_mount(self) -> None:
        self.push_screen(TokenScreen())
        if self.greeting:
            self.notify(self.greeting, timeout=12)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_problems(self) -> None:
        if not isinstance(self.screen, ProblemsScreen):
            self.push_screen(ProblemsScreen(self.comparison))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed background computation becomes visible; finished work is saved."""
        if event.state == WorkerState.SUCCESS:
            self.comparison.engine.flush()
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(
                f"{event.worker.name}: {event.worker.error}", title="Computation failed", severity="error"
            )

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("view: help", "Keys and what the columns mean", self.action_help)
        yield SystemCommand(
            "view: unmatched and file errors", "What could not be paired or read", self.action_problems
        )
        if hasattr(screen, "action_export"):
            yield SystemCommand(
                "export: current view to CSV", "Write what is on screen to a CSV file", screen.action_export
            )
        if hasattr(screen, "action_first_failure"):
            yield SystemCommand(
                "go: first failure",
                "Jump to the first failing token or operator",
                screen.action_first_failure,
            )
