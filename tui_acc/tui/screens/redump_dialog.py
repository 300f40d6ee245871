"""``r``: the exact re-dump command for the token (and operator) under the cursor; Enter runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.css.scalar import Scalar
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui_acc.redump import RedumpError, RedumpPlan


@dataclass(frozen=True)
class RedumpChoice:
    plan: RedumpPlan
    remember: str | None  # the inference command to save in tui-acc.toml, if the user typed a new one


# (side, inference command typed or None) -> the plan, or the reason there is none
PlanMaker = Callable[[str, str | None], RedumpPlan]


class RedumpDialog(ModalScreen[RedumpChoice | None]):
    """Shows the command, its environment and config files, and the new output folder."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="cancel_redump"),
        Binding("ctrl+o", "other_side", "Other side", id="redump_other_side"),
        # the command scrolls while the inference command keeps the keys it types (no mouse over SSH)
        Binding("down", "scroll_command(1)", "Scroll the command down", show=False, id="redump_scroll_down"),
        Binding("up", "scroll_command(-1)", "Scroll the command up", show=False, id="redump_scroll_up"),
        Binding("pagedown", "scroll_command(8)", "Page the command down", show=False, id="redump_page_down"),
        Binding("pageup", "scroll_command(-8)", "Page the command up", show=False, id="redump_page_up"),
    ]
    HINT = "Enter: run   Esc: cancel   ctrl+o: the other side"

    def __init__(
        self, make_plan: PlanMaker, side: str, saved_exec: Callable[[str], str | None], what: str
    ) -> None:
        super().__init__()
        self.make_plan = make_plan
        self.side = side
        self.saved_exec = saved_exec
        self.what = what
        self.plan: RedumpPlan | None = None

    def compose(self) -> ComposeResult:
        """The title, the inference command box, the exact command (scrolled when long), the new folder and
        log, and the keys."""
        with Vertical(id="redump-dialog"):
            yield Static(id="redump-title")
            yield Static(
                "your inference command (a new one is remembered in ./tui-acc.toml)", id="redump-exec-label"
            )
            yield Input(id="redump-exec", placeholder="e.g. bash run_npu.sh --prompt bad_case.txt")
            with VerticalScroll(id="redump-command-box"):
                yield Static(id="redump-command")
            # outside the scrolled command: where it writes and the keys stay on screen at 80x24
            yield Static(id="redump-where")
            yield Static(self.HINT, id="redump-hint")

    def on_mount(self) -> None:
        """Load the side's saved inference command and watch the command box's scrolling for the hint."""
        box = self.query_one("#redump-command-box", VerticalScroll)
        # what is out of sight changes as the box is laid out, filled and scrolled
        for attribute in ("show_vertical_scrollbar", "virtual_size", "scroll_y"):
            self.watch(box, attribute, self._hidden_changed, init=False)
        self._load_side()

    def _load_side(self) -> None:
        box = self.query_one("#redump-exec", Input)
        box.value = self.saved_exec(self.side) or ""
        box.focus()
        self._rebuild()

    def _rebuild(self) -> None:
        typed = self.query_one("#redump-exec", Input).value.strip() or None
        self.query_one("#redump-title", Static).update(f"Re-dump the {self.side} side: {self.what}")
        shown = self.query_one("#redump-command", Static)
        where = self.query_one("#redump-where", Static)
        try:
            self.plan = self.make_plan(self.side, typed)
        except RedumpError as exc:
            self.plan = None
            shown.update(Text(f"cannot run: {exc}"))
            shown.set_class(True, "problem")
            where.update("")
            return
        shown.set_class(False, "problem")
        shown.update(Text(self.plan.describe()))
        where.update(Text(f"# new folder: {self.plan.folder}\n# log: {self.plan.log}"))
        self.call_after_refresh(self._fit)

    def on_resize(self) -> None:
        """Refit the command box to the new height."""
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """The command scrolls in what is left once the rest is laid out: the folder, the log and
        the keys below it are never pushed off a small terminal (long paths wrap over lines)."""
        if not self.is_attached or not self.query("#redump-command-box"):
            return  # Enter already confirmed it: the dialog went before its first refresh came
        dialog = self.query_one("#redump-dialog", Vertical)
        box = self.query_one("#redump-command-box", VerticalScroll)
        others = sum(child.outer_size.height for child in dialog.children if child is not box)
        frame = dialog.outer_size.height - dialog.content_size.height  # border and padding
        left = int(self.size.height * 0.96) - frame - others
        if box.styles.max_height != Scalar.from_number(max(left, 3)):
            box.styles.max_height = max(left, 3)

    def _hidden_changed(self) -> None:
        self.call_after_refresh(self._show_hidden)  # counted once the box is laid out at its size

    def _show_hidden(self) -> None:
        """Say how many lines of the command are out of sight, and which key brings them: a
        scrollbar is a colour, and without colour (NO_COLOR) it is not seen."""
        if not self.is_attached or not self.query("#redump-command-box"):
            return
        box = self.query_one("#redump-command-box", VerticalScroll)
        below = max(round(box.max_scroll_y - box.scroll_y), 0)
        above = round(box.scroll_y)
        # short: at 80 columns the hint stays one line (a second would hide one more of the command)
        more = f"↑↓ {above} above, {below} below" if above and below else ""
        more = more or (f"↓ {below} more lines" if below else f"↑ {above} lines above" if above else "")
        self.query_one("#redump-hint", Static).update(f"{self.HINT}   {more}" if more else self.HINT)

    def action_scroll_command(self, lines: int) -> None:
        """↑ ↓ PgUp PgDn: scroll the command ``lines`` lines (negative: up); the typed command keeps the
        cursor."""
        box = self.query_one("#redump-command-box", VerticalScroll)
        box.scroll_to(y=box.scroll_y + lines, animate=False, immediate=True)
        self._show_hidden()

    def on_input_changed(self, event: Input.Changed) -> None:
        """A new inference command: the plan and the command shown are made again."""
        self._rebuild()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: answer the plan (and the typed command to remember, when new); nothing while there is no
        plan."""
        self._rebuild()
        if self.plan is None:
            return  # the reason is on screen
        typed = event.value.strip() or None
        remember = typed if typed and typed != self.saved_exec(self.side) else None
        self.dismiss(RedumpChoice(self.plan, remember))

    def action_other_side(self) -> None:
        """``ctrl+o``: re-dump the other side instead (its own saved command)."""
        self.side = "golden" if self.side == "test" else "test"
        self._load_side()

    def action_cancel(self) -> None:
        """Esc: close; nothing runs (the dialog answers None)."""
        self.dismiss(None)


class QuitDialog(ModalScreen[str | None]):
    """Quitting while a re-dump runs: stop it, leave it running, or stay."""

    BINDINGS = [
        Binding("s", "choose('stop')", "Stop it and quit", id="quit_stop"),
        Binding("d", "choose('detach')", "Leave it running and quit", id="quit_detach"),
        Binding("escape", "choose(None)", "Stay", id="quit_stay"),
    ]

    def __init__(self, log: str) -> None:
        super().__init__()
        self.log_path = log

    def compose(self) -> ComposeResult:
        """What each key does, with the log the re-dump goes on writing to if left running."""
        with Vertical(id="quit-dialog"):
            yield Static("A re-dump is still running.", id="quit-title")
            yield Static(
                Text(
                    "s  stop it (its whole process group) and quit\n"
                    f"d  leave it running and quit; it keeps writing to\n   {self.log_path}\n"
                    "Esc  stay in tui-acc"
                )
            )

    def action_choose(self, choice: str | None) -> None:
        """``s`` / ``d`` / Esc: answer ``stop``, ``detach`` or None (stay)."""
        self.dismiss(choice)
