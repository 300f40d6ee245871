"""Column widths for the wide tables, and sideways scrolling by whole columns.

The key columns (which row: its position, its name, its verdict) are pinned on the left, as htop
and k9s pin theirs; the rest scrolls. Where every column fits, text columns are as wide as their
longest cell; where they fit only cut, the room is shared out (the name first); where not even that
fits, the table scrolls, each text column as wide as its longest cell up to what the scrolled part
can show, and the name column takes what the right edge would cut: no column is shown in part at
the right edge of the first view (no stray digit of a metric that does not fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """A column: ``least`` is the narrowest it is drawn at, ``natural`` what its longest cell (or
    header) needs. For a number column the two are the same."""

    key: str
    least: int
    natural: int

    @property
    def text(self) -> bool:
        """Whether it is a text column (its width can be cut down to ``least``)."""
        return self.natural != self.least


def fit(specs: Sequence[Spec], room: int, pad: int, fixed: int, keep: int, elastic: str) -> dict[str, int]:
    """Each column's width (without its padding) in a table ``room`` cells wide.

    Args:
        specs: the columns, in screen order.
        room: the table's width for cells.
        pad: the padding drawn around each cell (both sides together).
        fixed: how many columns, from the left, are pinned (``elastic`` is one of them).
        keep: how many columns, from the left, should be in view without scrolling.
        elastic: the name column: it gets the room first, and what the right edge would cut.
    """
    natural = {s.key: max(s.natural, s.least) for s in specs}
    if _total(natural, pad) <= room:
        return natural
    widths = _shared(specs, room, pad, elastic)
    if widths is not None:
        return widths
    # Too many columns for the room: the table scrolls.
    widths = dict(natural)
    least = {s.key: s.least for s in specs}
    kept = sum(widths[s.key] + pad for s in specs[:keep] if s.key != elastic)
    widths[elastic] = max(least[elastic], min(natural[elastic], room - kept - pad))
    _cap_to_window(specs, widths, least, room, pad, fixed)
    _end_on_a_whole_column(specs, widths, room, pad, fixed, elastic)
    _cap_to_window(specs, widths, least, room, pad, fixed)
    return widths


def _end_on_a_whole_column(
    specs: Sequence[Spec], widths: dict[str, int], room: int, pad: int, fixed: int, elastic: str
) -> None:
    """The first view ends on a whole column: a text column the right edge would cut is narrowed to
    what is left (down to its narrowest), else the name takes those cells (the figures they would
    show in part are a key press away, whole; a stray digit tells nothing)."""
    x = sum(widths[s.key] + pad for s in specs[:fixed])
    for spec in specs[fixed:]:
        width = widths[spec.key] + pad
        if x + width - pad // 2 > room:  # cut (a column whose right padding alone is cut is whole)
            left = max(room - x, 0)
            if spec.text and left - pad >= spec.least:
                widths[spec.key] = left - pad
            else:
                widths[elastic] += left
            return
        x += width


def _total(widths: dict[str, int], pad: int) -> int:
    return sum(width + pad for width in widths.values())


def _shared(specs: Sequence[Spec], room: int, pad: int, elastic: str) -> dict[str, int] | None:
    """Every column in view, text columns cut: the name up to its longest first, then the others
    up to one common width (short ones whole); None when even their narrowest do not fit."""
    widths = {s.key: s.least for s in specs}
    spare = room - _total(widths, pad)
    if spare < 0:
        return None
    by_key = {s.key: s for s in specs}
    grow = min(spare, max(by_key[elastic].natural - widths[elastic], 0))
    widths[elastic] += grow
    spare -= grow
    others = [s for s in specs if s.text and s.key != elastic]
    cap = max((s.least for s in others), default=0)
    while spare > 0 and others:  # raise a common cap a cell at a time: at most a few hundred steps
        wanting = [s for s in others if widths[s.key] < s.natural and widths[s.key] <= cap]
        if not wanting:
            break
        cap += 1
        for spec in wanting:
            if spare and widths[spec.key] < min(spec.natural, cap):
                widths[spec.key] += 1
                spare -= 1
    return widths


def _cap_to_window(
    specs: Sequence[Spec], widths: dict[str, int], least: dict[str, int], room: int, pad: int, fixed: int
) -> None:
    """No scrolled column wider than the part of the table that scrolls."""
    window = room - sum(widths[s.key] + pad for s in specs[:fixed]) - pad
    for spec in specs[fixed:]:
        widths[spec.key] = max(least[spec.key], min(widths[spec.key], window))


def page(
    spans: Sequence[tuple[int, int]],
    scroll_x: int,
    view: int,
    pinned: int,
    max_scroll: int,
    step: int,
    pad: int = 0,
) -> int:
    """The scroll offset that shows the next (``step`` 1) or previous (-1) columns whole.

    Args:
        spans: each scrolled column's (start, end) in the table's content, pinned columns first in it.
        scroll_x: the offset now.
        view: the table's width on screen.
        pinned: the width of the pinned columns (drawn at the left whatever the offset).
        max_scroll: the largest offset.
        step: 1 right, -1 left.
        pad: the cells' padding: a column whose right padding alone is cut counts as whole.
    """
    window = max(view - pinned, 1)
    if step > 0:
        hidden = next((start for start, end in spans if end - pad // 2 > scroll_x + view), None)
        if hidden is None:
            return scroll_x
        target = hidden - pinned
        if target <= scroll_x:  # a column wider than the window: move by a window
            target = scroll_x + window
        return min(max(target, 0), max_scroll)
    if scroll_x <= 0:
        return 0
    first = next((start for start, _ in spans if start >= scroll_x + pinned), scroll_x + pinned)
    target = next((start - pinned for start, _ in spans if first - start <= window + pad // 2), 0)
    if target >= scroll_x:
        target = scroll_x - window
    return max(target, 0)
