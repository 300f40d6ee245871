"""The first screen: every generated token, coloured by its logits verdict. The first frame lists the
rows that fit; the workers start once it is drawn."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Header, Static
from textual.worker import get_current_worker

from tui_acc.rows import Row
from tui_acc.sides import Swapped, less_precise, swapped_sides
from tui_acc.tui.bounds import number, run_floor, strip_bound
from tui_acc.tui.screens.tokens.columns import (
    TEST_LOGITS_COLUMN,
    columns_for,
    names_logits_apart,
    token_cells,
    token_frame,
    token_sort_value,
)
from tui_acc.tui.screens.tokens.sweep import OperatorSweep
from tui_acc.tui.title import shown_path
from tui_acc.tui.token_tally import TokenTally
from tui_acc.tui.widgets.key_footer import KeyFooter
from tui_acc.tui.widgets.metric_table import MetricTable
from tui_acc.tui.widgets.threshold_strip import ThresholdStrip

if TYPE_CHECKING:
    import polars as pl


class TokenScreen(OperatorSweep):
    """Token list: which generated token is the first whose logits diverge?"""

    BINDINGS = [
        Binding("f", "open_first_failure", "First fail", id="first_failing_token"),
        Binding("j", "cursor('down')", "Down", show=False, id="down"),
        Binding("k", "cursor('up')", "Up", show=False, id="up"),
    ]

    class TokenComputed(Message):
        """A token's logits metrics arrived from the worker."""

        def __init__(self, row: Row) -> None:
            super().__init__()
            self.row = row

    class TokensFinished(Message):
        """Every token's logits are compared."""

    class ShownAgain(Message):
        """The token list is on screen again (the screen above it closed)."""

    def on_screen_resume(self) -> None:
        """Back on top: said to the app (which freezes the heap once the list is shown, complete)."""
        self.post_message(self.ShownAgain())

    def compose(self) -> ComposeResult:
        """The header, the summary line, the KL strip (a bar a token), the token table, the re-dump and
        status lines, and the footer."""
        yield Header()
        yield Static(id="swapped")  # shown only when the golden is the less precise side
        yield Static(id="summary")
        with Horizontal(id="strip"):
            yield Static("KL / threshold ", id="strip-label")
            yield ThresholdStrip(id="kl-strip")
        yield MetricTable(id="tokens", cursor_type="row", zebra_stripes=True)
        yield Static(id="redump-bar")
        if (nodes_said := self.acc.nodes_said) is not None:  # a Ray run: each node's ranks, state, rows
            yield Static(Text(nodes_said()), id="nodes-bar")
        yield Static(id="status")
        yield KeyFooter(compact=True)  # every key that matters fits in 80 columns

    def on_mount(self) -> None:
        """List every token at once (pending until its row arrives) and start the token worker after the
        first frame."""
        # the rows the worker sends, kept here: the engine is never asked on the event loop
        cmp = self.acc.comparison
        thresholds, floor = cmp.thresholds, run_floor(cmp)  # the engine is built by the worker
        self.tally = TokenTally(cmp.pairing.tokens, lambda row: strip_bound(row, thresholds, floor))
        # until a row says which dtypes its logits have: the run's least precise
        stats_only = cmp.golden.statistics_only or cmp.test.statistics_only
        guess = {"stats_only": stats_only, "golden_dtype": floor, "test_dtype": floor}
        self.tally.strip_metric, self.tally.strip_bound = strip_bound(guess, thresholds, floor)
        if floor is None and not stats_only:  # .pth dumps: the dtype is known once a token is read;
            self.tally.strip_bound = None  # until then no bound, rather than float32's (1e-5, then 5e-3)
        self.swept = {}
        self.table_columns = columns_for(cmp, self.sweeps_every_token)
        table = self.query_one("#tokens", DataTable)
        for key, label, width in self.table_columns:
            table.add_column(label, key=key, width=width)
        table.fixed_columns = 2  # the token and its verdict stay while → scrolls the rest
        # The first frame lists the rows a screen can show; the rest follow right after it. DataTable
        # measures every cell of every row before it draws (781 tokens: about 0.1 s of CPU).
        self.fill_table(first=self.app.size.height)
        self.update_summary()
        # one cell per token (up to the screen's width): a bar is a token
        self.query_one("#kl-strip", ThresholdStrip).styles.width = max(
            1, min(len(self.acc.comparison.pairing.tokens), 200)
        )
        self._update_strip()
        # one dump on its own: no logits against a golden, so no KL to plot
        self.query_one("#strip").display = not cmp.single
        table.focus()
        # The app's, not the screen's: the screen's own runs before its first frame reaches the
        # terminal (the app is still mounting it), the app's once the frame is drawn
        self.app.call_after_refresh(self._after_first_frame)

    def _after_first_frame(self) -> None:
        from tui_acc.metrics.kernel_loading import start_loading

        self._list_the_rest()
        # after the first paint: the workers compete for the GIL, and the list should show first
        start_loading()  # the compiled kernel (numba), while the token worker imports the engine
        self.compute_tokens()

    @work(thread=True, exclusive=True, group="tokens", exit_on_error=False, name="token metrics")
    def compute_tokens(self) -> None:
        """Worker thread: each token's logits metrics from the engine, posted to the screen one row at a time
        (``TokenComputed``, then ``TokensFinished``); a cancelled worker stops between tokens."""
        # the engine's modules (polars, numpy) are imported here, after the first frame, and so is
        # the operator screen (Enter's): the token list's first frame does without both
        from tui_acc.metrics.engine import Cancelled

        importlib.import_module("tui_acc.tui.screens.operators")
        worker = get_current_worker()

        def publish(row: Row) -> None:
            self.post_message(self.TokenComputed(row))

        try:
            self.acc.comparison.engine.token_rows(should_stop=lambda: worker.is_cancelled, on_row=publish)
        except Cancelled:
            return
        self.post_message(self.TokensFinished())

    @work(thread=True, exclusive=True, group="prefetch", exit_on_error=False, name="prefetch")
    def prefetch_operators(self, token: int) -> None:
        """The user's next step is almost always Enter on the first failing token: start on it."""
        from tui_acc.metrics.engine import Cancelled

        worker = get_current_worker()
        try:
            self.acc.comparison.verdicts.token(token, should_stop=lambda: worker.is_cancelled)
        except Cancelled:
            return

    @on(TokenComputed)
    def _show_token(self, message: TokenComputed) -> None:
        """One token's row: its cells, the summary and the strip; nothing asked of the engine."""
        table = self.query_one("#tokens", DataTable)
        key = str(message.row["token"])
        self._name_test_logits(message.row)
        cells = token_cells(self.shown_row(message.row["token"]) or message.row, self.table_columns)
        for (column, _, _), cell in zip(self.table_columns, cells, strict=True):
            table.update_cell(key, column, cell)
        if self.tally.add(message.row):
            self.update_summary()
            self._update_strip()
        if not self._sides_known:
            self._check_sides(message.row)
        if self._jump_pending:
            self.jump_when_known()

    @on(TokensFinished)
    def _select_first_failure(self) -> None:
        """Start where the user would go first: the first failing token (unless they moved already)."""
        if self.sort.column is not None:  # sorted while computing: settle the order now
            self.apply_sort(self.sort)
        self._all_compared = True
        if self._jump_pending:
            self.jump_when_known()
        elif self.query_one("#tokens", DataTable).cursor_row == 0:
            self.action_first_failure(quiet=True)
        failing = self.tally.first_failing()
        if self.sweeps_every_token:  # every token's operators, in the background (--all-tokens)
            self.start_sweep()
        elif failing is not None and isinstance(self.app.screen, TokenScreen):
            self.prefetch_operators(failing)

    _sides_known = False  # whether a row has told which side's logits are the more precise

    def _name_test_logits(self, row: Row) -> None:
        """The test's logits node as a column, once a row shows it named otherwise than the golden's."""
        key, label, width = TEST_LOGITS_COLUMN
        if not names_logits_apart(row) or any(column == key for column, _, _ in self.table_columns):
            return
        self.table_columns = (*self.table_columns, TEST_LOGITS_COLUMN)
        table = self.query_one("#tokens", DataTable)
        table.add_column(label, key=key, width=width, default="")
        for shown in table.rows:
            known = self.shown_row(int(str(shown.value))) or {}
            table.update_cell(shown, key, known.get("test_node") or "")

    def _check_sides(self, row: Row) -> None:
        """The first row whose logits have floating types on both sides says whether the golden is
        the less precise: then golden and test were most likely given the wrong way round."""
        if less_precise(row.get("golden_dtype"), row.get("test_dtype")) is None:
            return
        self._sides_known = True
        swapped = swapped_sides([row])
        if swapped is None:
            return
        said = Swapped(swapped.golden_dtype, swapped.test_dtype, self.acc.swap_command)
        warning = self.query_one("#swapped", Static)
        warning.update(Text(f"⚠ {said.headline()} {said.how_to_swap()}", style="bold"))
        warning.display = True

    NATURAL_ORDER = "token order"

    # rows of the view not listed yet (fill_table's ``first``): appended by _list_the_rest
    _unlisted: list[str] = []

    def fill_table(self, first: int | None = None) -> None:
        """Every token's row, in the view's order; ``first``: only so many now, the rest when
        ``_list_the_rest`` is called (a key pressed in between acts on the rows listed)."""
        table = self.query_one("#tokens", DataTable)
        table.clear()
        keys = self.ordered([str(t) for t in self.acc.comparison.pairing.tokens])
        self._unlisted = keys[first:] if first is not None else []
        self._add_rows(keys[:first] if first is not None else keys)

    def _list_the_rest(self) -> None:
        unlisted, self._unlisted = self._unlisted, []
        self._add_rows(unlisted)

    def _add_rows(self, keys: list[str]) -> None:
        table = self.query_one("#tokens", DataTable)
        for key in keys:
            cached = self.shown_row(int(key))
            if cached:
                self._name_test_logits(cached)
            row = cached or {"token": int(key)}
            table.add_row(*token_cells(row, self.table_columns, pending=cached is None), key=key)

    def sort_value(self, key: str, column: str) -> object:
        """The token number, its verdict's rank (fail first), a flipped top-1 first, else the row's metric."""
        return token_sort_value(int(key), self.tally.get(int(key)) or {}, column)

    def _update_strip(self) -> None:
        """KL (or, from statistics, NormRel) of every token against its threshold: ▅ and up is over."""
        tally = self.tally
        bound = number(tally.strip_bound) if tally.strip_bound else "…" if not tally.compared else "?"
        self.query_one("#strip-label", Static).update(f"{tally.strip_metric} / threshold {bound} ")
        self.query_one("#kl-strip", ThresholdStrip).show(tally.levels, tally.failed)

    def update_summary(self) -> None:
        """``n/N tokens compared``, how many fail, the first failing one, the sort, the noise baseline and
        the unmatched count."""
        tally = self.tally
        total = len(tally.tokens)
        first_failing = tally.first_failing()
        # one dump on its own compares nothing: its tokens are checked
        done = "checked" if self.acc.comparison.single else "compared"
        parts = [f"{tally.compared}/{total} tokens {done}", f"{tally.failing} failing"]
        if not total:
            parts = ["no token is in both dumps"]
        elif first_failing is not None:
            parts.append(f"first failing: {first_failing} (f jumps, Enter opens)")
        elif tally.compared == total:
            parts.append("every token passes")
        if said := self.sweep_summary():
            parts.append(said)
        if sorted_by := self.sort_summary():
            parts.append(sorted_by)
        cmp = self.acc.comparison
        if cmp.baseline is not None:
            parts.append(f"judged against the noise of {shown_path(cmp.baseline.root, Path.cwd())}")
        issues = len(cmp.pairing.unmatched_found) + len(cmp.golden.problems) + len(cmp.test.problems)
        if issues:
            parts.append(f"⚠ {issues} unmatched/unreadable (u)")
        self.query_one("#summary", Static).update("  │  ".join(parts))

    def action_cursor(self, direction: str) -> None:
        """``j`` / ``k``: the cursor one token down / up."""
        table = self.query_one("#tokens", DataTable)
        table.action_cursor_down() if direction == "down" else table.action_cursor_up()

    def main_table(self) -> DataTable[object]:
        """The token table."""
        return self.query_one("#tokens", DataTable)

    def is_failing(self, key: str) -> bool:
        """Whether token ``key`` is compared and fails (a pending token does not)."""
        row = self.tally.get(int(key))
        return row is not None and row["passed"] is False

    @on(DataTable.RowSelected, "#tokens")
    def _open_token(self, event: DataTable.RowSelected) -> None:
        self.open_token(int(str(event.row_key.value)))

    def view_frame(self) -> pl.DataFrame:
        """The tokens in the table's order: their metrics and verdict word (noise figures with a baseline;
        for one dump on its own, the anomaly it starts with)."""
        rows = []
        for key in self.main_table().rows:  # as shown: in the table's order
            token = int(str(key.value))
            rows.append(self.shown_row(token) or {"token": token})
        cmp = self.acc.comparison
        with_locals = self.sweeps_every_token
        return token_frame(
            rows, with_noise=cmp.baseline is not None, single=cmp.single, with_locals=with_locals
        )

    def redump_target(self) -> tuple[int, str | None]:
        """The token under the cursor, every operator of it.

        Raises:
            LookupError: the table is empty.
        """
        key = self.cursor_key()
        if key is None:
            raise LookupError("no token to re-dump")
        return int(key), None

    def export_stem(self) -> str:
        """``tui-acc-tokens``."""
        return "tui-acc-tokens"
