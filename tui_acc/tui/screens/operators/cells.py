"""What the operator table shows: the columns chosen for the pair, each row's cells, and the text
columns fitted to the room the table has (``column_fit``)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from tui_acc.anomalies.rules import anomaly_text
from tui_acc.pairing import NodePair
from tui_acc.rows import Row
from tui_acc.session import Comparison
from tui_acc.tui import formatting as fmt
from tui_acc.tui.column_fit import Spec, fit
from tui_acc.tui.screens.operator_table import (
    COLUMNS,
    FIXED,
    NAME_MIN,
    NOISE_COLUMN,
    PRIORITY,
    SINGLE_COLUMNS,
    STATS_COLUMNS,
)
from tui_acc.tui.screens.operators.verdict_view import VerdictView
from tui_acc.tui.widgets.metric_table import MetricTable

Columns = tuple[tuple[str, str, int], ...]  # (key, header, width), in screen order


def columns_for(comparison: Comparison, pairs: dict[str, NodePair]) -> Columns:
    """The table's columns for the pair: statistics only, one dump, a baseline, differing test names."""
    columns: Columns = COLUMNS
    if comparison.golden.statistics_only or comparison.test.statistics_only:
        columns = STATS_COLUMNS
    if comparison.single:
        columns = SINGLE_COLUMNS
    # ◆ and the largest position: ◆107 must not lose its last digit
    order_width = max(3, len(f"◆{len(pairs) - 1}"))
    columns = tuple((key, label, order_width if key == "order" else width) for key, label, width in columns)
    if comparison.baseline is not None:  # the verdicts' own measure, beside the cosine
        at = next(i for i, (key, _, _) in enumerate(columns) if key in ("cosine", "norm_rel_diff"))
        columns = (*columns[: at + 1], NOISE_COLUMN, *columns[at + 1 :])
    if any(node.golden != node.test for node in pairs.values()):
        # torch against ATB: the test side's own operator name, after the verdicts and the
        # main metric (at 80 columns it must not push them off screen)
        first, rest = columns[:PRIORITY], columns[PRIORITY:]
        columns = (*first, ("test_name", "Test op", 18), *rest)
    return columns


def type_label(node: NodePair) -> str:
    """The Type column: the golden's type, and the test's where it differs."""
    if node.golden_type == node.test_type:
        return node.golden_type
    return f"{node.golden_type}/{node.test_type}"


class OperatorCells:
    """The cells of every row of one token's operator table."""

    # The text columns fitted to the room (column_fit): each row's cell is its label elided to fit.
    TEXT_COLUMNS = ("name", "test_name", "type")

    def __init__(
        self,
        columns: Columns,
        pairs: dict[str, NodePair],
        labels: dict[str, str],
        rows: dict[str, Row],
        verdicts: VerdictView,
        origins: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        """``labels``: each row's name as the Operator column shows it; ``rows``: the screen's rows as
        they arrive (read, never written); ``origins``: a gathered test's calls that one rank ran alone
        (its own experts), shown by that rank and their name in its dump.json."""
        self.columns = columns
        self._origins = origins or {}
        self._pairs = pairs
        self._labels = labels
        self._rows = rows
        self._verdicts = verdicts
        self._order = {name: i for i, name in enumerate(pairs)}
        self._widths: dict[str, int] = {}  # the text columns' widths now (none: not fitted yet)
        # the test side's longest name, whole
        self._longest_test = max((len(self._test_label(n.test)) for n in pairs.values()), default=0)

    # --- fitting --------------------------------------------------------------------------------

    def _specs(self, compact: bool = False) -> list[Spec]:
        """The columns' narrowest and natural widths: numbers as declared, names and types as long
        as their longest label (known from the pairing: nothing computed is needed); ``compact``:
        the test side's names by their layers' index (fmt.compact_path)."""
        longest = {
            "name": max((len(label) for label in self._labels.values()), default=NAME_MIN),
            "test_name": max(
                (len(self._test_label(n.test, compact)) for n in self._pairs.values()), default=0
            ),
            "type": max((len(type_label(n)) for n in self._pairs.values()), default=0),
        }
        specs = []
        for key, label, width in self.columns:
            if key in longest:
                natural = max(longest[key], len(label))
                least = NAME_MIN if key == "name" else min(width, natural)
                specs.append(Spec(key, least, natural))
            else:
                specs.append(Spec(key, width, width))
        return specs

    def fit(self, table: MetricTable) -> None:
        """Give the text columns the room the table has (column_fit.fit: every column whole where
        they fit, else the key columns pinned and the name as wide as the first columns leave);
        names elided in the middle. The test side's names are whole where their column can hold
        every one, else by their layers' index."""
        room = table.room()
        if room <= 0:
            return
        pad = 2 * table.cell_padding
        widths = fit(self._specs(), room, pad, FIXED, PRIORITY, "name")
        if widths.get("test_name", self._longest_test) < self._longest_test:
            widths = fit(self._specs(compact=True), room, pad, FIXED, PRIORITY, "name")
        if not table.set_widths(widths):
            return
        self._widths = {key: widths[key] for key in self.TEXT_COLUMNS if key in widths}
        for key in list(table.rows):
            name = str(key.value)
            cells = self._text_cells(name)
            for column in self._widths:
                table.update_cell(name, column, cells[column])

    def _width(self, column: str) -> int:
        """The column's width now: fitted, or as declared until the first fit."""
        declared = {key: width for key, _, width in self.columns}
        return self._widths.get(column) or declared.get(column, NAME_MIN)

    # --- cells ----------------------------------------------------------------------------------

    def _text_cells(self, name: str) -> dict[str, Text | str]:
        """The name, the test side's name and the type of row ``name``, each fitted to its column:
        the test name whole where the column holds every one, else its layers by their index
        (``3/3/3_LinearOperation``: each row still differs), elided in the middle where it must."""
        node = self._pairs[name]
        label = fmt.elide_middle(self._labels[name], self._width("name"))
        test_width = self._width("test_name")
        whole = self._widths.get("test_name", 0) >= self._longest_test
        test = self._test_label(node.test, compact=not whole)
        return {
            "name": fmt.styled(label, self._verdicts.passed(name)) if name in self._rows else Text(label),
            "test_name": fmt.elide_middle(test, test_width),
            "type": fmt.elide_middle(type_label(node), self._width("type")),
        }

    def _test_label(self, test: str, compact: bool = False) -> str:
        """The test side's name as its column shows it (``compact``: its layers by their index); a
        call one rank ran alone, by that rank and the name its dump.json gives it."""
        shown = fmt.compact_path if compact else fmt.display_name
        if test in self._origins:
            rank, record = self._origins[test]
            return f"rank {rank}: {shown(record)}"
        return shown(test)

    def row(self, name: str) -> list[Text | str]:
        """The row of ``name``, in the order of the columns."""
        row = self._rows.get(name)
        cells: dict[str, Text | str] = {"order": self.order_cell(name), **self._text_cells(name)}
        if row is None:
            pending = Text("…", style=fmt.PENDING_STYLE)
            cells.update(inputs=pending, outputs=pending)
        else:
            passed = self._verdicts.passed(name)
            cells.update(
                inputs=self._verdicts.input_mark(name),
                outputs=self._verdicts.output_mark(name),
                cosine=fmt.figure(fmt.cosine(row["cosine"]), passed),
                max_abs_err=fmt.figure(fmt.num(row["max_abs_err"])),
                rel_euclidean=fmt.figure(fmt.num(row["rel_euclidean"])),
                thousandth_ratio=fmt.figure(fmt.percent(row.get("thousandth_ratio"))),
                norm_rel_diff=fmt.figure(fmt.num(row.get("norm_rel_diff")), passed),
                max_diff=fmt.figure(fmt.num(row.get("max_diff"))),
                min_diff=fmt.figure(fmt.num(row.get("min_diff"))),
                mean_diff=fmt.figure(fmt.num(row.get("mean_diff"))),
                noise_ratio=fmt.figure(fmt.ratio(row.get("noise_ratio")), passed),
                anomaly=fmt.failing(row.get("anomaly") or "-", bool(row.get("anomaly"))),
                anomaly_figure=fmt.figure(
                    anomaly_text(row.get("anomaly"), row.get("anomaly_figure")), passed
                ),
                shape=row["shape"] or "-",
            )
        return [cells.get(key, "") for key, _, _ in self.columns]

    def order_cell(self, name: str) -> Text:
        """The # column: the execution position, ◆ before the culprit's."""
        order = self._order[name]
        if self._verdicts.is_culprit(name):
            return fmt.suspect(f"◆{order}")
        return Text(str(order), style="dim")
