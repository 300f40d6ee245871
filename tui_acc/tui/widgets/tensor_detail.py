"""Every tensor of the highlighted operator: slot, shape, dtypes, metrics, verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui_acc.anomalies.rules import anomaly_text
from tui_acc.pairing import NodePair
from tui_acc.pairing.model import Unmatched
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.tui.drawn_once import DrawnOnce
from tui_acc.verdicts.weights import weight_error

if TYPE_CHECKING:
    from tui_acc.metrics.engine import MetricsEngine


class TensorPanel(VerticalScroll):
    """The tensor detail under a table, a few lines high: where the operator has more tensors than the
    panel has lines (at 80x24 a culprit's often do), it scrolls, and Tab reaches it (the arrows,
    PgUp, PgDn, Home and End scroll it); the operator screen's ``d`` gives it the room."""

    DEFAULT_CSS = """
    TensorPanel { height: auto; max-height: 9; scrollbar-size-vertical: 1; }
    """

    def __init__(self, id: str | None = None, detail_id: str | None = None) -> None:
        super().__init__(id=id)
        self._detail_id = detail_id

    def compose(self) -> ComposeResult:
        """The detail itself, as tall as its lines."""
        yield TensorDetail(id=self._detail_id)

    def allow_focus(self) -> bool:
        """Tab stops here only where there is something to scroll to."""
        return super().allow_focus() and self.max_scroll_y > 0


class TensorDetail(Static):
    """Tensor-level view of one node pair."""

    DEFAULT_CSS = """
    TensorDetail { height: auto; }
    """

    _shown: tuple[NodePair | None, MetricsEngine, Row | None] | None = None

    # The room the operator shown was fitted to, the room from which none of its tensor names is
    # elided, and how many lines it took at which room (a resize that did not show it again leaves
    # a count of another width: the next one is laid out).
    _shown_room = -1
    _fits_from = 0
    _lines: tuple[int, int] = (-1, -1)

    def on_resize(self) -> None:
        """Show the same operator again, its tensor names elided to the new width, where that elides
        them differently (the panel takes each operator's height, and its scrollbar a column, as the
        cursor moves: showing the operator again each time laid the screen out a second time)."""
        room = self._room()
        if self._shown is None or room == self._shown_room:
            return
        if min(room, self._shown_room) < self._fits_from:
            self.show(*self._shown)

    def show(self, node: NodePair | None, engine: MetricsEngine, row: Row | None = None) -> None:
        """Show ``node``'s verdict and rule lines, then a line per tensor (slot, shape, dtypes, metrics).

        Args:
            node: the highlighted operator; None clears the panel.
            engine: whose rows already computed are shown (memory only: this runs on the UI thread).
            row: the operator's own row, for its verdict, rule and "within" lines.
        """
        self._shown = (node, engine, row)
        self._shown_room, self._fits_from = self._room(), 0
        if node is None:
            self._lines = (-1, -1)
            self.update("")
            return
        names = fmt.display_name(node.golden)
        if node.test != node.golden:
            names += f"  ↔  {fmt.display_name(node.test)}"
        types = (
            node.golden_type
            if node.golden_type == node.test_type
            else f"{node.golden_type} ↔ {node.test_type}"
        )
        title = Text.assemble((names, "bold"), "  ", (types, "dim"))
        head = [title]
        if row is not None and (verdict := _verdict_line(row)):
            head.append(verdict)  # a line of its own: wrapped onto the title it lost its spacing
        if row is not None and row.get("rule"):
            head.append(_rule_line(row))
        if row is not None and row.get("tensors_within"):
            head.append(_within_line(row))
        absent = engine.pairing.absent_before(node.token).get(node.golden)
        if absent:
            head.append(_absent_line(absent))
        if not node.tensors:
            self._draw(Group(*head, Text("no tensor files paired for this node", style="dim")))
            return
        rows = [engine.known_row(pair) for pair in node.tensors]  # memory only: this is the UI thread
        stats = any(r is not None and r.get("stats_only") for r in rows)
        metrics: tuple[str, ...] = (
            ("norm rel", "max Δ", "mean Δ", "") if stats else ("cosine", "max abs", "rel eucl", "KL")
        )
        cells = [
            _cells(pair.slot, row, node.golden_type) for pair, row in zip(node.tensors, rows, strict=True)
        ]
        if engine.pairing.golden is engine.pairing.test:  # one dump on its own: its values, not a distance
            metrics = ("max", "min", "NaN", "Inf", "anomaly")
            cells = [_own_cells(pair.slot, row) for pair, row in zip(node.tensors, rows, strict=True)]
        # The verdict and every metric keep their width; the tensor's name gives way, elided in the
        # middle (input.position_embeddings.0 / .1 differ at their end), then the shape and dtype.
        headers = ("", "tensor", "shape", "dtype", *metrics)
        widths = [
            max([len(header)] + [_cell_width(c[i]) for c in cells if len(c) > i])
            for i, header in enumerate(headers)
        ]
        room = self._room()
        # one cell between columns (padding collapsed) and one at each edge
        others = sum(width for i, width in enumerate(widths) if i != 1) + len(widths) + 1
        name_room = max(room - others, _NAME_MIN)
        self._fits_from = others + widths[1]
        grid = Table(box=None, padding=(0, 1), show_edge=False, header_style="dim", collapse_padding=True)
        for index, header in enumerate(headers):
            keep = index == 0 or index >= 4  # the verdict and the metrics: never elided
            grid.add_column(header, no_wrap=True, min_width=widths[index] if keep else None)
        for cell in cells:
            cell[1] = fmt.elide_middle(str(cell[1]), name_room)
            grid.add_row(*cell)
        self._draw(Group(*head, grid, *_rank_lines(node, rows)))

    def _room(self) -> int:
        """The panel's width for text (the app's, less the padding, before the first layout)."""
        return self.content_size.width or self.app.size.width - 2

    def _draw(self, renderable: Group) -> None:
        """Show ``renderable``, drawn once per width (``DrawnOnce``); where it takes as many lines
        as what it replaces, without laying the screen out again."""
        drawn = DrawnOnce(renderable)
        # drawn as textual measures a height (the same options: it finds these segments kept)
        room = self._room()
        options = self.app.console_options.update_width(room).update(highlight=False)
        lines = (sum(text.count("\n") for text, _, _ in self.app.console.render(drawn, options)), room)
        self.update(drawn, layout=lines != self._lines)
        self._lines = lines


def _rank_lines(node: NodePair, rows: Sequence[Row | None]) -> list[Text]:
    """A failing tensor of a gathered test, rank by rank: which rank's part of it is off."""
    return [
        Text(f"{pair.slot} by rank: {row['by_rank']}", style="dim")
        for pair, row in zip(node.tensors, rows, strict=True)
        if row is not None and row.get("by_rank") and row.get("passed") is False
    ]


_LABEL_TEXT = {
    "local": "✗ error starts here",
    "contains": "✗ error starts in a child",
    "inherited": "✗ inherited: its inputs were already off",
}


def _verdict_line(row: Row) -> Text:
    parts: list[tuple[str, str]] = []
    label = row.get("label")
    if label in _LABEL_TEXT:
        styles = {"local": fmt.palette().suspect, "contains": fmt.palette().child}
        parts.append((_LABEL_TEXT[label], styles.get(label, fmt.palette().inherited)))
    source = row.get("inputs_from")
    if row.get("in_place"):
        # the dumped input was saved after the op overwrote it: it says nothing about what came in
        judged = "" if source in (None, "files") else f", inputs judged by {fmt.short_name(str(source))}"
        parts.append((f"⚠ in place: {row['in_place']} identical{judged}", "bold yellow"))
    elif source not in (None, "files"):
        verdict = "pass" if row.get("inputs_effective") else "fail"
        parts.append((f"inputs not dumped: judged by {fmt.short_name(str(source))} ({verdict})", "dim"))
    return Text("  ").join(Text(words, style=style) for words, style in parts)


def _rule_line(row: Row) -> Text:
    """Which rule judged the operator, with its numbers (verdicts/rules.py)."""
    measured = row.get("local_error")
    allowed = row.get("expected_error")
    numbers = ""
    if measured is not None and allowed is not None:
        numbers = f" {fmt.num(measured)} {'>' if row.get('label') == 'local' else '≤'} {fmt.num(allowed)}:"
    style = fmt.palette().suspect if row.get("label") == "local" else "dim"
    return Text(f"{row['rule']}:{numbers} {row.get('reason') or ''}", style=style)


def _within_line(row: Row) -> Text:
    """A module's drift as a whole: every output of the operators inside it, as one tensor."""
    return Text(
        f"all {row['tensors_within']} outputs inside: cosine {fmt.cosine(row.get('cosine_within'))}, "
        f"rel eucl {fmt.num(row.get('rel_euclidean_within'))}",
        style="dim",
    )


def _absent_line(records: list[Unmatched]) -> Text:
    """The records between this operator and the paired one before it that one side does not hold."""
    parts = []
    for side in ("golden", "test"):
        names = [fmt.short_name(r.name) for r in records if r.side == side]
        if names:
            shown = ", ".join(names[:_ABSENT_SHOWN]) + (
                f" +{len(names) - _ABSENT_SHOWN}" if len(names) > _ABSENT_SHOWN else ""
            )
            other = "test" if side == "golden" else "golden"
            parts.append(f"not in {other} just before it: {shown}")
    return Text("; ".join(parts), style="dim")


_ABSENT_SHOWN = 4
_NAME_MIN = 12  # a tensor's name in the detail panel, at its narrowest


def _cells(slot: str, row: Row | None, node_type: str | None = None) -> list[Text | str]:
    if row is None:
        return [fmt.mark(None), slot, Text("computing…", style=fmt.PENDING_STYLE)]
    if row.get("error"):
        return [fmt.mark(False), slot, Text(row["error"], style=fmt.palette().error)]
    if row.get("test_is_nan") is not None:  # msprobe nan_check: the call's NaN flag
        flags = f"NaN: golden {_yes_no(row.get('golden_is_nan'))}, test {_yes_no(row['test_is_nan'])}"
        return [fmt.mark(row["passed"]), slot, "-", "-", fmt.failing(flags, not row["passed"])]
    if row.get("test_checksum") is not None and row.get("norm_diff") is None:  # summary_mode xor
        same = row["test_checksum"] == row.get("golden_checksum")
        words = "same checksum" if same else f"checksum {row.get('golden_checksum')} ≠ {row['test_checksum']}"
        return [
            fmt.mark(row["passed"]),
            slot,
            row["golden_shape"] or "-",
            fmt.dtypes(row["golden_dtype"], row["test_dtype"]),
            fmt.failing(words, not same),
        ]
    if row.get("stats_only"):
        return [
            fmt.mark(row["passed"]),
            slot,
            row["golden_shape"] or "-",
            fmt.dtypes(row["golden_dtype"], row["test_dtype"]),
            fmt.styled(fmt.num(row.get("norm_rel_diff")), row["passed"]),
            fmt.num(row.get("max_diff")),
            fmt.num(row.get("mean_diff")),
            Text("statistics only", style="dim"),
        ]
    passed = row["passed"]
    if (judged := weight_error(row, node_type)) is not None:
        error, bound = judged  # a weight: off only beyond its cast's rounding (the weights rule)
        passed = error <= bound
    cells: list[Text | str] = [
        fmt.mark(passed),
        slot,
        row["golden_shape"]
        if row["golden_shape"] == row["test_shape"]
        else f"{row['golden_shape']}/{row['test_shape']}",
        fmt.dtypes(row["golden_dtype"], row["test_dtype"]),
        fmt.styled(fmt.cosine(row["cosine"]), passed),
        fmt.num(row["max_abs_err"]),
        fmt.num(row["rel_euclidean"]),
        fmt.num(row["kl"]),
    ]
    nan = (row.get("test_nan") or 0) + (row.get("test_inf") or 0)
    if nan:
        cells.append(fmt.failing(f"{nan} NaN/Inf in test"))
    return cells


def _own_cells(slot: str, row: Row | None) -> list[Text | str]:
    """A tensor of a dump checked on its own: its extremes, NaN and Inf counts, and what is wrong."""
    if row is None or row.get("error"):
        return _cells(slot, row)
    kind = row.get("anomaly")
    what = f"{kind} ({anomaly_text(kind, row.get('anomaly_figure'))})" if kind else "-"
    return [
        fmt.mark(row["passed"]),
        slot,
        row.get("test_shape") or "-",
        str(row.get("test_dtype") or "-"),
        fmt.num(row.get("test_max")),
        fmt.num(row.get("test_min")),
        str(row.get("test_nan") if row.get("test_nan") is not None else "-"),
        str(row.get("test_inf") if row.get("test_inf") is not None else "-"),
        fmt.failing(what, bool(kind)),
    ]


def _cell_width(cell: Text | str) -> int:
    return (Text(cell) if isinstance(cell, str) else cell).cell_len


def _yes_no(flag: object) -> str:
    return "-" if flag is None else "yes" if flag else "no"
