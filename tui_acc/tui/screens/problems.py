"""``u``: how the dumps were read (notes), what could not be paired, and which files could not be read."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui_acc.session import Comparison


def problems_renderable(cmp: Comparison) -> Group:
    parts: list[Table | Text] = []
    # what decides how to read the verdicts: checksums compared by equality, steps that are tokens,
    # a filtered dump, a guessed logits node, the rank compared, records aligned by kind
    notes = [("golden", n) for n in cmp.golden.notes] + [("test", n) for n in cmp.test.notes]
    notes += [("pairing", n) for n in cmp.pairing.notes]
    parts.append(Text(f"Notes ({len(notes)})", style="bold underline"))
    for source, note in notes:
        parts.append(Text.assemble((f"{source}: ", "bold"), note))
    if not notes:
        parts.append(Text("none", style="green"))
    parts.append(Text(""))
    unmatched = cmp.pairing.unmatched_found
    so_far = "" if cmp.pairing.all_paired() else ", in the tokens compared so far"
    parts.append(Text(f"Unmatched ({len(unmatched)}{so_far})", style="bold underline"))
    if unmatched:
        table = Table(box=None, padding=(0, 2, 0, 0), header_style="dim")
        for column in ("only in", "kind", "token", "name"):
            table.add_column(column, no_wrap=column != "name")
        for u in unmatched:
            table.add_row(u.side, u.kind, "" if u.kind == "token" else str(u.token), u.name)
        parts.append(table)
    else:
        parts.append(Text("every token, module and tensor file has a partner", style="green"))
    errors = [(p.path, p.message) for p in cmp.golden.problems + cmp.test.problems]
    errors += [(row["golden_path"], error) for row in cmp.engine.cached_rows() if (error := row.get("error"))]
    parts.append(Text(""))
    parts.append(Text(f"File errors ({len(errors)}, among what was compared so far)", style="bold underline"))
    for path, message in errors:
        parts.append(Text.assemble((path, "magenta"), "\n  ", message))
    if not errors:
        parts.append(Text("none", style="green"))
    return Group(*parts)


class ProblemsScreen(ModalScreen[None]):
    """Nothing is silently dropped: here is everything that was left out, and why."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="close_problems"),
        Binding("q", "dismiss", "Close", show=False, id="close_problems_q"),
        Binding("u", "dismiss", "Close", show=False, id="close_problems_u"),
    ]

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="problems"):
            yield Static(problems_renderable(self.comparison))
