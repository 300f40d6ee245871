"""``?`` on the check across ranks: its keys and its rule."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("↑ ↓  j k", "move"),
    ("f", "the first (token, operator, rank) whose output disagrees with its golden"),
    ("n  N", "next / previous row that disagrees or cannot be judged"),
    ("Enter", "in the token list: that token's rows (a failing one first)"),
    ("Tab", "switch between the token list and the rows"),
    ("g  G", "top / bottom"),
    ("← →", "the next / previous metrics that do not fit, whole; token, rank, verdict, operator stay"),
    ("s  S", "sort by any column, worst first · reverse"),
    ("e", "export the rows on screen: CSV, or .xlsx / .parquet by the name typed"),
    ("ctrl+p", "command palette: every key"),
    ("?  q", "this help · quit"),
)


def rule_lines(margin: float) -> list[str]:
    """The check's rule in sentences: the golden of each collective, the verdict and its bound with
    ``margin`` (tui-acc.toml ``[collectives] margin``), the other metrics, ERR."""
    return [
        "Golden: all-reduce, the sum of every rank's input in float64 (avg, max, min, prod where the "
        "dump records that reduction); reduce-scatter, rank r's chunk of it (dimension 0); all-gather, "
        "every rank's input concatenated. Every rank of the operator's group: msprobe's recorded "
        "process group, ATB's rankSize, else the whole run.",
        "Verdict: a sum of N values rounded in the output's dtype (unit roundoff u: bf16 2^-8, fp16 "
        "2^-11, fp32 2^-24), in any order, is within gamma_(N-1) x sum_r |x_r| of the exact sum, "
        "gamma_k = k u / (1 - k u). An element beyond "
        f"{margin:g} x that bound (tui-acc.toml [collectives] margin) fails its rank; Beyond counts them, "
        "xBound is the worst |out - golden| / bound.",
        "Cosine, MaxRelErr, MeanRelErr, RelEucl: msit's definitions, shown alongside.",
        "ERR: the rank lacks the operator or the token, a file is damaged, or shapes do not fit.",
    ]


class RanksHelp(ModalScreen[None]):
    """``?``: the keys and the rule."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="close_help"),
        Binding("q", "dismiss", "Close", show=False, id="close_help_q"),
        Binding("question_mark", "dismiss", "Close", show=False, id="close_help_question"),
    ]

    def __init__(self, margin: float) -> None:
        super().__init__()
        self.margin = margin

    def compose(self) -> ComposeResult:
        """The keys and the check's rule (with this run's margin), scrollable."""
        keys = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, does in KEYS:
            keys.add_row(key, does)
        body = Group(
            Text("Keys", style="bold underline"),
            keys,
            Text(""),
            Text("The check across ranks", style="bold underline"),
            *(Text(f"• {line}") for line in rule_lines(self.margin)),
        )
        with VerticalScroll(id="help"):
            yield Static(body)
