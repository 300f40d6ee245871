"""Keys, what the verdicts mean, and the thresholds in force for the pair on screen."""

from __future__ import annotations

import weakref
from typing import cast

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui_acc.session import Comparison
from tui_acc.tui.bounds import help_lines
from tui_acc.tui.drawn_once import DrawnOnce
from tui_acc.tui.screens.host import Host

KEYS = (
    ("↑ ↓  j k", "move"),
    ("Enter", "open a token's operators; in the tree, show only that layer"),
    (
        "f",
        "the first failing op ◆ (from the tokens: of the first failing token, or where every token "
        "passes, of the first token with a local op; any key cancels the wait)",
    ),
    ("n  N", "next / previous failing token or operator"),
    ("g  G", "top / bottom"),
    ("← →", "the next / previous columns that do not fit, whole; #, Operator, In and Out stay"),
    ("/", "operators: filter by name or type as you type; every key is the filter's until Enter or Esc"),
    ("s  S", "sort by any column, worst first, from the top (the same column again reverses) · reverse"),
    ("a", "operators: show every operator again"),
    ("t", "operators: hide or show the layer tree"),
    ("Tab", "operators: switch between tree, table and the detail panel (where it scrolls: ↑ ↓ PgUp PgDn)"),
    ("d", "operators: the detail panel takes the room: every tensor of the operator (again, or Esc: back)"),
    ("e", "export the current view: CSV, or .xlsx / .parquet by the name typed (Enter accepts it)"),
    ("p", "operators: replay the one under the cursor from its own dumped inputs (is it itself wrong?)"),
    (
        "m  [ ]",
        "operators: picture where a tensor's error sits (|Δ| over rows x channels; |Δ|/|g| against the "
        "dtype's rounding u) in place of the numbers; [ ] the operator's other tensors",
    ),
    ("r", "re-dump the token (and operator) under the cursor: shows the command, Enter runs it"),
    ("L", "the re-dump's log: x stops it while it runs"),
    (
        "o",
        "once a re-dump has finished (its line says so): open it in place of its side, at the same "
        "token and operator",
    ),
    ("O", "back to the original dumps after o opened a re-dump"),
    ("R", "a sharded test: its collectives on every rank against their inputs (tui-acc ranks; Esc back)"),
    ("Esc", "give the table its room back (d), clear the filter, else back to the tokens (reopens as left)"),
    ("Backspace", "back to the tokens, keeping the filter"),
    ("u", "notes on how the dumps were read; what could not be paired or read"),
    ("ctrl+p", "command palette: every key, as 'category: verb'"),
    ("?  q", "this help · quit"),
)

VERDICTS = (
    "Token: its logits (the output of the model's last module) pass within the logits thresholds "
    "below; KL is taken per vocabulary row and averaged.",
    "Top-1 g/t: the token each side's logits rank first, golden/test (red where they differ: "
    "the test would generate another token).",
    "Strip over the tokens: each token's KL (statistics: NormRel) against its threshold, a decade a "
    "step: ▁▂▃▄ within it, ▅▆▇█ over it (█: over 1000x, or NaN).",
    "Operator: each tensor passes within the operator thresholds below (a cosine bound also bounds "
    "RelEucl at √(2(1−cos)), so a scale error fails too; a scalar or a constant tensor is judged by "
    "its values). Out is its outputs' verdict, In its inputs' as the rule that decided saw them; the "
    "table shows its worst output.",
    "Where the error starts: the first rule that can judge the operator decides, and the detail "
    "panel names it with its numbers. weights: a weight further from the golden's than its cast "
    "explains; an output within its own rounding of the golden is never local; replay: its output "
    "against itself recomputed from the test's own dumped inputs and weights (or, for a module, the "
    "output it passes through), beyond 3× the rounding its dtype explains; baseline: beyond the "
    "noise floor while its inputs are within it; error model: its error beyond 2× what its inputs "
    "carry (a softmax: × its largest score) plus its own rounding; threshold: its output fails while "
    "its inputs pass (where nothing else can judge).",
    "◆ First failing op: the earliest in execution order, and the innermost, where the error starts. "
    "Out ✗L: the error starts here (local; ✗ even when its output is within the thresholds); ✗c: "
    "an operator inside it starts the error; ✗i: inherited, its inputs (or those of a failing "
    "operator inside it) were already off. In ✗ beside ✗i: the inputs explain the error; ✓ beside "
    "✗L: they do not. In ✓f: no inputs were dumped, so the outputs of the operator that fed it are "
    "used. Where a token has no local op, f goes to the first earlier token's: its error reaches "
    "later tokens through the KV cache.",
    "⚠ in place: a dumped input is identical to an output (saved after an in-place op ran), so "
    "the inputs are judged by what fed the operator instead.",
    "Token 'tie': logits within thresholds but the top-1 flipped between two near-equal candidates "
    "(mutual top-5, log-prob gap <= 0.1): not a real divergence.",
    "≤1e-3: the share of elements within 0.1% of the golden (msprobe's one-thousandth ratio).",
    "Thresholds: tui-acc.toml or options, see tui-acc open --help.",
)


def help_renderable(
    comparison: Comparison | None = None, logits_dtypes: tuple[str, str] | None = None
) -> Group:
    """The help's text: the keys, the verdict rules and, for a ``comparison``, the thresholds in force
    for its pair.

    Args:
        comparison: the pair on screen; None leaves the thresholds in force out.
        logits_dtypes: (golden, test) dtypes of the logits once a token is compared; None: not known yet.

    Returns:
        A rich ``Group`` of the sections, one line a rule.
    """
    keys = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
    keys.add_column(style="bold cyan", no_wrap=True)
    keys.add_column()
    for key, does in KEYS:
        keys.add_row(key, does)
    rules = [Text(f"• {rule}") for rule in VERDICTS]
    in_force: list[Text] = []
    if comparison is not None:
        in_force = [
            Text(""),
            Text("Thresholds in force for this pair", style="bold underline"),
            *(Text(f"• {line}") for line in help_lines(comparison, logits_dtypes)),
        ]
    return Group(
        Text("Keys", style="bold underline"),
        keys,
        Text(""),
        Text("Verdicts", style="bold underline"),
        *rules,
        *in_force,
    )


class HelpScreen(ModalScreen[None]):
    """``?``: the keys, the verdict rules and the thresholds in force.

    The app installs one and shows it again at each ``?`` (``AccApp.action_help``): composing it,
    styling it and drawing its text once, rather than at every ``?``. Its text is made again only
    when what it says changes (the comparison, the logits' dtypes once known).
    """

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="close_help"),
        Binding("q", "dismiss", "Close", show=False, id="close_help_q"),
        Binding("question_mark", "dismiss", "Close", show=False, id="close_help_question"),
        Binding("j", "scroll('down')", "Down", show=False, id="help_down"),
        Binding("k", "scroll('up')", "Up", show=False, id="help_up"),
    ]

    # what the text shown was made for: the comparison (a weak reference: a re-dump's replaced
    # comparison must not stay in memory for the help) and the logits' dtypes
    _made_for: tuple[weakref.ref[Comparison], tuple[str, str] | None] | None = None

    def compose(self) -> ComposeResult:
        """The help text (keys, verdict rules, this pair's thresholds), scrollable."""
        with VerticalScroll(id="help"):
            yield Static(self._text())

    def on_screen_resume(self) -> None:
        """Shown again: from the top, its text made again if what it says has changed."""
        scroller = self.query_one("#help", VerticalScroll)
        scroller.scroll_home(animate=False)
        made_for = self._made_for
        comparison = cast(Host, self.app).comparison
        if made_for is None or made_for[0]() is not comparison or made_for[1] != _logits_dtypes(comparison):
            scroller.query_one(Static).update(self._text())

    def _text(self) -> DrawnOnce:
        """The help for the comparison on screen, drawn once per width (``DrawnOnce``)."""
        comparison = cast(Host, self.app).comparison
        dtypes = _logits_dtypes(comparison)
        self._made_for = (weakref.ref(comparison), dtypes)
        return DrawnOnce(help_renderable(comparison, dtypes))

    def action_scroll(self, direction: str) -> None:
        """``j`` / ``k``: scroll the help one line down / up."""
        scroller = self.query_one("#help", VerticalScroll)
        scroller.scroll_down() if direction == "down" else scroller.scroll_up()


def _logits_dtypes(comparison: Comparison) -> tuple[str, str] | None:
    """The logits' dtypes, once the first token is compared (a row in memory or the disk cache)."""
    tokens = comparison.pairing.tokens
    engine = comparison.built_engine  # none yet: nothing compared, nothing to look up
    row = engine.cached_token_row(tokens[0]) if tokens and engine is not None else None
    if row is None or not row.get("golden_dtype") or not row.get("test_dtype"):
        return None
    # where a Cast carried the logits on, the dtype they were computed in is what they are judged at
    return str(row["golden_dtype"]), str(row.get("computed_in") or row["test_dtype"])
