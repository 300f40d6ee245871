"""Every token's operators judged in turn, for a fault whose logits stay within their bounds.

A fault can leave every token's logits passing (an error too small to move them past KL and cosine)
while an operator's error is plainly its own. Where no token's logits fail, ``f`` goes on to the
operators: each token is judged in turn (progress on the status line, any key cancels) and the
first with a local operator opens at it (◆), or the status says that none is. ``--all-tokens`` at
start-up does the same for every token in the background once the logits are compared, as
``report --all-tokens`` does, and the token list shows each token's local operators.
"""

from __future__ import annotations

from textual import on, work
from textual.message import Message
from textual.worker import get_current_worker

from tui_acc.rows import Row
from tui_acc.tui.screens.tokens.columns import LOCAL_COLUMN, token_cells
from tui_acc.tui.screens.tokens.jump import FirstFailingToken

WAITING = "no token's logits fail: judging each token's operators for an error of its own…"


class OperatorSweep(FirstFailingToken):
    """The sweep (a feature of ``TokenScreen``)."""

    class TokenSwept(Message):
        """A token's operators are judged: how many are local, and the culprit (◆)."""

        def __init__(self, token: int, local: int, culprit: str | None) -> None:
            super().__init__()
            self.token = token
            self.local = local
            self.culprit = culprit

    class SweepEnded(Message):
        """The sweep judged every token (or stopped at the culprit ``f`` wanted)."""

    # token -> (its local operators, its culprit), as the sweep finds them
    swept: dict[int, tuple[int, str | None]]
    _sweep_for_jump = False  # f waits on the sweep: open the first token with a culprit
    _sweep_running = False
    _sweep_ended = False

    @property
    def sweeps_every_token(self) -> bool:
        """``--all-tokens``: the sweep runs to the last token, in the background."""
        return bool(getattr(self.acc, "all_tokens", False)) and not self.acc.comparison.single

    def shown_row(self, token: int) -> Row | None:
        """The token's row as the list shows it: its logits, and what the sweep found of it."""
        row = self.tally.get(token)
        found = self.swept.get(token)
        if row is None or found is None:
            return row
        return {**row, "local_ops": found[0], "first_local": found[1]}

    def sweep_summary(self) -> str | None:
        """What the sweep found so far, for the summary line (None: it has not run)."""
        if not self.swept:
            return None
        tokens = self.tally.tokens
        first = next((t for t in tokens if (self.swept.get(t) or (0, None))[1]), None)
        judged = f"operators judged at {len(self.swept)}/{len(tokens)} tokens"
        if first is not None:
            return f"{judged}, first local at token {first}"
        return f"{judged}, none local" if self._sweep_ended else judged

    def start_sweep(self, for_jump: bool = False) -> None:
        """Judge the tokens' operators, from the first not judged yet (``for_jump``: ``f`` waits)."""
        self._sweep_for_jump = self._sweep_for_jump or for_jump
        if self._sweep_ended and for_jump:
            self._sweep_jump()
            return
        if not self._sweep_running and not self._sweep_ended:
            self._sweep_running = True
            self.sweep_operators([t for t in self.tally.tokens if t not in self.swept])
        if for_jump:
            self.set_status(f"{WAITING} {len(self.swept)}/{len(self.tally.tokens)} (any key cancels)")

    @work(thread=True, exclusive=True, group="sweep", exit_on_error=False, name="operator sweep")
    def sweep_operators(self, tokens: list[int]) -> None:
        """Worker thread: each token's verdict from the judge (kept: a token opened later is not judged
        again), posted as ``TokenSwept``; stops at the first culprit unless every token is wanted."""
        from tui_acc.metrics.engine import Cancelled

        worker = get_current_worker()
        judge = self.acc.comparison.verdicts
        try:
            for token in tokens:
                verdict = judge.token(token, should_stop=lambda: worker.is_cancelled)
                culprit = verdict.culprit.node if verdict.culprit is not None else None
                self.post_message(self.TokenSwept(token, verdict.counts.local, culprit))
                if culprit is not None and not self.sweeps_every_token:
                    return
        except Cancelled:
            return
        self.post_message(self.SweepEnded())

    @on(TokenSwept)
    def _show_swept(self, message: TokenSwept) -> None:
        self.swept[message.token] = (message.local, message.culprit)
        table = self.main_table()
        key = str(message.token)
        row = self.shown_row(message.token)
        if row is not None and key in table.rows and any(c[0] == LOCAL_COLUMN[0] for c in self.table_columns):
            cells = token_cells(row, self.table_columns)
            for (column, _, _), cell in zip(self.table_columns, cells, strict=True):
                table.update_cell(key, column, cell)
        if message.culprit is not None and not self.sweeps_every_token:
            self._sweep_running = False  # stopped at it: what comes after is judged on the next f
        if self._sweep_for_jump:
            if message.culprit is not None:
                self._sweep_jump()
            else:
                self.set_status(f"{WAITING} {len(self.swept)}/{len(self.tally.tokens)} (any key cancels)")
        self.update_summary()

    @on(SweepEnded)
    def _sweep_done(self) -> None:
        self._sweep_running, self._sweep_ended = False, True
        if self._sweep_for_jump:
            self._sweep_jump()
        self.update_summary()

    def _sweep_jump(self) -> None:
        """``f`` waited on the sweep: open the first token with a culprit at it, or say none is."""
        self._sweep_for_jump = False
        self._jump_pending = False
        first = next((t for t in self.tally.tokens if (self.swept.get(t) or (0, None))[1]), None)
        if first is None:
            self.set_status("")
            self.notify("Every token passes, and no operator's error is its own at any token.")
            return
        self.set_status("")
        self.open_token(first, at_first_failure=True)

    def no_failing_token(self) -> None:
        """Every token's logits pass: go on to their operators (not for one dump on its own, whose
        tokens already count their operators' anomalies)."""
        if self.acc.comparison.single:
            super().no_failing_token()
            return
        self.start_sweep(for_jump=True)

    def cancel_jump(self) -> None:
        """A key while ``f`` waits: the jump is off, and a sweep it started stops (``--all-tokens``'s
        goes on in the background)."""
        if self._sweep_for_jump:
            self._sweep_for_jump = False
            if not self.sweeps_every_token:
                self.workers.cancel_group(self, "sweep")
                self._sweep_running = False
            self.set_status("the search for an operator's own error cancelled")
        super().cancel_jump()

    def open_token(self, token: int, at_first_failure: bool = False) -> None:
        """Opening a token stops the sweep (it competes for the cores with the operator screen's
        worker); ``--all-tokens`` resumes it when the list is back."""
        if self._sweep_running:
            self.workers.cancel_group(self, "sweep")
            self._sweep_running = False
        super().open_token(token, at_first_failure)

    def on_screen_resume(self) -> None:
        """Back on the list: an unfinished ``--all-tokens`` sweep goes on where it stopped."""
        if self.sweeps_every_token and self.tally.compared and not self._sweep_ended:
            self.start_sweep()
