"""One token's operators: the layer tree on the left, the metric table on the right, the detail
under them. The screen lays them out, receives the rows from its worker and composes the features
beside it: filter and sort, replay, the detail panel and its error picture, the jump to ◆, the
summary line (each a module of this package)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Header, Input, Static
from textual.worker import get_current_worker

from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operator_table import FIXED, operator_frame
from tui_acc.tui.screens.operators.cells import OperatorCells, columns_for
from tui_acc.tui.screens.operators.detail import DetailPanel
from tui_acc.tui.screens.operators.filter_sort import FilterSort
from tui_acc.tui.screens.operators.jump import WAITING, JumpToCulprit
from tui_acc.tui.screens.operators.replay import ReplayKey
from tui_acc.tui.screens.operators.summary import SummaryLine
from tui_acc.tui.screens.operators.verdict_view import VerdictView
from tui_acc.tui.screens.view_state import OperatorView
from tui_acc.tui.widgets.error_map import ErrorMapView
from tui_acc.tui.widgets.key_footer import KeyFooter
from tui_acc.tui.widgets.layer_tree import LayerTree
from tui_acc.tui.widgets.metric_table import MetricTable
from tui_acc.tui.widgets.tensor_detail import TensorPanel

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.verdicts.verdict import TokenVerdict

# The engine's modules (polars, numpy) are imported where they are used: the token list, which
# imports this screen, is on screen before them.


class OperatorScreen(FilterSort, ReplayKey, DetailPanel, JumpToCulprit, SummaryLine):
    """Which operator is the first whose inputs match the golden but whose output does not?"""

    # Every key of the screen, here: their order is the footer's (the features' modules hold the actions).
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
        Binding("d", "detail", "Detail", show=False, id="detail"),
        Binding("j", "cursor('down')", "Down", show=False, id="down"),
        Binding("k", "cursor('up')", "Up", show=False, id="up"),
    ]

    class NodeComputed(Message):
        """One operator's metrics arrived from the worker."""

        def __init__(self, row: Row) -> None:
            super().__init__()
            self.row = row

    class TokenFinished(Message):
        """Every operator of the token is computed and judged: the token's verdict."""

        def __init__(self, verdict: TokenVerdict) -> None:
            super().__init__()
            self.verdict = verdict

    def __init__(self, token: int, *, select: str | None = None, at_first_failure: bool = False) -> None:
        super().__init__()
        self.token = token
        self._select = select  # a golden operator to put the cursor on (reopening after a re-dump)
        # f from the token list: the cursor goes to ◆ as soon as the token's operators are judged
        self._jump_pending = at_first_failure
        self._pairs: dict[str, NodePair] = {}
        self._order: dict[str, int] = {}
        self._rows: dict[str, Row] = {}

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        """The header, the summary line, the layer tree beside the operator table (columns chosen for
        the pair: statistics only, one dump, a baseline, differing test names), the tensor detail or
        error picture, the filter box, the re-dump and status lines, and the footer."""
        cmp = self.acc.comparison
        self._pairs = {node.golden: node for node in cmp.pairing.node_pairs(self.token)}
        self._order = {name: i for i, name in enumerate(self._pairs)}
        self._tree = self._reading_tree()
        self._labels = self._qualified_labels()
        self.verdicts = VerdictView(cmp.golden.tree, self._rows, self._pairs)
        columns = columns_for(cmp, self._pairs)
        self.cells = OperatorCells(
            columns, self._pairs, self._labels, self._rows, self.verdicts, cmp.test.origins
        )
        self.table_columns = columns
        self.set_reactive(OperatorScreen.scope, self._tree.root)
        yield Header()
        yield Static(id="summary")
        with Horizontal(id="main"):
            partners = {name: node.test for name, node in self._pairs.items()}
            yield LayerTree(self._tree, set(self._pairs), partners, id="layers")
            yield MetricTable(id="ops", cursor_type="row", zebra_stripes=True)
        yield TensorPanel(id="detail-panel", detail_id="detail")
        yield ErrorMapView(id="error-map")
        yield Input(placeholder="filter by name or type; Enter applies, Esc clears", id="filter")
        yield Static(id="redump-bar")
        if (nodes_said := self.acc.nodes_said) is not None:  # a Ray run: each node's ranks, state, rows
            yield Static(Text(nodes_said()), id="nodes-bar")
        yield Static(id="status")
        yield KeyFooter(compact=True)  # every key that matters fits in 80 columns

    def on_mount(self) -> None:
        """Show the rows already in memory and the view as the user left this token, then start the
        operators' worker."""
        table = self.ops_table()
        for key, label, width in self.table_columns:
            table.add_column(label, key=key, width=width)
        table.fixed_columns = FIXED  # which row and its verdicts stay in view while → scrolls
        tree = self.query_one(LayerTree)
        known = self.acc.comparison.verdicts.known(self.token)  # memory only: the worker reads the disk
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
            self.set_status(WAITING)
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
        """Refit the text columns to the new width (the summary refits itself)."""
        self.call_after_refresh(self._fit_columns)

    def _fit_columns(self) -> None:
        self.cells.fit(self.ops_table())

    def fill_table(self) -> None:
        """Rebuild the rows in scope and through the filter, in the current order, and refit the columns."""
        table = self.ops_table()
        table.clear()
        for name in self.in_scope():
            table.add_row(*self.cells.row(name), key=name)
        self.track_screen()
        # fewer rows may drop the scrollbar (or more bring it): the room is measured once drawn
        self.call_after_refresh(self._fit_columns)

    # --- computing ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="operators", exit_on_error=False, name="operator metrics")
    def compute_operators(self) -> None:
        """Worker thread: the token's operator rows from the judge, those on screen first, posted one at a
        time (``NodeComputed``), then its verdict (``TokenFinished``); a cancelled worker stops between
        operators."""
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
        table = self.ops_table()
        if name in table.rows:
            for (column, _, _), cell in zip(self.table_columns, self.cells.row(name), strict=True):
                table.update_cell(name, column, cell)
        self.update_summary()
        if self.cursor_key() == name:
            self.show_detail(name)

    @on(TokenFinished)
    def _finished_token(self, message: TokenFinished) -> None:
        self._finished = True
        self._take_verdict(message.verdict)
        if self.sort.column is not None:  # rows sorted while computing took their place then: settle them
            self.apply_sort(self.sort)
        culprit = self.verdicts.settle(message.verdict)
        if culprit and culprit in self.ops_table().rows:
            self.ops_table().update_cell(culprit, "order", self.cells.order_cell(culprit))
        self.update_summary()
        self.show_detail(self.cursor_key())
        self.jump_if_pending()

    def open_at_culprit(self, token: int) -> None:
        """Replace this screen with ``token``'s operators, at its culprit once judged (Esc goes back
        to the token list, as from here)."""
        self.app.switch_screen(OperatorScreen(token, at_first_failure=True))

    def _take_verdict(self, verdict: TokenVerdict) -> None:
        """Every row as the token's verdict has it (the rows posted on the way agree; this makes the
        screen read the one result the report reads)."""
        table, tree = self.ops_table(), self.query_one(LayerTree)
        for row in verdict.rows:
            name = row["golden_node"]
            if self._rows.get(name) == row:
                continue
            self._rows[name] = row
            tree.set_row(row)
            if name in table.rows:
                for (column, _, _), cell in zip(self.table_columns, self.cells.row(name), strict=True):
                    table.update_cell(name, column, cell)

    # --- the tree and its scope -----------------------------------------------------------------

    @on(LayerTree.LayerSelected)
    def _scope_to(self, event: LayerTree.LayerSelected) -> None:
        self.scope = event.name
        self.ops_table().focus()

    def action_scope_all(self) -> None:
        """``a``: every operator of the token again (leave the layer scope)."""
        self.scope = self._tree.root

    def action_toggle_tree(self) -> None:
        """Give the table the whole width (useful at 80 columns) or bring the tree back."""
        tree = self.query_one(LayerTree)
        tree.display = not tree.display
        self.call_after_refresh(self._fit_columns)  # the table's width changed: so does the room
        if not tree.display:
            self.ops_table().focus()

    def action_cursor(self, direction: str) -> None:
        """``j`` / ``k``: the cursor one row down / up in the focused table or tree (the operator table
        from the detail panel: its arrows scroll it)."""
        focused = self.focused
        if isinstance(focused, TensorPanel):
            focused = self.ops_table()
        if isinstance(focused, (DataTable, LayerTree)):
            focused.action_cursor_down() if direction == "down" else focused.action_cursor_up()

    # --- leaving --------------------------------------------------------------------------------

    def action_back(self) -> None:
        """Esc: give the table its room back if the detail has it, else clear the filter if there is
        one, else back to the token list."""
        if self.detail_zoomed:
            self.detail_zoomed = False
            return
        if self.filter_box().display or self.filter_text:  # Esc clears the filter first
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
            self.filter_text, self.scope, self.cursor_key(), tree.expanded_names(), tree.display, self.sort
        )

    def _restore(self, view: OperatorView) -> None:
        """The token as the user left it: filter, scope, order, tree, cursor (the table is filled after)."""
        self.set_reactive(OperatorScreen.filter_text, view.filter)
        self.sort = view.sort
        if view.scope in self._tree.nodes:  # a container (layers) can be a scope too
            self.set_reactive(OperatorScreen.scope, view.scope)
        tree = self.query_one(LayerTree)
        tree.expand_only(view.expanded)
        tree.display = view.tree_shown
        if self._select is None:
            self._select = view.cursor

    # --- the main table, for TableScreen and ViewScreen -------------------------------------------

    def main_table(self) -> DataTable[object]:
        """The operator table."""
        return self.ops_table()

    def is_failing(self, key: str) -> bool:
        """Whether operator ``key`` fails where the failure shows (not a module failing only by a child,
        ``c``)."""
        return self.verdicts.is_failing(key)

    def view_frame(self) -> pl.DataFrame:
        """The rows in scope and through the filter, in the table's order: names, types, verdicts, whether it
        is ◆, and every figure (noise figures with a baseline; anomalies for one dump on its own)."""
        comparison = self.acc.comparison
        rows = [
            (self._order[n], self._pairs[n], self._rows.get(n, {}), self.verdicts.is_culprit(n))
            for n in self.in_scope()
        ]
        return operator_frame(
            self.token, rows, with_noise=comparison.baseline is not None, single=comparison.single
        )

    def redump_target(self) -> tuple[int, str | None]:
        """This token, from the operator under the cursor down (None: the table is empty, every operator)."""
        return self.token, self.cursor_key()

    def export_stem(self) -> str:
        """``tui-acc-token{N}-ops``, with the layer in scope appended when there is one."""
        scope = "" if self.scope == self._tree.root else f"-{self.scope}"
        return f"tui-acc-token{self.token}-ops{scope}"
