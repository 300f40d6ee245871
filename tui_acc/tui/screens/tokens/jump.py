"""``f`` on the token list: from launch to the culprit in one key. The first failing token opens at its
first failing operator (◆); while the tokens before it are still compared the jump waits, showing
progress, and any key cancels it."""

from __future__ import annotations

from textual.widgets import DataTable

from tui_acc.tui.screens.base import ViewScreen
from tui_acc.tui.token_tally import TokenTally


class FirstFailingToken(ViewScreen):
    """The jump to the first failing token (a feature of ``TokenScreen``)."""

    tally: TokenTally  # the rows the worker sent
    _jump_pending = False  # f pressed before the first failing token was known
    _passing_prefix = 0  # how many tokens from the first are known to pass (only grows: no rescans)
    _all_compared = False

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

    def action_open_first_failure(self) -> None:
        """``f``: open the first failing token at its first failing operator; while the tokens before
        it are still being compared, wait for them (any key cancels the wait)."""
        self._jump_pending = True
        self.jump_when_known()

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

    def jump_when_known(self) -> None:
        """Open the first failing token now if it is known, else say how far the comparison is."""
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
            self.no_failing_token()
            return
        self.set_status("")
        table = self.query_one("#tokens", DataTable)
        table.move_cursor(row=table.get_row_index(str(found)))
        self.open_token(found, at_first_failure=True)

    def no_failing_token(self) -> None:
        """``f`` found every token's logits passing."""
        self.notify("Every token passes.")

    def on_key(self) -> None:
        """Any key while ``f`` waits for the tokens cancels the jump (and still does what it does)."""
        self.cancel_jump()

    def cancel_jump(self) -> None:
        """The jump ``f`` started is off."""
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("jump to the first failure cancelled")

    def open_token(self, token: int, at_first_failure: bool = False) -> None:
        """Open ``token``'s operators (``at_first_failure``: at ◆, once it is known)."""
        # The operator screen computes the token it opens itself, what is on screen first; what
        # the prefetch finished is kept, the rest of it would only compete for the cores.
        from tui_acc.tui.screens.operators import OperatorScreen

        self.workers.cancel_group(self, "prefetch")
        self.app.push_screen(OperatorScreen(token, at_first_failure=at_first_failure))
