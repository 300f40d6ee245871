"""One token's operators: the layer tree on the left, the metric table on the right."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Input, Static
from textual.worker import get_current_worker

from tui_acc.anomalies.rules import anomaly_text
from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.tui.column_fit import Spec, fit
from tui_acc.tui.screens.base import ViewScreen
from tui_acc.tui.screens.operator_table import (
    COLUMNS,
    FIXED,
    NAME_MIN,
    NOISE_COLUMN,
    PRIORITY,
    SINGLE_COLUMNS,
    STATS_COLUMNS,
    operator_frame,
    shown_passed,
)
from tui_acc.tui.screens.replay import ReplayScreen
from tui_acc.tui.screens.view_state import OperatorView
from tui_acc.tui.sorting import matching_keys, verdict_rank
from tui_acc.tui.widgets.error_map import ErrorMapView
from tui_acc.tui.widgets.layer_tree import LayerTree
from tui_acc.tui.widgets.metric_table import MetricTable
from tui_acc.tui.widgets.tensor_detail import TensorDetail
from tui_acc.verdicts.explain import no_culprit
from tui_acc.verdicts.verdict import row_failing as failing

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.verdicts.replay_check import Replay
    from tui_acc.verdicts.verdict import TokenVerdict

# The engine's modules (polars, numpy) are imported where they are used: the token list, which
# imports this screen, is on screen before them.

SEPARATOR = "  │  "  # between the summary line's parts


class OperatorScreen(ViewScreen):
    """Which operator is the first whose inputs match the golden but whose output does not?"""

    BINDINGS = [
        Binding("escape", "back", "Back", id="back"),
        Binding("backspace", "leave", "Back, keeping the filter", show=False, id="leave"),
        Binding("f", "first_failure", "First fail", id="first_failing_op"),
        Binding("tab", "app.focus_next", "Tree/table", show=False, id="focus_next"),  # the app has the action
        Binding("a", "scope_all", "All ops", show=False, id="scope_all"),
        Binding("t", "toggle_tree", "Tree", show=False, id="toggle_tree"),
        # priority: run as the app routes the key, before it routes the keys typed after it
        Binding("slash", "filter", "Filter", id="filter", priority=True),
        Binding("p", "replay", "Replay", show=False, id="replay"),
        Binding("m", "error_map", "Error map", show=False, id="error_map"),
        Binding("right_square_bracket", "error_map_step(1)", "Next tensor", show=False, id="error_map_next"),
        Binding("left_square_bracket", "error_map_step(-1)", "Prev tensor", show=False, id="error_map_prev"),
        Binding("j", "cursor('down')", "Down", show=False, id="down"),
        Binding("k", "cursor('up')", "Up", show=False, id="up"),
    ]

    class NodeComputed(Message):
        """One operator's metrics arrived from the worker."""

        def __init__(self, row: Row) -> None:
            super().__init__()
            self.row = row

    class TokenFinished(Message):
        """Every operator of the token is computed and judged."""

        def __init__(self, verdict: TokenVerdict) -> None:
            super().__init__()
            self.verdict = verdict

    class ReplayFinished(Message):
        """An operator's replay arrived from its worker (or why it could not start)."""

        def __init__(self, name: str, replay: Replay | None, problem: str | None = None) -> None:
            super().__init__()
            self.name = name
            self.replay = replay
            self.problem = problem

    def __init__(self, token: int, *, select: str | None = None, at_first_failure: bool = False) -> None:
        super().__init__()
        self.token = token
        self._select = select  # a golden operator to put the cursor on (reopening after a re-dump)
        # f from the token list: the cursor goes to ◆ as soon as the token's operators are judged
        self._jump_pending = at_first_failure
        self._pairs: dict[str, NodePair] = {}
        self._order: dict[str, int] = {}
        self.table_columns = COLUMNS
        self._rows: dict[str, Row] = {}
        self._scope = ""
        self._filter = ""
        self._suspect: str | None = None
        self._finished = False
        # The rows on screen, computed before the rest; replaced whole (the workers read it).
        self._on_screen: frozenset[str] = frozenset()
        self._labels: dict[str, str] = {}
        self._widths: dict[str, int] = {}  # the text columns' widths now (none: not fitted yet)
        self._longest_test = 0  # the test side's longest name, whole

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """The header, the summary line, the layer tree beside the operator table (columns chosen for
        the pair: statistics only, one dump, a baseline, differing test names), the tensor detail or
        error picture, the filter box, the re-dump and status lines, and the footer."""
        pairing = self.acc.comparison.pairing
        self._pairs = {node.golden: node for node in pairing.node_pairs(self.token)}
        self._order = {name: i for i, name in enumerate(self._pairs)}
        self._tree = self._reading_tree()
        self._labels = self._qualified_labels()
        self._longest_test = max((len(fmt.display_name(n.test)) for n in self._pairs.values()), default=0)
        cmp = self.acc.comparison
        if cmp.golden.statistics_only or cmp.test.statistics_only:
            self.table_columns = STATS_COLUMNS
        if cmp.single:
            self.table_columns = SINGLE_COLUMNS
        # ◆ and the largest position: ◆107 must not lose its last digit
        order_width = max(3, len(f"◆{len(self._pairs) - 1}"))
        self.table_columns = tuple(
            (key, label, order_width if key == "order" else width) for key, label, width in self.table_columns
        )
        if cmp.baseline is not None:  # the verdicts' own measure, beside the cosine
            at = next(
                i for i, (key, _, _) in enumerate(self.table_columns) if key in ("cosine", "norm_rel_diff")
            )
            self.table_columns = (*self.table_columns[: at + 1], NOISE_COLUMN, *self.table_columns[at + 1 :])
        if any(node.golden != node.test for node in self._pairs.values()):
            # torch against ATB: the test side's own operator name, after the verdicts and the
            # main metric (at 80 columns it must not push them off screen)
            first, rest = self.table_columns[:PRIORITY], self.table_columns[PRIORITY:]
            self.table_columns = (*first, ("test_name", "Test op", 18), *rest)
        self._scope = self._tree.root
        yield Header()
        yield Static(id="summary")
        with Horizontal(id="main"):
            partners = {name: node.test for name, node in self._pairs.items()}
            yield LayerTree(self._tree, set(self._pairs), partners, id="layers")
            yield MetricTable(id="ops", cursor_type="row", zebra_stripes=True)
        yield TensorDetail(id="detail")
        yield ErrorMapView(id="error-map")
        yield Input(placeholder="filter by name or type; Enter applies, Esc clears", id="filter")
        yield Static(id="redump-bar")
        yield Static(id="status")
        yield Footer(compact=True)  # every key that matters fits in 80 columns

    def on_mount(self) -> None:
        """Show the rows already in memory and the view as the user left this token, then start the
        operators' worker."""
        table = self.query_one("#ops", DataTable)
        for key, label, width in self.table_columns:
            table.add_column(label, key=key, width=width)
        table.fixed_columns = FIXED  # which row and its verdicts stay in view while → scrolls
        tree = self.query_one(LayerTree)
        known = self.acc.comparison.verdicts.known(self.token)  # the worker reads the disk cache
        for cached in known.rows if known is not None else []:
            self._rows[cached["golden_node"]] = cached
            tree.set_row(cached)
        if (view := self.acc.operator_views.get(self.token)) is not None:
            self._restore(view)
        self.fill_table()
        self.update_summary()
        table.focus()
        if self._select is not None and self._select in table.rows:
            table.move_cursor(row=table.get_row_index(self._select))
            self.query_one(LayerTree).reveal(self._select)
        if self._jump_pending:
            self.set_status("finding the first failing operator… (any key cancels)")
        self.compute_operators()

    def _reading_tree(self) -> NodeTree:
        """The tree the token is read by: the golden's, or for msprobe L1's flat list of API calls,
        the calls grouped by layer and module (msprobe.stack; for reading only: the verdicts are
        the golden tree's)."""
        golden = self.acc.comparison.golden
        if golden.format == "msprobe":
            from tui_acc.dumps.msprobe.stack import grouped_tree

            return grouped_tree(golden, list(self._pairs)) or golden.tree
        return golden.tree

    def _qualified_labels(self) -> dict[str, str]:
        """Each row's name in the Operator column: its layer and its own name (fmt.qualified_name)."""
        tree = self._tree
        labels: dict[str, str] = {}
        for node in tree.preorder():
            parent = labels.get(node.parent, "") if node.parent not in (None, tree.root) else ""
            labels[node.name] = fmt.qualified_name(node.name, parent)
        return labels

    def on_resize(self) -> None:
        """Refit the text columns and the summary's culprit name to the new width."""
        self.call_after_refresh(self._fit_columns)
        self.call_after_refresh(self.update_summary)  # the culprit's name is fitted to the width

    # The text columns fitted to the room (column_fit): each row's cell is its label elided to fit.
    TEXT_COLUMNS = ("name", "test_name", "type")

    def _column_specs(self, compact: bool = False) -> list[Spec]:
        """The columns' narrowest and natural widths: numbers as declared, names and types as long
        as their longest label (known from the pairing: nothing computed is needed); ``compact``:
        the test side's names by their layers' index (fmt.compact_path)."""
        test = fmt.compact_path if compact else fmt.display_name
        longest = {
            "name": max((len(label) for label in self._labels.values()), default=NAME_MIN),
            "test_name": max((len(test(n.test)) for n in self._pairs.values()), default=0),
            "type": max((len(self._type_label(n)) for n in self._pairs.values()), default=0),
        }
        specs = []
        for key, label, width in self.table_columns:
            if key in longest:
                natural = max(longest[key], len(label))
                least = NAME_MIN if key == "name" else min(width, natural)
                specs.append(Spec(key, least, natural))
            else:
                specs.append(Spec(key, width, width))
        return specs

    def _fit_columns(self) -> None:
        """Give the text columns the room the table has (column_fit.fit: every column whole where
        they fit, else the key columns pinned and the name as wide as the first columns leave);
        names elided in the middle. The test side's names are whole where their column can hold
        every one, else by their layers' index."""
        table = self.query_one("#ops", MetricTable)
        room = table.room()
        if room <= 0:
            return
        pad = 2 * table.cell_padding
        widths = fit(self._column_specs(), room, pad, FIXED, PRIORITY, "name")
        if widths.get("test_name", self._longest_test) < self._longest_test:
            widths = fit(self._column_specs(compact=True), room, pad, FIXED, PRIORITY, "name")
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
        declared = {key: width for key, _, width in self.table_columns}
        return self._widths.get(column) or declared.get(column, NAME_MIN)

    def _text_cells(self, name: str) -> dict[str, Text | str]:
        """The name, the test side's name and the type of row ``name``, each fitted to its column:
        the test name whole where the column holds every one, else its layers by their index
        (``3/3/3_LinearOperation``: each row still differs), elided in the middle where it must."""
        node = self._pairs[name]
        label = fmt.elide_middle(self._labels[name], self._width("name"))
        row = self._rows.get(name)
        test_width = self._width("test_name")
        whole = self._widths.get("test_name", 0) >= self._longest_test
        test = fmt.display_name(node.test) if whole else fmt.compact_path(node.test)
        return {
            "name": fmt.styled(label, shown_passed(row)) if row is not None else Text(label),
            "test_name": fmt.elide_middle(test, test_width),
            "type": fmt.elide_middle(self._type_label(node), self._width("type")),
        }

    @staticmethod
    def _type_label(node: NodePair) -> str:
        if node.golden_type == node.test_type:
            return node.golden_type
        return f"{node.golden_type}/{node.test_type}"

    # --- computing ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="operators", exit_on_error=False, name="operator metrics")
    def compute_operators(self) -> None:
        """Worker thread: the token's operator rows from the engine, those on screen first, posted one at a
        time (``NodeComputed``, then ``TokenFinished``); a cancelled worker stops between operators."""
        from tui_acc.metrics.engine import Cancelled

        worker = get_current_worker()

        def publish(row: Row) -> None:
            self.post_message(self.NodeComputed(row))

        try:
            verdict = self.acc.comparison.verdicts.token(
                self.token,
                should_stop=lambda: worker.is_cancelled,
                on_row=publish,
                prefer=lambda: self._on_screen,
            )
        except Cancelled:
            return
        self.post_message(self.TokenFinished(verdict))

    @on(NodeComputed)
    def _show_node(self, message: NodeComputed) -> None:
        row = message.row
        name = row["golden_node"]
        if row.get("provisional") and not self._rows.get(name, row).get("provisional"):
            return  # the final row (input verdict, label) came first: keep it
        self._rows[name] = row
        self.query_one(LayerTree).set_row(row)
        table = self.query_one("#ops", DataTable)
        if name in table.rows:
            for (column, _, _), cell in zip(self.table_columns, self._cells(name), strict=True):
                table.update_cell(name, column, cell)
        self.update_summary()
        if self.cursor_key() == name:
            self._show_detail(name)

    @on(TokenFinished)
    def _finished_token(self, message: TokenFinished) -> None:
        self._finished = True
        if self.sort.column is not None:  # rows sorted while computing took their place then: settle them
            self.apply_sort(self.sort)
        # judged on the golden tree, whatever tree the token is read by
        culprit = message.verdict.culprit
        self._suspect = culprit.node if culprit is not None else None
        if self._suspect and self._suspect in self.query_one("#ops", DataTable).rows:
            self.query_one("#ops", DataTable).update_cell(
                self._suspect, "order", self._order_cell(self._suspect)
            )
        self.update_summary()
        self._show_detail(self.cursor_key())
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("")
            self.action_first_failure()

    def on_key(self) -> None:
        """Any key while the jump to ◆ waits for the operators cancels it (and still does its job)."""
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("jump to the first failing operator cancelled")

    # --- table --------------------------------------------------------------------------------

    def _in_scope(self) -> list[str]:
        """The rows on screen: the scope's nodes, filtered, in the chosen order."""
        names = [n.name for n in self._tree.preorder(self._scope) if n.name in self._pairs]
        return self.ordered(self._filtered(names))

    NATURAL_ORDER = "execution order"

    @property
    def natural_order(self) -> str:
        """What the unsorted view is ordered by: execution order, or the dump's fallback order."""
        golden = self.acc.comparison.golden
        source = golden.order_source.split(" (")[0]
        return self.NATURAL_ORDER if golden.order_is_execution else f"dump order ({source})"

    def sort_value(self, key: str, column: str) -> object:
        """Execution position, the name as shown, the test name, the type, the In/Out verdicts' rank, else
        the row's metric."""
        node, row = self._pairs[key], self._rows.get(key) or {}
        if column == "order":
            return self._order[key]
        if column == "name":
            return self._labels[key]  # what the column shows
        if column == "test_name":
            return node.test
        if column == "type":
            return node.golden_type
        if column == "inputs":
            return verdict_rank(row.get("inputs_effective"))
        if column == "outputs":
            return verdict_rank(shown_passed(row), row.get("label"))
        return row.get(column)

    def _filtered(self, names: list[str]) -> list[str]:
        """The rows whose name as shown, golden or test name or type holds the filter text."""
        nodes = {name: self._pairs[name] for name in names}
        texts = {
            name: (self._labels[name], name, node.test, node.golden_type, node.test_type)
            for name, node in nodes.items()
        }
        return matching_keys(texts, self._filter)

    # --- filtering ----------------------------------------------------------------------------

    def action_filter(self) -> None:
        """``/``: the keys that follow are the filter's until Enter or Esc.

        The app sends each key to the widget focused when it routes it, and ``Widget.focus`` moves
        the focus only later: keys typed together with ``/`` (pasted, or bunched by a slow link) went
        to the table and ran as commands. As a priority binding this runs while the app routes ``/``,
        and the focus moves at once, before the next key is routed.
        """
        box = self.query_one("#filter", Input)
        if self.focused is box:
            raise SkipAction  # a / typed in the filter is text (ATB paths hold some)
        box.value = self._filter
        box.display = True
        self.set_focus(box)

    _filter_due = False  # a keystroke's filtering is scheduled: the next ones join it

    @on(Input.Changed, "#filter")
    def _filter_typed(self) -> None:
        """Filter as the user types; keystrokes that arrive before the next repaint filter once."""
        if not self._filter_due:
            self._filter_due = True
            self.call_after_refresh(self._filter_as_typed)

    def _filter_as_typed(self) -> None:
        self._filter_due = False
        box = self.query_one("#filter", Input)
        if box.display:
            self._refilter(box.value.strip())

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        self._set_filter(event.value.strip())

    def _set_filter(self, text: str) -> None:
        self.query_one("#filter", Input).display = False
        self._refilter(text)
        self.query_one("#ops", DataTable).focus()

    def _refilter(self, text: str) -> None:
        if text == self._filter:
            return
        self._filter = text
        self.fill_table()
        self.update_summary()
        self._show_detail(self.cursor_key())

    def main_table(self) -> DataTable[object]:
        """The operator table."""
        return self.query_one("#ops", DataTable)

    def is_failing(self, key: str) -> bool:
        """Whether operator ``key`` fails where the failure shows (not a module failing only by a child,
        ``c``)."""
        row = self._rows.get(key)  # n/N: where a failure shows, not the modules that hold one
        return failing(row) is True and row is not None and row.get("label") != "contains"

    def fill_table(self) -> None:
        """Rebuild the rows in scope and through the filter, in the current order, and refit the columns."""
        table = self.query_one("#ops", DataTable)
        table.clear()
        for name in self._in_scope():
            table.add_row(*self._cells(name), key=name)
        self._track_screen()
        # fewer rows may drop the scrollbar (or more bring it): the room is measured once drawn
        self.call_after_refresh(self._fit_columns)

    def _cells(self, name: str) -> list[Text | str]:
        """The row of ``name``, in the order of ``self.table_columns``."""
        row = self._rows.get(name)
        cells: dict[str, Text | str] = {"order": self._order_cell(name), **self._text_cells(name)}
        if row is None:
            pending = Text("…", style=fmt.PENDING_STYLE)
            cells.update(inputs=pending, outputs=pending)
        else:
            passed = shown_passed(row)
            cells.update(
                inputs=fmt.input_mark(row.get("inputs_effective"), row.get("inputs_from")),
                outputs=fmt.output_mark(passed, row.get("label"), bool(row.get("error"))),
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
        return [cells.get(key, "") for key, _, _ in self.table_columns]

    def _order_cell(self, name: str) -> Text:
        order = self._order[name]
        if name == self._suspect:
            return fmt.suspect(f"◆{order}")
        return Text(str(order), style="dim")

    @on(DataTable.RowHighlighted, "#ops")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(str(event.row_key.value))

    def _track_screen(self) -> None:
        """Note which rows are on screen now (and a screenful around), for the workers."""
        table = self.query_one("#ops", DataTable)
        keys = list(table.rows)
        height = max(table.size.height, 10)
        # around the cursor too: after a jump (f, G) the table scrolls to it only after a refresh
        top, cursor = int(table.scroll_y), table.cursor_row
        window = keys[max(min(top, cursor - height // 2), 0) : max(top + height, cursor + height // 2)]
        self._on_screen = frozenset(str(key.value) for key in window)

    def _show_detail(self, name: str | None) -> None:
        self._track_screen()
        node = self._pairs.get(name) if name else None
        self.query_one(TensorDetail).show(
            node, self.acc.comparison.engine, self._rows.get(name) if name else None
        )
        self.query_one(ErrorMapView).show(node, self.acc.comparison.engine)

    def update_summary(self) -> None:
        """Token, operators computed, failing ones, the scope and filter, ◆ the culprit (once known),
        the sort, and a warning when the order is not execution order."""
        done, total = len(self._rows), len(self._pairs)
        failed = sum(1 for r in self._rows.values() if failing(r) and r.get("label") != "contains")
        parts = [
            f"token {self.token}",
            f"{done}/{total} ops" if done < total else f"{total} ops",
            f"{failed} failing",
        ]
        if self._scope != self._tree.root:
            scope = self._rows.get(self._scope, {})
            inside = f" cos {fmt.cosine(scope['cosine_within'])}" if scope.get("tensors_within") else ""
            parts.append(f"in {fmt.display_name(self._scope)}{inside} (a: all)")
        if self._filter and not self.query_one("#ops", DataTable).row_count:
            parts.append(f"no operator matches {self._filter!r} (Esc clears)")
        elif self._filter:
            parts.append(f"filter {self._filter!r} (/, Esc clears)")
        if self._finished:  # before the rest, its name elided to fit: the line ends where the screen does
            parts.append(self._suspect_part(len(SEPARATOR.join(parts)) + len(SEPARATOR)))
        if sorted_by := self.sort_summary():
            parts.append(sorted_by)
        golden = self.acc.comparison.golden
        if not golden.order_is_execution:  # "first failing" means first in the order shown: say which
            parts.append(f"⚠ order: {golden.order_source.split(' (')[0]}, not execution")
        self.query_one("#summary", Static).update(SEPARATOR.join(parts))

    def _suspect_part(self, start: int) -> str:
        """◆ and the culprit's name, elided in the middle to end within the summary line (which
        begins ``start`` cells before it): at 80 columns it is not pushed off by a filter or a scope."""
        if not self._suspect:
            return no_culprit()
        summary = self.query_one("#summary", Static)
        width = summary.content_size.width or self.app.size.width - 2
        name = fmt.display_name(self._suspect)
        return f"◆ {fmt.elide_middle(name, max(width - start - len('◆  (f)'), 16))} (f)"

    # --- actions ------------------------------------------------------------------------------

    @on(LayerTree.LayerSelected)
    def _scope_to(self, event: LayerTree.LayerSelected) -> None:
        self._set_scope(event.name)
        self.query_one("#ops", DataTable).focus()

    def _set_scope(self, name: str) -> None:
        if name == self._scope:
            return
        self._scope = name
        self.fill_table()
        self.update_summary()
        self._show_detail(self.cursor_key())

    def action_scope_all(self) -> None:
        """``a``: every operator of the token again (leave the layer scope)."""
        self._set_scope(self._tree.root)

    def action_toggle_tree(self) -> None:
        """Give the table the whole width (useful at 80 columns) or bring the tree back."""
        tree = self.query_one(LayerTree)
        tree.display = not tree.display
        self.call_after_refresh(self._fit_columns)  # the table's width changed: so does the room
        if not tree.display:
            self.query_one("#ops", DataTable).focus()

    def action_error_map(self) -> None:
        """``m``: the detail panel pictures where a tensor's error sits, or shows the numbers again."""
        picture = self.query_one(ErrorMapView)
        picture.display = not picture.display
        self.query_one(TensorDetail).display = not picture.display  # at 80x24 there is room for one
        self._show_detail(self.cursor_key())

    def action_error_map_step(self, by: int) -> None:
        """``]`` / ``[``: the picture of the operator's next or previous tensor."""
        self.query_one(ErrorMapView).step(by)

    def action_back(self) -> None:
        """Esc: clear the filter if there is one, else back to the token list."""
        box = self.query_one("#filter", Input)
        if box.display or self._filter:  # Esc clears the filter first, then leaves the token
            self._set_filter("")
            return
        self.action_leave()

    def action_leave(self) -> None:
        """Back to the token list; the token reopens as it is now (filter included)."""
        self.acc.operator_views[self.token] = self._view()
        self.app.pop_screen()

    def _view(self) -> OperatorView:
        tree = self.query_one(LayerTree)
        return OperatorView(
            self._filter, self._scope, self.cursor_key(), tree.expanded_names(), tree.display, self.sort
        )

    def _restore(self, view: OperatorView) -> None:
        """The token as the user left it: filter, scope, order, tree, cursor."""
        self._filter, self.sort = view.filter, view.sort
        if view.scope in self._tree.nodes:  # a container (layers) can be a scope too
            self._scope = view.scope
        tree = self.query_one(LayerTree)
        tree.expand_only(view.expanded)
        tree.display = view.tree_shown
        if self._select is None:
            self._select = view.cursor

    def action_cursor(self, direction: str) -> None:
        """``j`` / ``k``: the cursor one row down / up in the focused table or tree."""
        focused = self.focused
        if isinstance(focused, (DataTable, LayerTree)):
            focused.action_cursor_down() if direction == "down" else focused.action_cursor_up()

    def action_first_failure(self) -> None:
        """``f``: ◆, the first operator whose inputs pass and output fails (scope and filter cleared where
        they hide it); while the token is computing, it jumps once that is known."""
        if not self._finished:  # jump when they are known
            self._jump_pending = True
            self.set_status("finding the first failing operator… (any key cancels)")
            return
        if self._suspect is None:
            self.notify("No operator fails while its inputs pass at this token.")
            return
        tree = self._tree
        if self._scope != self._suspect and not tree.is_ancestor(self._scope, self._suspect):
            self._set_scope(tree.root)
        if self._suspect not in self._in_scope():
            self._set_filter("")  # the filter hid it: show everything again
        table = self.query_one("#ops", DataTable)
        row = table.get_row_index(self._suspect)
        table.move_cursor(row=row, scroll=False)
        # in the middle, whatever was scrolled before: the operators that fed it stay in sight above
        table.scroll_to(y=max(0, row - table.scrollable_content_region.height // 2), animate=False)
        table.focus()
        self.query_one(LayerTree).reveal(self._suspect)

    # --- replay -------------------------------------------------------------------------------

    def action_replay(self) -> None:
        """``p``: recompute the operator under the cursor from its own dumped inputs, on each side."""
        name = self.cursor_key()
        if name is None:
            self.notify("No operator under the cursor to replay.")
            return
        self.set_status(f"replaying {fmt.display_name(name)} from its dumped inputs…")
        self.replay_operator(name)

    @work(thread=True, exclusive=True, group="replay", exit_on_error=False, name="replay")
    def replay_operator(self, name: str) -> None:
        """Tensors are read and recomputed here, off the event loop; so is tui-acc.toml ([replay])."""
        from tui_acc.config import ConfigError, load_config
        from tui_acc.replay.registry import Registry, RegistryError
        from tui_acc.verdicts.replay_check import UnknownNode, replay_node

        config_file = self.acc.config_file
        try:
            config = load_config(config_file if config_file.is_file() else None)
            registry = Registry.from_config(config.sections.get("replay"), config.source)
            replay = replay_node(self.acc.comparison, self.token, name, registry)
        except (ConfigError, RegistryError, UnknownNode) as exc:
            self.post_message(self.ReplayFinished(name, None, str(exc)))
            return
        self.post_message(self.ReplayFinished(name, replay))

    @on(ReplayFinished)
    def _show_replay(self, message: ReplayFinished) -> None:
        if message.replay is None:
            self.set_status(f"replay: {message.problem}", error=True)
            return
        self.set_status(f"replay of {fmt.display_name(message.name)}: {message.replay.reading}")
        self.app.push_screen(ReplayScreen(message.replay))

    def view_frame(self) -> pl.DataFrame:
        """The rows in scope and through the filter, in the table's order: names, types, verdicts, whether it
        is ◆, and every figure (noise figures with a baseline; anomalies for one dump on its own)."""
        names = self._in_scope()
        comparison = self.acc.comparison
        return operator_frame(
            self.token,
            [(self._order[n], self._pairs[n], self._rows.get(n, {}), n == self._suspect) for n in names],
            with_noise=comparison.baseline is not None,
            single=comparison.single,
        )

    def redump_target(self) -> tuple[int, str | None]:
        """This token, from the operator under the cursor down (None: the table is empty, every operator)."""
        return self.token, self.cursor_key()

    def export_stem(self) -> str:
        """``tui-acc-token{N}-ops``, with the layer in scope appended when there is one."""
        scope = "" if self._scope == self._tree.root else f"-{self._scope}"
        return f"tui-acc-token{self.token}-ops{scope}"
