"""A rich renderable drawn once per width: what the tensor detail and the help show. For what does
not depend on the height it is given (text, tables): the height is not in the key."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.segment import Segment

_WIDTHS_KEPT = 4  # with and without a scrollbar, which textual tries in turn; a resize


class DrawnOnce:
    """A rich renderable whose segments are kept once drawn, for the widths they were drawn at.

    textual draws a ``Static``'s rich content to measure its height, again while laying the screen
    out, and again each time it shows it: the tensor detail's table was drawn three times a cursor
    move (most of what a move cost on the operator screen), the help's text several times a ``?``.
    The segments are the renderable's own, so what shows is the same.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable
        self._drawn: dict[tuple[object, ...], list[Segment]] = {}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The segments drawn at these options before (whatever the height), else drawn now and kept."""
        key = (
            id(console),
            options.max_width,
            options.min_width,
            options.justify,
            options.overflow,
            options.no_wrap,
            options.highlight,
            options.markup,
        )
        drawn = self._drawn.get(key)
        if drawn is None:
            if len(self._drawn) >= _WIDTHS_KEPT:
                self._drawn.clear()
            drawn = self._drawn[key] = list(console.render(self.renderable, options))
        return drawn

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """The renderable's own measurement."""
        return Measurement.get(console, options, self.renderable)
