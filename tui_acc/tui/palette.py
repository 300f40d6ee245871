"""The command palette (ctrl+p): every key of the screen shown, and the app's, as "category: verb".

Built from the bindings themselves, so a key added to a screen is in the palette too; a binding
whose id has no title here still gets one from its description (a unit test keeps the main
screens' titles complete)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode

# binding id -> (title, what it does)
TITLES: dict[str, tuple[str, str]] = {
    # the app
    "quit": ("app: quit", "Leave tui-acc (asks first while a re-dump runs)"),
    "help": ("help: keys, columns and thresholds", "What every key and column means"),
    "problems": ("problems: notes, unmatched and unreadable files", "What could not be paired or read"),
    "redump_log": ("log: show the re-dump log", "The running or last re-dump's output and status"),
    "original_dump": ("re-dump: back to the original dump", "Undo o: compare the dumps tui-acc started with"),
    "ranks": (
        "ranks: the check across the test's ranks",
        "A sharded test's collectives on every rank against what their inputs give (Esc: back)",
    ),
    "ranks_back": ("ranks: back to the comparison", "Leave the check across ranks"),
    # every comparison screen
    "export": ("export: this view to CSV, .xlsx or .parquet", "The rows on screen, in this order, to a file"),
    "next_failure": ("go: next failure", "The next failing row below the cursor"),
    "previous_failure": ("go: previous failure", "The previous failing row above the cursor"),
    "top": ("go: top", "The first row"),
    "bottom": ("go: bottom", "The last row"),
    "sort": ("sort: by a column", "Choose the column to order the rows by (worst first)"),
    "reverse_sort": ("sort: reverse", "The current order, the other way round"),
    "open_redump": ("re-dump: open the new dump", "Compare the finished re-dump in place of its side"),
    "redump": (
        "re-dump: what is under the cursor",
        "Dump this token (and operator) again, with the command shown first",
    ),
    "down": ("move: down", "The cursor one row down"),
    "up": ("move: up", "The cursor one row up"),
    # the token list
    "first_failing_token": (
        "go: first failure",
        "Open the first failing token at its first failing operator (◆)",
    ),
    # a token's operators
    "first_failing_op": ("go: first failing operator", "The operator whose inputs pass but output fails (◆)"),
    "back": ("go: back to the token list", "Esc: clears a filter first, then leaves the token"),
    "leave": ("go: back to the token list, keeping the filter", "The token reopens as it is now"),
    "focus_next": ("focus: tree / table", "Move the keyboard focus between the layer tree and the table"),
    "scope_all": ("scope: all operators", "Leave the layer chosen in the tree: every operator of the token"),
    "toggle_tree": ("tree: show or hide", "Give the table the whole width, or bring the layer tree back"),
    "filter": ("filter: by name or type", "Show only the operators whose name or type holds the text"),
    "replay": (
        "replay: the operator under the cursor",
        "Recompute its output from its own dumped inputs on each side: is the operator itself wrong?",
    ),
    "error_map": (
        "picture: where the error sits",
        "The detail panel draws a tensor's |error| over rows x channels and its relative error against u",
    ),
    "error_map_next": ("picture: next tensor", "The error picture of the operator's next tensor"),
    "error_map_prev": ("picture: previous tensor", "The error picture of the operator's previous tensor"),
    "detail": (
        "detail: every tensor of the operator",
        "The detail panel takes the table's room (again, or Esc: gives it back)",
    ),
    # the replay dialog
    "close_replay": ("replay: close", "Back to the operators"),
    "close_replay_q": ("replay: close", "Back to the operators"),
    "close_replay_p": ("replay: close", "Back to the operators"),
    # the check across ranks
    "first_bad": ("go: first disagreeing rank", "The first (token, operator, rank) whose output disagrees"),
    # the re-dump log
    "log_back": ("log: back", "Leave the re-dump log"),
    "log_stop": ("re-dump: stop", "Stop the running re-dump (its whole process group)"),
    "log_open": ("re-dump: open the new dump", "Compare the finished re-dump in place of its side"),
}


def declared_bindings(node: type[DOMNode]) -> list[Binding]:
    """The bindings tui-acc declares on ``node``'s class and its bases (not Textual's own)."""
    found: list[Binding] = []
    for cls in reversed(node.__mro__):
        if not cls.__module__.startswith("tui_acc."):
            continue
        found += [b for b in cls.__dict__.get("BINDINGS", ()) if isinstance(b, Binding)]
    return found


def title_of(binding: Binding) -> tuple[str, str]:
    """(title, help) of ``binding`` in the command palette; ``other: …`` for a binding TITLES does not
    name."""
    if binding.id in TITLES:
        return TITLES[binding.id]
    return f"other: {binding.description or binding.action}", f"key {binding.key}"


def binding_commands(app: App[Any], screen: DOMNode) -> Iterator[SystemCommand]:
    """A command per binding of the screen, then per binding of the app (one per title)."""
    seen: set[str] = set()
    for node in (screen, app):
        for binding in declared_bindings(type(node)):
            title, help_text = title_of(binding)
            if title in seen:
                continue
            seen.add(title)
            yield SystemCommand(title, help_text, functools.partial(app.run_action, binding.action, node))
