"""The line above the operator table: the token, how far its operators are computed, how many fail,
the scope and filter, ◆ the culprit (its name fitted to the width), the sort, and a warning where the
order shown is not execution order."""

from __future__ import annotations

from textual.widgets import Static

from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.verdicts.explain import no_culprit

SEPARATOR = "  │  "  # between the summary line's parts


class SummaryLine(OperatorScreenBase):
    """The summary line, rewritten whenever what it says changes."""

    def on_resize(self) -> None:
        """Refit the culprit's name to the new width."""
        self.call_after_refresh(self.update_summary)

    def update_summary(self) -> None:
        """Token, operators computed, failing ones, the scope and filter, ◆ the culprit (once known),
        the sort, and a warning when the order is not execution order."""
        done, total = len(self._rows), len(self._pairs)
        parts = [
            f"token {self.token}",
            f"{done}/{total} ops" if done < total else f"{total} ops",
            f"{self.verdicts.failing_count()} failing",
        ]
        if self.scope != self._tree.root:
            said = self.verdicts.scope_part(self._tree, self.scope)
            parts.append(f"in {fmt.display_name(self.scope)}: {said} (a: all)")
        if self.filter_text and not self.ops_table().row_count:
            parts.append(f"no operator matches {self.filter_text!r} (Esc clears)")
        elif self.filter_text:
            parts.append(f"filter {self.filter_text!r} (/, Esc clears)")
        if self._finished:  # before the rest, its name elided to fit: the line ends where the screen does
            parts.append(self._culprit_part(len(SEPARATOR.join(parts)) + len(SEPARATOR)))
        if sorted_by := self.sort_summary():
            parts.append(sorted_by)
        golden = self.acc.comparison.golden
        if not golden.order_is_execution:  # "first failing" means first in the order shown: say which
            parts.append(f"⚠ order: {golden.order_source.split(' (')[0]}, not execution")
        self.query_one("#summary", Static).update(SEPARATOR.join(parts))

    def _culprit_part(self, start: int) -> str:
        """◆ and the culprit's name, elided in the middle to end within the summary line (which
        begins ``start`` cells before it): at 80 columns it is not pushed off by a filter or a scope."""
        culprit = self.verdicts.culprit
        if not culprit:
            return no_culprit()
        summary = self.query_one("#summary", Static)
        width = summary.content_size.width or self.app.size.width - 2
        name = fmt.display_name(culprit)
        return f"◆ {fmt.elide_middle(name, max(width - start - len('◆  (f)'), 16))} (f)"
