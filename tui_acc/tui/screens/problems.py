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

from tui_acc.pairing import Unmatched
from tui_acc.redump.selection import Selection
from tui_acc.session import Comparison


def problems_renderable(cmp: Comparison, narrow: Selection | None = None) -> Group:
    """``narrow``: the re-dump open in place of a side; what it was not asked to dump is an expected
    gap, listed apart and quietly, not among the problems."""
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
    unmatched = [u for u in cmp.pairing.unmatched_found if narrow is None or not expected_gap(u, narrow)]
    gaps = [u for u in cmp.pairing.unmatched_found if narrow is not None and expected_gap(u, narrow)]
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
    computed = cmp.built_engine.cached_rows() if cmp.built_engine is not None else []
    errors += [(row["golden_path"], error) for row in computed if (error := row.get("error"))]
    parts.append(Text(""))
    parts.append(Text(f"File errors ({len(errors)}, among what was compared so far)", style="bold underline"))
    for path, message in errors:
        parts.append(Text.assemble((path, "magenta"), "\n  ", message))
    if not errors:
        parts.append(Text("none", style="green"))
    if narrow is not None and gaps:
        parts.append(Text(""))
        parts += _gaps(gaps, narrow)
    return Group(*parts)


def expected_gap(item: Unmatched, narrow: Selection) -> bool:
    """Whether the re-dump ``narrow`` was never asked for ``item``: another token, or a module outside
    the subtrees it dumped (their parents included), found only on the side it did not replace."""
    if item.side == narrow.side:
        return False  # the re-dump wrote it: something the other side lacks
    if item.token != narrow.token:
        return True
    if item.kind == "token":
        return False  # the very token it was asked for is missing: a real problem
    return bool(narrow.nodes) and not any(_under(item.name, node) for node in narrow.nodes)


def _under(name: str, node: str) -> bool:
    return name == node or name.startswith((f"{node}.", f"{node}/"))


def _gaps(gaps: list[Unmatched], narrow: Selection) -> list[Text]:
    what = f"token {narrow.token}" + (f", {', '.join(narrow.nodes)} and below" if narrow.nodes else "")
    tokens = sorted({u.token for u in gaps if u.kind == "token" and u.token is not None})
    modules = [u for u in gaps if u.kind != "token"]
    lines = [
        Text(f"Expected gaps of the re-dump ({len(gaps)})", style="dim bold"),
        Text(
            f"the re-dump dumped only {what}; the rest is only in the {_other(narrow.side)}:",
            style="dim",
        ),
    ]
    if tokens:
        lines.append(Text(f"  {len(tokens)} other tokens ({_span(tokens)})", style="dim"))
    if modules:
        names = ", ".join(u.name for u in modules[:3]) + (", …" if len(modules) > 3 else "")
        lines.append(Text(f"  {len(modules)} modules and tensors outside it ({names})", style="dim"))
    return lines


def _other(side: str) -> str:
    return "test" if side == "golden" else "golden"


def _span(tokens: list[int]) -> str:
    """Sorted tokens as runs: ``0–2, 4–7``."""
    runs: list[list[int]] = []
    for token in tokens:
        if runs and token == runs[-1][-1] + 1:
            runs[-1].append(token)
        else:
            runs.append([token])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}" for run in runs)


class ProblemsScreen(ModalScreen[None]):
    """Nothing is silently dropped: here is everything that was left out, and why."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="close_problems"),
        Binding("q", "dismiss", "Close", show=False, id="close_problems_q"),
        Binding("u", "dismiss", "Close", show=False, id="close_problems_u"),
    ]

    def __init__(self, comparison: Comparison, narrow: Selection | None = None) -> None:
        super().__init__()
        self.comparison = comparison
        self.narrow = narrow  # the re-dump open in place of a side, if any

    def compose(self) -> ComposeResult:
        """Every note, unreadable file and unmatched operator, scrollable (of the re-dumped selection when
        ``narrow``)."""
        with VerticalScroll(id="problems"):
            yield Static(problems_renderable(self.comparison, self.narrow))
