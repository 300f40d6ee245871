"""What the token list knows: the token rows the worker sent, and the counts shown from them.

The token screen asks nothing of the engine on the event loop: the engine's lookups may read the
disk cache and stat the files of every token not computed yet, and the summary and the KL strip
would ask for every token after each computed one (tokens squared). Each row arriving updates the
counts it changes; reading them costs nothing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from tui_acc.metrics.schema import Row

# Bars on a log scale: the first divergence is orders of magnitude above the noise but far below
# the broken tokens after it; on a linear scale it would be as flat as the noise.
_STRIP_FLOOR = 1e-8


def strip_height(value: object) -> float:
    """A token's bar: decades of KL above 1e-8 (0 for a token not compared, or no divergence)."""
    if not isinstance(value, (int, float)):
        return 0.0
    if not math.isfinite(value):
        return 12.0  # NaN or Inf logits: broken outright, as tall as a bar gets
    return math.log10(value / _STRIP_FLOOR) if value > _STRIP_FLOOR else 0.0


class TokenTally:
    """The judged token rows of one comparison, in memory, with their failures and strip bars."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)
        self._position = {token: n for n, token in enumerate(self.tokens)}
        self._rows: dict[int, Row] = {}
        self._failing: list[int] = []  # positions in token order, kept sorted
        self.heights = [0.0] * len(self.tokens)  # the KL strip's bars, in token order

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
        if row.get("passed") is False:
            bisect.insort(self._failing, position)
        value = row.get("kl") if row.get("kl") is not None else row.get("norm_rel_diff")
        self.heights[position] = strip_height(value)
        return True

    def get(self, token: int) -> Row | None:
        return self._rows.get(token)

    @property
    def compared(self) -> int:
        return len(self._rows)

    @property
    def failing(self) -> int:
        return len(self._failing)

    def first_failing(self) -> int | None:
        """The first failing token in token order."""
        return self.tokens[self._failing[0]] if self._failing else None
