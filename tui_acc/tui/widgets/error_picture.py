"""An ErrorMap drawn with rich Text: a heatmap of |Δ| in shading glyphs and a histogram of the relative
error in block bars, at any width from 60 columns up.

Drawn by hand rather than with plotext (textual-plotext): its matrix plot says everything with colour,
so under NO_COLOR it is blank; here the glyph's density carries the level (`` ·░▒▓█``) and colour
only adds to it, and the picture is a few Text lines that fit the detail panel's budget at 80x24.
"""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from tui_acc.metrics.error_map import LEVELS, ErrorMap
from tui_acc.tui import formatting as fmt

SHADES = " ·░▒▓█"  # level 0 (blank) to LEVELS - 1
NAN_GLYPH = "!"
BARS = " ▁▂▃▄▅▆▇█"  # eighths of a line
BAR_LINES = 2
# Heat levels 1..5 from grey to red; under NO_COLOR the glyphs alone (and a NaN cell in reverse)
LEVEL_STYLES = ("", "grey50", "grey70", "yellow", "dark_orange", "bold red")
MAX_CELL_WIDTH = 4  # a cell drawn this many columns wide at most, where a tensor has few channels

assert len(SHADES) == len(LEVEL_STYLES) == LEVELS


def picture(emap: ErrorMap, width: int, heat_rows: int) -> list[Text]:
    """The heatmap (at most ``heat_rows`` lines), its scale and the histogram, ``width`` columns wide."""
    return [*heatmap(emap, width, heat_rows), legend(emap, width), *histogram(emap, width)]


def render(title: Text, emap: ErrorMap, width: int, heat_rows: int) -> Group:
    """The whole panel: the title, what the map says, and the picture."""
    sentence = emap.where()
    where = Text(sentence, style=fmt.palette().failed_text if sentence.startswith("stands out") else "")
    return Group(title, where, *picture(emap, width, heat_rows))


def heatmap(emap: ErrorMap, width: int, heat_rows: int) -> list[Text]:
    """Rows down, channel blocks across: one glyph per cell, the label its first row."""
    label_width = len(str(max(emap.rows - 1, 0)))
    room = max(8, width - label_width - 1)
    shown = emap.coarsened(heat_rows, room)
    levels = shown.levels()
    cell_width = max(1, min(MAX_CELL_WIDTH, room // max(levels.shape[1], 1)))
    drawn = levels.shape[1] * cell_width
    last = str(emap.channels - 1)
    axis = Text(" " * label_width + " ")
    axis.append(("channels 0".ljust(max(drawn - len(last), 11)) + last)[: max(drawn, 11)], style="dim")
    lines = [axis]
    monochrome = fmt.palette() is fmt.MONOCHROME
    for index, row in enumerate(levels):
        line = Text().append(str(int(shown.row_edges[index])).rjust(label_width) + " ", style="dim")
        for level in row:
            glyph, style = _cell(int(level), monochrome)
            line.append(glyph * cell_width, style=style)
        lines.append(line)
    return lines


def _cell(level: int, monochrome: bool) -> tuple[str, str]:
    if level < 0:
        return NAN_GLYPH, "bold reverse" if monochrome else "bold magenta"
    return SHADES[level], "" if monochrome else LEVEL_STYLES[level]


def legend(emap: ErrorMap, width: int) -> Text:
    """Each glyph's upper edge: the cell's largest |Δ| over the golden's RMS, in units of u; its words
    shortened where the line would not fit ``width``."""
    tops = emap.level_tops()
    scale = Text()
    if not tops:
        scale.append("0 everywhere")
    monochrome = fmt.palette() is fmt.MONOCHROME
    for level, top in enumerate(tops, start=1):
        glyph, style = _cell(level, monochrome)
        scale.append(glyph, style=style or "").append(f"{emap.in_units(top)} ")
    if emap.cell_bad.any():
        glyph, style = _cell(-1, monochrome)
        scale.append(glyph, style=style).append(" NaN/Inf")
    if emap.golden_rms == 0:
        scale.append(" (golden all zero: |Δ| itself)", style="dim")
    words = next((w for w in LEGEND_WORDS if len(w) + scale.cell_len <= width), LEGEND_WORDS[-1])
    return Text().append(words, style="dim").append_text(scale)


LEGEND_WORDS = ("max|Δ|/rms(golden) per cell ≤ ", "max|Δ|/rms ≤ ", "≤ ")


def histogram(emap: ErrorMap, width: int) -> list[Text]:
    """|Δ|/|g| per element in power-of-two bins, bars ``BAR_LINES`` high, u marked under them."""
    head = Text().append("|Δ|/|g| per element: ", style="dim").append(emap.histogram_summary())
    total = int(emap.histogram.sum()) + emap.exact
    counts = emap.histogram
    if not counts.any():
        return [head.append("; no element differs" if total else "")]
    first, last = _bin_span(emap, max(4, width - 2))
    shown = counts[first : last + 1]
    bin_width = max(1, min(3, (width - 2) // len(shown)))
    peak = int(shown.max())
    eighths = [0 if not n else max(1, round(BAR_LINES * 8 * int(n) / peak)) for n in shown]
    bars = []
    for line in range(BAR_LINES - 1, -1, -1):  # top line first
        text = Text(" ")
        for height in eighths:
            text.append(BARS[min(8, max(0, height - 8 * line))] * bin_width)
        bars.append(text)
    return [head, *bars, _axis(emap, first, len(shown), bin_width)]


def _bin_span(emap: ErrorMap, room: int) -> tuple[int, int]:
    """The bins drawn: every non-empty one and u's neighbours, trimmed from the small end to fit."""
    nonzero = np.flatnonzero(emap.histogram)
    first, last = int(nonzero[0]), int(nonzero[-1])
    u_bin = _u_bin(emap)
    if u_bin is not None:
        first, last = min(first, u_bin - 1), max(last, u_bin + 1)
    first, last = max(first, 0), min(last, len(emap.histogram) - 1)
    return max(first, last - room + 1), last


def _u_bin(emap: ErrorMap) -> int | None:
    """The first bin above u (errors in [u, 2u)): u is its left edge."""
    exponent = emap.unit_exponent
    return None if exponent is None else exponent + 1 - emap.bin_exponent(0)


def _axis(emap: ErrorMap, first: int, bins: int, bin_width: int) -> Text:
    """2^a at the left, 2^b at the right edge, ``^u`` where u is."""
    length = 1 + bins * bin_width
    cells = [" "] * (length + 8)
    u_bin = _u_bin(emap)
    marks = []
    if u_bin is not None and first <= u_bin < first + bins:
        marks.append((1 + (u_bin - first) * bin_width, "^u"))
    low = f"2^{emap.bin_exponent(first) - 1}"
    high = f"2^{emap.bin_exponent(first + bins - 1)}"
    marks += [(1, low), (max(1, length - len(high)), high)]
    taken: list[range] = []
    for at, label in marks:  # u first: it wins a clash
        span = range(at, at + len(label))
        if any(set(span) & set(other) for other in taken) or span.stop > len(cells):
            continue
        taken.append(range(at - 1, span.stop + 1))
        cells[at : span.stop] = label
    return Text("".join(cells).rstrip(), style="dim")
