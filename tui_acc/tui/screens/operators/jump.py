"""``f``: to ◆, the first operator where the error starts; pressed before the token's operators are
judged (or opened with ``f`` from the token list), the jump waits for them, and any key cancels it.
Where no operator of the token adds error of its own while an earlier token's does (its error reaches
this token through the KV cache its decode steps read), ``f`` opens that token at its culprit, as
``report`` names it."""

from __future__ import annotations

from textual import on, work
from textual.message import Message
from textual.worker import get_current_worker

from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.tui.widgets.layer_tree import LayerTree

WAITING = "finding the first failing operator… (any key cancels)"
LOOKING_BACK = "no operator here adds error of its own: looking at the tokens before it… (any key cancels)"


class JumpToCulprit(OperatorScreenBase):
    """The jump to ◆, now or once the token is judged."""

    _jump_pending = False  # f pressed (or asked for by the token list) before ◆ was known
    _looking_back = False  # the tokens before this one are judged for a culprit

    class EarlierCulprit(Message):
        """The tokens before this one are judged: the first with a culprit (None: none)."""

        def __init__(self, token: int | None, culprit: str | None) -> None:
            super().__init__()
            self.token = token
            self.culprit = culprit

    def action_first_failure(self) -> None:
        """``f``: ◆, the first operator whose inputs pass and output fails (scope and filter cleared where
        they hide it); while the token is computing, it jumps once that is known."""
        if not self._finished:  # jump when they are known
            self._jump_pending = True
            self.set_status(WAITING)
            return
        culprit = self.verdicts.culprit
        if culprit is None:
            tokens = self.acc.comparison.pairing.tokens
            if self.token in tokens and tokens.index(self.token) > 0:
                self._looking_back = True
                self.set_status(LOOKING_BACK)
                self.find_earlier_culprit()
            else:
                self.notify("No operator fails while its inputs pass at this token.")
            return
        tree = self._tree
        if self.scope != culprit and not tree.is_ancestor(self.scope, culprit):
            self.scope = tree.root
        if culprit not in self.in_scope():
            self._set_filter("")  # the filter hid it: show everything again
        table = self.ops_table()
        row = table.get_row_index(culprit)
        table.move_cursor(row=row, scroll=False)
        # in the middle, whatever was scrolled before: the operators that fed it stay in sight above
        table.scroll_to(y=max(0, row - table.scrollable_content_region.height // 2), animate=False)
        table.focus()
        self.query_one(LayerTree).reveal(culprit)

    @work(thread=True, exclusive=True, group="earlier", exit_on_error=False, name="earlier culprit")
    def find_earlier_culprit(self) -> None:
        """Worker thread: the tokens before this one judged (kept by the judge), the first with a
        culprit posted as ``EarlierCulprit``."""
        from tui_acc.metrics.engine import Cancelled

        worker = get_current_worker()
        try:
            found = self.acc.comparison.verdicts.earlier_culprit(self.token, lambda: worker.is_cancelled)
        except Cancelled:
            return
        culprit = found.culprit.node if found is not None and found.culprit is not None else None
        self.post_message(self.EarlierCulprit(found.token if found is not None else None, culprit))

    @on(EarlierCulprit)
    def _open_earlier(self, message: EarlierCulprit) -> None:
        if not self._looking_back:
            return  # cancelled meanwhile
        self._looking_back = False
        self.set_status("")
        if message.token is None or message.culprit is None:
            self.notify("No operator adds error of its own at this token or at any token before it.")
            return
        self.notify(
            f"No operator at token {self.token} adds error of its own: it starts at token "
            f"{message.token}, {fmt.display_name(message.culprit)}, and reaches this token through "
            "the KV cache its decode steps read."
        )
        self.open_at_culprit(message.token)

    def jump_if_pending(self) -> None:
        """The token is judged: the jump asked for earlier happens now."""
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("")
            self.action_first_failure()

    def on_key(self) -> None:
        """Any key while the jump to ◆ waits for the operators cancels it (and still does its job)."""
        if self._jump_pending:
            self._jump_pending = False
            self.set_status("jump to the first failing operator cancelled")
        if self._looking_back:
            self._looking_back = False
            self.workers.cancel_group(self, "earlier")
            self.set_status("the look at the tokens before it cancelled")
