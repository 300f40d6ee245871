"""A row of bars, one per token, on a fixed scale against the threshold (not from the lowest to the
highest value shown, as textual's Sparkline draws: there an all-pass run looks like a divergence)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

from tui_acc.tui.token_tally import OVER, STRIP_BARS

_WITHIN = Style(color="green")
_FAILING = Style(color="red", bold=True)


class ThresholdStrip(Widget):
    """``levels`` (index into ``STRIP_BARS``, None: not compared); ``failing`` marks the tokens whose
    verdict fails (in red, whatever their bar: a token can fail on cosine with its KL within)."""

    DEFAULT_CSS = "ThresholdStrip { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.levels: list[int | None] = []
        self.failing: list[bool] = []

    def show(self, levels: Sequence[int | None], failing: Sequence[bool]) -> None:
        """Draw these ``levels`` and ``failing`` marks, one of each a token in token order."""
        self.levels, self.failing = list(levels), list(failing)
        self.refresh()

    def bars(self, width: int) -> Text:
        """The bars in ``width`` cells: one a token, or each cell the worst of its tokens."""
        count = len(self.levels)
        text = Text(no_wrap=True, overflow="crop")
        if not count or width <= 0:
            return text
        cells = min(width, count)
        for cell in range(cells):
            start, end = cell * count // cells, max((cell + 1) * count // cells, cell * count // cells + 1)
            known = [level for level in self.levels[start:end] if level is not None]
            failing = any(self.failing[start:end])
            if not known:
                text.append(" ")
                continue
            level = max(known)
            text.append(STRIP_BARS[level], _FAILING if failing or level >= OVER else _WITHIN)
        return text

    def render(self) -> Text:
        """The bars fitted to the widget's width."""
        return self.bars(self.size.width)
