"""An ErrorMap as a standalone SVG picture for a ticket: the heatmap (the TUI's levels, in colour), its
scale, the histogram of the relative error with u marked, and where it came from.

Written as text (rectangles and labels) rather than through matplotlib: the picture is a grid of
cells and a row of bars, and the report stays free of a plotting stack of tens of MB. Every cell
carries a tooltip (its rows, channels, largest and mean |Δ|) for a reader who opens it in a browser.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

import numpy as np

from tui_acc.metrics.error_map import LEVELS, ErrorMap, short

# white, then yellow to dark red (ColorBrewer YlOrRd): the TUI's levels 0..5; NaN/Inf purple
LEVEL_FILLS = ("#ffffff", "#ffffb2", "#fecc5c", "#fd8d3c", "#f03b20", "#bd0026")
NAN_FILL = "#7b2cbf"
FONT = "font-family='DejaVu Sans Mono, Menlo, Consolas, monospace' font-size='12'"
MARGIN, LABEL_WIDTH, LINE = 16, 64, 18
HEAT_WIDTH, HEAT_HEIGHT = 640, 320  # the heatmap's box at most; cells are square-ish within it
BAR_WIDTH, BAR_HEIGHT = 12, 110

assert len(LEVEL_FILLS) == LEVELS


def error_map_svg(emap: ErrorMap, heading: list[str], footer: list[str]) -> str:
    """The picture: ``heading`` lines on top (what the tensor is), ``footer`` lines at the bottom
    (where it came from)."""
    parts: list[str] = []
    y = MARGIN
    for index, line in enumerate([*heading, emap.where()]):
        y += LINE
        weight = " font-weight='bold'" if index == 0 else ""
        parts.append(_text(MARGIN, y, line, weight))
    y += LINE // 2
    heat, y, width = _heatmap(emap, y + LINE)
    parts += heat
    legend, y = _legend(emap, y + LINE)
    parts += legend
    bars, y, bars_width = _histogram(emap, y + 2 * LINE)
    parts += bars
    y += LINE // 2
    for line in footer:
        y += LINE
        parts.append(_text(MARGIN, y, line, " fill='#555555'"))
    total_width = max(width, bars_width, 8 * max(len(s) for s in [*heading, *footer, emap.where()])) + MARGIN
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{total_width}' height='{y + MARGIN}'"
        f" viewBox='0 0 {total_width} {y + MARGIN}' {FONT}>\n"
        f"<rect width='100%' height='100%' fill='white'/>\n" + "\n".join(parts) + "\n</svg>\n"
    )


def _heatmap(emap: ErrorMap, top: int) -> tuple[list[str], int, int]:
    """Cells, row labels at the left, channel labels below; returns the parts, the bottom and the
    right edge."""
    levels = emap.levels()
    rows, columns = levels.shape if levels.size else (0, 0)
    if not levels.size:
        return [_text(MARGIN, top, "(empty tensor: no cells)")], top + LINE, 400
    cell_w = max(4, min(24, HEAT_WIDTH // columns))
    cell_h = max(4, min(24, HEAT_HEIGHT // rows))
    left = MARGIN + LABEL_WIDTH
    parts = [_text(MARGIN, top - 4, "rows", " fill='#555555'")]
    means = emap.cell_sum / np.maximum(emap.cell_counts(), 1)
    relative = emap.relative_cells()
    label_every = max(1, -(-LINE // cell_h))  # a row label every few cells when cells are short
    for r in range(rows):
        y = top + r * cell_h
        if r % label_every == 0:
            parts.append(_text(MARGIN, y + min(cell_h, LINE) - 4, str(int(emap.row_edges[r]))))
        for c in range(columns):
            level = int(levels[r, c])
            fill = NAN_FILL if level < 0 else LEVEL_FILLS[level]
            tip = (
                f"rows {emap.row_edges[r]}-{emap.row_edges[r + 1] - 1},"
                f" channels {emap.channel_edges[c]}-{emap.channel_edges[c + 1] - 1}:"
                f" max |Δ| {short(emap.cell_max[r, c])} ({emap.in_units(relative[r, c])} of rms),"
                f" mean |Δ| {short(means[r, c])}"
                + (f", {emap.cell_bad[r, c]} NaN/Inf" if emap.cell_bad[r, c] else "")
            )
            parts.append(
                f"<rect x='{left + c * cell_w}' y='{y}' width='{cell_w}' height='{cell_h}' fill='{fill}'>"
                f"<title>{escape(tip)}</title></rect>"
            )
    bottom = top + rows * cell_h
    right = left + columns * cell_w
    parts.append(
        f"<rect x='{left}' y='{top}' width='{columns * cell_w}' height='{rows * cell_h}'"
        " fill='none' stroke='#999999'/>"
    )
    last = str(emap.channels - 1)
    parts.append(_text(left, bottom + LINE, "channel 0"))
    parts.append(_text(right - 7 * len(last), bottom + LINE, last))
    return parts, bottom + LINE, right


def _legend(emap: ErrorMap, top: int) -> tuple[list[str], int]:
    """Each colour's upper edge: a cell's largest |Δ| over the golden's RMS."""
    tops = emap.level_tops()
    parts = [_text(MARGIN, top + 12, "max|Δ|/rms(golden) per cell ≤")]
    x = MARGIN + 250
    if not tops:
        return [*parts, _text(x, top + 12, "0 everywhere")], top + LINE
    swatches = [(LEVEL_FILLS[level], emap.in_units(edge)) for level, edge in enumerate(tops, start=1)]
    if emap.cell_bad.any():
        swatches.append((NAN_FILL, "NaN/Inf"))
    for fill, label in swatches:
        parts.append(f"<rect x='{x}' y='{top}' width='14' height='14' fill='{fill}' stroke='#999999'/>")
        parts.append(_text(x + 18, top + 12, label))
        x += 26 + 8 * len(label)
    return parts, top + LINE


def _histogram(emap: ErrorMap, top: int) -> tuple[list[str], int, int]:
    """Bars of |Δ|/|g| per power-of-two bin, a dashed line at u; returns parts, bottom, right edge."""
    parts = [_text(MARGIN, top, f"|Δ|/|g| per element: {emap.histogram_summary()}")]
    counts = emap.histogram
    if not counts.any():
        return parts, top + LINE, 400
    nonzero = np.flatnonzero(counts)
    first, last = int(nonzero[0]), int(nonzero[-1])
    u_exponent = emap.unit_exponent
    u_bin = None if u_exponent is None else u_exponent + 1 - emap.bin_exponent(0)
    if u_bin is not None:
        first, last = max(0, min(first, u_bin - 1)), min(len(counts) - 1, max(last, u_bin + 1))
    base = top + LINE // 2 + BAR_HEIGHT
    left = MARGIN + LABEL_WIDTH
    peak = int(counts[first : last + 1].max())
    for index in range(first, last + 1):
        n = int(counts[index])
        height = 0 if not n else max(1, round(BAR_HEIGHT * n / peak))
        x = left + (index - first) * BAR_WIDTH
        exponent = emap.bin_exponent(index)
        tip = f"[2^{exponent - 1}, 2^{exponent}): {n} elements"
        parts.append(
            f"<rect x='{x}' y='{base - height}' width='{BAR_WIDTH - 1}' height='{height}' fill='#4c72b0'>"
            f"<title>{escape(tip)}</title></rect>"
        )
        if (index - first) % 4 == 0:
            parts.append(_text(x, base + LINE, f"2^{exponent - 1}", " font-size='10'"))
    right = left + (last - first + 1) * BAR_WIDTH
    parts.append(f"<line x1='{left}' y1='{base}' x2='{right}' y2='{base}' stroke='#999999'/>")
    if u_bin is not None and first <= u_bin <= last:
        x = left + (u_bin - first) * BAR_WIDTH
        parts.append(
            f"<line x1='{x}' y1='{base - BAR_HEIGHT}' x2='{x}' y2='{base}' stroke='#bd0026'"
            " stroke-dasharray='4 3'/>"
        )
        parts.append(_text(x + 3, base - BAR_HEIGHT + 10, f"u = 2^{u_exponent}", " fill='#bd0026'"))
    return parts, base + LINE, right + MARGIN


def _text(x: int, y: int, words: str, extra: str = "") -> str:
    return f"<text x='{x}' y='{y}'{extra} xml:space={quoteattr('preserve')}>{escape(words)}</text>"
