"""The first screen: every generated token, coloured by its logits verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import get_current_worker

from tui_acc.rows import NOISE_FIELDS, Row
from tui_acc.sides import Swapped, less_precise, swapped_sides
from tui_acc.tui import formatting as fmt
from tui_acc.tui.bounds import number, run_floor, strip_bound
from tui_acc.tui.screens.base import ViewScreen
from tui_acc.tui.screens.operators import OperatorScreen
from tui_acc.tui.title import shown_path
from tui_acc.tui.token_tally import TokenTally
from tui_acc.tui.widgets.metric_table import MetricTable
from tui_acc.tui.widgets.threshold_strip import ThresholdStrip

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.metrics.schema import PolarsType

COLUMNS = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("cosine", "Cosine", 9),
    ("kl", "KL", 9),
    ("max_abs_err", "MaxAbsErr", 9),
    ("top1", "Top-1 g/t", 11),
    ("shape", "Logits shape", 14),
)
SINGLE_FIELDS = ("anomalies", "first_anomaly", "anomaly")
# The exported token table (``view_frame``): column -> the TokenRow field it shows (and is typed as)
_EXPORTED = {
    "token": "token",
    "verdict": "verdict",  # pending until computed
    "cosine": "cosine",
    "kl": "kl",
    "max_abs_err": "max_abs_err",
    "golden_top1": "golden_top1",
    "test_top1": "test_top1",
    "logits_shape": "shape",
    "stats_only": "stats_only",
    "norm_rel_diff": "norm_rel_diff",
    "max_diff": "max_diff",
    "mean_diff": "mean_diff",
    "error": "error",
}
# One dump checked on its own (tui-acc DUMP): where an anomaly starts, not how far from a golden
SINGLE_COLUMNS = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("anomalies", "Starts", 6),
    ("anomaly", "Kind", 8),
    ("first_anomaly", "First anomalous operator", 40),
)
# When a side holds statistics only, cosine and KL cannot be had: the L2 norms and stats are compared.
STATS_COLUMNS = (
    ("token", "Token", 6),
    ("passed", "Verdict", 7),
    ("norm_rel_diff", "NormRel", 9),
    ("max_diff", "MaxDiff", 10),
    ("mean_diff", "MeanDiff", 10),
    ("shape", "Logits shape", 14),
)

_VERDICT_RANK = {"fail": 0, "error": 1, "near-tie": 2, "pass": 3}


class TokenScreen(ViewScreen):
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
        yield Static(id="status")
        yield Footer(compact=True)  # every key that matters fits in 80 columns

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
        self.table_columns = self._choose_columns()
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
        # the engine's modules (polars, numpy) are imported here, after the first frame
        from tui_acc.metrics.engine import Cancelled

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
        for (column, _, _), cell in zip(self.table_columns, self._cells(message.row), strict=True):
            table.update_cell(key, column, cell)
        if self.tally.add(message.row):
            self.update_summary()
            self._update_strip()
        if not self._sides_known:
            self._check_sides(message.row)
        if self._jump_pending:
            self._jump_when_known()

    @on(TokensFinished)
    def _select_first_failure(self) -> None:
        """Start where the user would go first: the first failing token (unless they moved already)."""
        if self.sort.column is not None:  # sorted while computing: settle the order now
            self.apply_sort(self.sort)
        self._all_compared = True
        if self._jump_pending:
            self._jump_when_known()
        elif self.query_one("#tokens", DataTable).cursor_row == 0:
            self.action_first_failure(quiet=True)
        failing = self.tally.first_failing()
        if failing is not None and isinstance(self.app.screen, TokenScreen):
            self.prefetch_operators(failing)

    _sides_known = False  # whether a row has told which side's logits are the more precise

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
            cached = self.tally.get(int(key))
            table.add_row(*self._cells(cached or {"token": int(key)}, pending=cached is None), key=key)

    def sort_value(self, key: str, column: str) -> object:
        """The token number, its verdict's rank (fail first), a flipped top-1 first, else the row's metric."""
        row = self.tally.get(int(key)) or {}
        if column == "token":
            return int(key)
        if column == "passed":
            return _VERDICT_RANK.get(row.get("verdict") or "")
        if column == "top1":  # the flipped ones first
            return None if row.get("golden_top1") is None else row["golden_top1"] == row["test_top1"]
        return row.get(column)

    def _update_strip(self) -> None:
        """KL (or, from statistics, NormRel) of every token against its threshold: ▅ and up is over."""
        tally = self.tally
        bound = number(tally.strip_bound) if tally.strip_bound else "…" if not tally.compared else "?"
        self.query_one("#strip-label", Static).update(f"{tally.strip_metric} / threshold {bound} ")
        self.query_one("#kl-strip", ThresholdStrip).show(tally.levels, tally.failed)

    def _choose_columns(self) -> tuple[tuple[str, str, int], ...]:
        cmp = self.acc.comparison
        columns: tuple[tuple[str, str, int], ...] = (
            STATS_COLUMNS if cmp.golden.statistics_only or cmp.test.statistics_only else COLUMNS
        )
        if cmp.single:
            return SINGLE_COLUMNS
        first = next((p for t in cmp.pairing.tokens if (p := cmp.pairing.logits_pair(t)) is not None), None)
        if cmp.baseline is not None:  # the logits' error over the baseline's: what the verdict weighs
            at = next(i for i, (key, _, _) in enumerate(columns) if key in ("kl", "norm_rel_diff"))
            columns = (*columns[: at + 1], ("noise_ratio", "×noise", 8), *columns[at + 1 :])
        if first is not None and first.golden_node != first.test_node:
            columns = (*columns, ("test_node", "Test logits", 22))  # e.g. 14_LmHead beside root.lm_head
        return columns

    def _cells(self, row: Row, pending: bool = False) -> list[Text | str]:
        passed = row.get("passed")
        top1: Text | str = "-"
        if row.get("golden_top1") is not None:
            same = row["golden_top1"] == row["test_top1"]
            top1 = fmt.failing(f"{row['golden_top1']}/{row['test_top1']}", not same)
        cells: dict[str, Text | str] = {
            "token": fmt.styled(str(row["token"]), None if pending else passed),
            "passed": fmt.token_verdict(row.get("verdict"), pending),
            "cosine": fmt.figure(fmt.cosine(row.get("cosine")), passed),
            "kl": fmt.figure(fmt.num(row.get("kl")), passed),
            "max_abs_err": fmt.figure(fmt.num(row.get("max_abs_err"))),
            "norm_rel_diff": fmt.figure(fmt.num(row.get("norm_rel_diff")), passed),
            "max_diff": fmt.figure(fmt.num(row.get("max_diff"))),
            "mean_diff": fmt.figure(fmt.num(row.get("mean_diff"))),
            "noise_ratio": fmt.figure(fmt.ratio(row.get("noise_ratio")), passed),
            "anomalies": fmt.figure(
                str(row["anomalies"]) if row.get("anomalies") is not None else "-", passed
            ),
            "anomaly": fmt.failing(row.get("anomaly") or "-", bool(row.get("anomaly"))),
            "first_anomaly": row.get("first_anomaly") or "-",
            "top1": top1,
            "shape": row.get("shape") or "-",
            "test_node": row.get("test_node") or "",
        }
        return [cells[key] for key, _, _ in self.table_columns]

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

    def action_first_failure(self, quiet: bool = False) -> None:
        """Start-up: the cursor goes to the first failing token (``quiet``: nothing said if none)."""
        failing = self.tally.first_failing()
        if failing is None and quiet:
            return
        if failing is None:
            self.notify(
                "No failing token (yet)."
                if self.tally.compared < len(self.tally.tokens)
                else "Every token passes."
            )
            return
        table = self.query_one("#tokens", DataTable)
        table.move_cursor(row=table.get_row_index(str(failing)))

    # --- f: from launch to the culprit in one key -------------------------------------------------

    _jump_pending = False  # f pressed before the first failing token was known
    _passing_prefix = 0  # how many tokens from the first are known to pass (only grows: no rescans)
    _all_compared = False

    def action_open_first_failure(self) -> None:
        """``f``: open the first failing token at its first failing operator; while the tokens before
        it are still being compared, wait for them (any key cancels the wait)."""
        self._jump_pending = True
        self._jump_when_known()

    def _settled_first_failure(self) -> int | None:
        """The first failing token once every token before it is compared (``None``: none fails, or
        not known yet: ``_all_compared`` tells which)."""
        tokens = self.tally.tokens
        while self._passing_prefix < len(tokens):
            row = self.tally.get(tokens[self._passing_prefix])
            if row is None and not self._all_compared:
                return None  # not compared yet
            if row is not None and row["passed"] is False:
                return tokens[self._passing_prefix]
            self._passing_prefix += 1  # passes, or has no logits to judge
        return None

    def _jump_when_known(self) -> None:
        found = self._settled_first_failure()
        if found is None and not self._all_compared and self._passing_prefix < len(self.tally.tokens):
            tally = self.tally
            self.set_status(
                f"finding the first failing token… {tally.compared}/{len(tally.tokens)} (any key cancels)"
            )
            return
        self._jump_pending = False
        if found is None:
            self.set_status("")
            self.notify("Every token passes.")
            return
        self.set_status("")
        table = self.query_one("#tokens", DataTable)
        table.move_cursor(row=table.get_row_index(str(found)))
        self._open(found, at_first_failure=True)

    def on_key(self) -> None:
        """Any key while ``f`` waits for the tokens cancels the jump (and still does what it does)."""
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("jump to the first failure cancelled")

    @on(DataTable.RowSelected, "#tokens")
    def _open_token(self, event: DataTable.RowSelected) -> None:
        # The operator screen computes the token it opens itself, what is on screen first; what
        # the prefetch finished is kept, the rest of it would only compete for the cores.
        self._open(int(str(event.row_key.value)))

    def _open(self, token: int, at_first_failure: bool = False) -> None:
        self.workers.cancel_group(self, "prefetch")
        self.app.push_screen(OperatorScreen(token, at_first_failure=at_first_failure))

    def view_frame(self) -> pl.DataFrame:
        """The tokens in the table's order: their metrics and verdict word (noise figures with a baseline;
        for one dump on its own, the anomaly it starts with)."""
        import polars as pl

        with_noise = self.acc.comparison.baseline is not None
        single = self.acc.comparison.single
        rows = []
        for key in self.main_table().rows:  # as shown: in the table's order
            token = int(str(key.value))
            row = self.tally.get(token) or {"token": token}
            rows.append(
                {column: row.get(field) for column, field in _EXPORTED.items()}
                | {"token": token, "verdict": _verdict_word(row)}
                | {key: row.get(key) for key in NOISE_FIELDS if with_noise}
                | {key: row.get(key) for key in SINGLE_FIELDS if single}
            )
        return pl.DataFrame(rows, schema=_token_export_schema(with_noise, single))

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


def _token_export_schema(with_noise: bool = False, single: bool = False) -> dict[str, PolarsType]:
    """The exported token table's columns, each typed as the row field it shows (``TokenRow``, by
    ``schema.py``); with a baseline, its noise figures at the end; for one dump checked on its own,
    where each token's first anomaly starts."""
    from tui_acc.metrics.schema import TOKEN_SCHEMA

    extra = (*(NOISE_FIELDS if with_noise else ()), *(SINGLE_FIELDS if single else ()))
    return {column: TOKEN_SCHEMA[field] for column, field in _EXPORTED.items()} | {
        field: TOKEN_SCHEMA[field] for field in extra
    }


def _verdict_word(row: Row) -> str:
    return str(row.get("verdict") or "pending")
