"""What the operator screen's features share: the token's pairs and rows, the layer in scope and the
filter (reactive: setting either redraws the table once), and the hooks one feature offers another.

Each feature is a subclass of ``OperatorScreenBase`` in a module of its own; ``screen.py`` composes
them. Textual looks a message's handlers up along the class's MRO (``@on`` and ``on_*`` alike), so
each feature's handlers run in the composed screen; the keys are bound once, on the screen.
"""

from __future__ import annotations

from textual.app import App
from textual.reactive import var
from textual.widgets import Input

from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.rows import Row
from tui_acc.tui.screens.base import ViewScreen
from tui_acc.tui.screens.operators.cells import OperatorCells
from tui_acc.tui.screens.operators.verdict_view import VerdictView
from tui_acc.tui.widgets.metric_table import MetricTable

try:  # a private module of textual's (any textual 8 is allowed): where it moved, nothing to clear
    from textual._styles_cache import StylesCache
except ImportError:  # pragma: no cover
    StylesCache = None  # type: ignore[assignment,misc]


class OperatorScreenBase(ViewScreen):
    """One token's operators: the state its features read, and the redraw they share."""

    # The layer the table shows (the tree's root: every operator) and the filter's text. Set once
    # the screen is composed; each change redraws the table, the summary and the detail.
    scope: var[str] = var("", init=False)
    filter_text: var[str] = var("", init=False)

    token: int
    _pairs: dict[str, NodePair]  # golden name -> the pair, in execution order
    _order: dict[str, int]  # golden name -> its position in execution order
    _tree: NodeTree  # the tree the token is read by (scope, tree panel)
    _labels: dict[str, str]  # golden name -> the Operator column's text
    _rows: dict[str, Row]  # what the worker sent: the screen never computes
    _finished = False  # every operator of the token computed
    # The rows on screen, computed before the rest; replaced whole (the workers read it).
    _on_screen: frozenset[str] = frozenset()
    verdicts: VerdictView
    cells: OperatorCells

    def on_unmount(self) -> None:
        """Closed (back to the tokens): let go what textual keeps of the screen.

        What a closed screen leaves alive, Python's full collections walk every few seconds: 20 ms
        after a few visits to a token's operators, 240 ms after forty, and a key pressed then waited.
        textual's header watches the app's title and forgets a header whose screen is gone only when
        the title changes; textual's StylesCache.get_inner_outer is an lru_cache keyed by the
        instance (textual/_styles_cache.py), which kept every widget's drawn lines, up to 1024."""
        for title in (App.title, App.sub_title):  # set again as they are: each drops the watchers
            self.app.mutate_reactive(title)  # whose widget is gone (this screen's are by now)
        clear = getattr(getattr(StylesCache, "get_inner_outer", None), "cache_clear", None)
        if clear is not None:  # colours, made again at once
            clear()

    def watch_scope(self) -> None:
        """Another layer: its operators, from the top."""
        self.redraw()

    def watch_filter_text(self) -> None:
        """Another filter: the rows through it, the cursor kept on its operator where it still shows."""
        self.redraw(keep_cursor=True)

    def redraw(self, keep_cursor: bool = False) -> None:
        """Refill the table for the scope, filter and order, then the summary and the detail;
        ``keep_cursor``: on the operator it was on, if that is still in the table."""
        table = self.ops_table()
        current = self.cursor_key() if keep_cursor else None
        self.fill_table()
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current), animate=False)
        self.update_summary()
        self.show_detail(self.cursor_key())

    def ops_table(self) -> MetricTable:
        """The operator table."""
        return self.query_one("#ops", MetricTable)

    def track_screen(self) -> None:
        """Note which rows are on screen now (and a screenful around), for the workers."""
        table = self.ops_table()
        keys = list(table.rows)
        height = max(table.size.height, 10)
        # around the cursor too: after a jump (f, G) the table scrolls to it only after a refresh
        top, cursor = int(table.scroll_y), table.cursor_row
        window = keys[max(min(top, cursor - height // 2), 0) : max(top + height, cursor + height // 2)]
        self._on_screen = frozenset(str(key.value) for key in window)

    # --- hooks: each feature provides one ---------------------------------------------------------

    def in_scope(self) -> list[str]:
        """The rows the table shows: the scope's operators, filtered, in the chosen order (filter_sort)."""
        raise NotImplementedError

    def _set_filter(self, text: str) -> None:
        """Close the filter box and filter by ``text`` (filter_sort)."""
        raise NotImplementedError

    def open_at_culprit(self, token: int) -> None:
        """Replace this screen with ``token``'s operators, opened at its culprit (the screen's)."""
        raise NotImplementedError

    def show_detail(self, name: str | None) -> None:
        """Show operator ``name``'s tensors (or its error picture) under the table (detail)."""
        raise NotImplementedError

    def filter_box(self) -> Input:
        """The filter's input box, under the table."""
        return self.query_one("#filter", Input)
