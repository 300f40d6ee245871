"""What the token list knows: the token rows the worker sent, and the counts shown from them.

The token screen asks nothing of the engine on the event loop: the engine's lookups may read the
disk cache and stat the files of every token not computed yet, and the summary and the strip
would ask for every token after each computed one (tokens squared). Each row arriving updates the
counts it changes; reading them costs nothing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from tui_acc.rows import Row

# The strip's bars, against the threshold in force, a decade a step: ▁▂▃▄ within it (▄: the last
# tenth below it), ▅▆▇█ over it (▅: up to 10x, █: over 1000x, or NaN/Inf). A log scale, as the first
# divergence is orders of magnitude above the noise but far below the broken tokens after it; and a
# fixed one, so that a run whose every token passes draws low bars, however they vary among themselves.
STRIP_BARS = "▁▂▃▄▅▆▇█"
OVER = 4  # the first level over the threshold


def strip_level(value: object, bound: float | None) -> int | None:
    """A token's bar: ``value`` against ``bound`` (None: not compared, or nothing to judge it by)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not bound or bound <= 0:
        return None
    if not math.isfinite(value):
        return len(STRIP_BARS) - 1  # NaN or Inf logits: broken outright, as tall as a bar gets
    if value <= 0:
        return 0
    return min(max(math.ceil(math.log10(value / bound)) + OVER - 1, 0), len(STRIP_BARS) - 1)


# (what a row's bar plots, the bound it is judged against)
BoundOf = Callable[[Row], tuple[str, float | None]]


class TokenTally:
    """The judged token rows of one comparison, in memory, with their failures and strip bars.
    ``bound_of``: what a row's bar plots and the threshold in force for it."""

    def __init__(self, tokens: Sequence[int], bound_of: BoundOf) -> None:
        self.tokens = list(tokens)
        self._position = {token: n for n, token in enumerate(self.tokens)}
        self._rows: dict[int, Row] = {}
        self._failing: list[int] = []  # positions in token order, kept sorted
        self._bound_of = bound_of
        self.levels: list[int | None] = [None] * len(self.tokens)  # the strip's bars, in token order
        self.failed = [False] * len(self.tokens)  # whose verdict fails, in token order
        # what the strip plots and against which threshold (the last row's: one pair, one dtype)
        self.strip_metric: str = "KL"
        self.strip_bound: float | None = None

    def add(self, row: Row) -> bool:
        """Take a token's row; whether it counts (a row without a verdict had no logits to judge,
        and stays shown as not compared, as before it came)."""
        token = row.get("token")
        if not isinstance(token, int) or token not in self._position or row.get("verdict") is None:
            return False
        position = self._position[token]
        before = self._rows.get(token)
        if before is not None and before.get("passed") is False:  # the same token again: replaced
            del self._failing[bisect.bisect_left(self._failing, position)]
        self._rows[token] = row
        self.failed[position] = row.get("passed") is False
        if row.get("passed") is False:
            bisect.insort(self._failing, position)
        if not row.get("error"):  # an error row names no dtype: it would set another threshold
            self.strip_metric, self.strip_bound = self._bound_of(row)
        plotted = row.get("kl") if self.strip_metric == "KL" else row.get("norm_rel_diff")
        self.levels[position] = strip_level(plotted, self.strip_bound)
        return True

    def get(self, token: int) -> Row | None:
        """The row taken for ``token``; None while it is not compared."""
        return self._rows.get(token)

    @property
    def compared(self) -> int:
        """How many tokens have a row with a verdict."""
        return len(self._rows)

    @property
    def failing(self) -> int:
        """How many compared tokens fail."""
        return len(self._failing)

    def first_failing(self) -> int | None:
        """The first failing token in token order."""
        return self.tokens[self._failing[0]] if self._failing else None
