"""``f``: to ◆, the first operator where the error starts; pressed before the token's operators are
judged (or opened with ``f`` from the token list), the jump waits for them, and any key cancels it."""

from __future__ import annotations

from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.tui.widgets.layer_tree import LayerTree

WAITING = "finding the first failing operator… (any key cancels)"


class JumpToCulprit(OperatorScreenBase):
    """The jump to ◆, now or once the token is judged."""

    _jump_pending = False  # f pressed (or asked for by the token list) before ◆ was known

    def action_first_failure(self) -> None:
        """``f``: ◆, the first operator whose inputs pass and output fails (scope and filter cleared where
        they hide it); while the token is computing, it jumps once that is known."""
        if not self._finished:  # jump when they are known
            self._jump_pending = True
            self.set_status(WAITING)
            return
        culprit = self.verdicts.culprit
        if culprit is None:
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
