"""``p`` on an operator: its replay on each side (tui_acc.replay), in a dialog over the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui_acc.numbers import cosine, number

if TYPE_CHECKING:
    from tui_acc.verdicts.replay_check import Replay, SideReplay

# the finding's look: words first, colour only adds (NO_COLOR terminals read the same words)
_FINDING_STYLE = {
    "operator": "bold red",
    "inputs": "bold green",
    "both": "bold yellow",
    "golden": "bold yellow",
}
_VERDICT_STYLE = {"consistent": "green", "disagrees": "bold red", "impossible": "yellow"}


def replay_renderable(replay: Replay) -> RenderableType:
    """The finding, then a column per side: verdict, why, the distance to the replay, notes."""
    head = Text.assemble(
        ("Replay ", "bold"),
        (replay.golden.node, "bold cyan"),
        f" at token {replay.token}\n",
        (replay.headline, _FINDING_STYLE.get(replay.finding, "yellow")),
    )
    table = Table(box=None, padding=(0, 2, 0, 0), show_header=True, header_style="bold")
    table.add_column("", style="dim", no_wrap=True)
    table.add_column("golden")
    table.add_column("test")
    sides = (replay.golden, replay.test)
    rows: list[tuple[str, list[Text | str]]] = [
        ("verdict", [Text(s.verdict, style=_VERDICT_STYLE[s.verdict]) for s in sides]),
    ]
    if not replay.shared_reason:  # a reason both sides share is in the reading, said once
        rows.append(("why", [Text(s.reason) for s in sides]))  # Text: a reason's "[replay]" is not markup
    if any(s.node != replay.golden.node for s in sides):
        rows.insert(0, ("operator", [Text(s.node) for s in sides]))
    if any(s.metrics for s in sides):
        rows += [
            ("cosine", [cosine(s.metrics.get("cosine")) if s.metrics else "-" for s in sides]),
            ("max abs", [number(s.metrics.get("max_abs_err")) if s.metrics else "-" for s in sides]),
            ("rel eucl", [number(s.metrics.get("rel_euclidean")) if s.metrics else "-" for s in sides]),
            ("tolerance", [_tolerance(s) for s in sides]),
        ]
    rows.append(("reference", [Text(s.reference or "-") for s in sides]))
    if any(s.notes for s in sides):
        rows.append(("notes", [Text("\n".join(s.notes) or "-") for s in sides]))
    for label, cells in rows:
        table.add_row(label, *cells)
    remedies = Text()
    for whose, what in replay.remedies():
        remedies.append(f"\nTo replay it{'' if whose == 'both' else f' ({whose})'}: ", style="bold")
        remedies.append(what)
    hint = Text(
        "\nThe dumped output against a float64 replay from the same side's dumped inputs; ", style="dim"
    )
    hint.append("Esc closes. More in docs/replay.md.", style="dim")
    inner = [_inner_table(replay.inner)] if replay.inner else []
    return Group(head, Text(""), table, *inner, *([remedies] if remedies else []), hint)


def _inner_table(inner: tuple[SideReplay, ...]) -> RenderableType:
    """The records only the test has inside the node (a port's own operators), each replayed."""
    table = Table(box=None, padding=(0, 2, 0, 0), show_header=True, header_style="bold")
    table.title = "inside it, records only the test has"
    table.title_justify = "left"
    table.add_column("record")
    table.add_column("verdict")
    table.add_column("rel eucl / tolerance")
    for side in inner:
        measured = side.local_error
        said = side.reason if measured is None else f"{number(measured)} / {_tolerance(side)}"
        table.add_row(Text(side.node), Text(side.verdict, style=_VERDICT_STYLE[side.verdict]), Text(said))
    return Group(Text(""), table)


def _tolerance(side: SideReplay) -> str:
    if side.tolerance is None:
        return "-"
    return f"{number(side.tolerance)} at {side.dtype}"


class ReplayScreen(ModalScreen[None]):
    """Is the operator itself wrong, or did the difference come in with its inputs?"""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="close_replay"),
        Binding("q", "dismiss", "Close", show=False, id="close_replay_q"),
        Binding("p", "dismiss", "Close", show=False, id="close_replay_p"),
    ]

    def __init__(self, replay: Replay) -> None:
        super().__init__()
        self.replay = replay

    def compose(self) -> ComposeResult:
        """The replay of each side, scrollable: what was recomputed from the dumped inputs against the
        dumped output."""
        with VerticalScroll(id="replay"):
            yield Static(replay_renderable(self.replay), id="replay-body")
