"""Which operators the table shows and in what order: the layer in scope, the filter typed after ``/``
(as you type; Enter keeps it, Esc clears it) and the sort (``s``: what each column sorts by)."""

from __future__ import annotations

from textual import on
from textual.actions import SkipAction
from textual.widgets import Input

from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.tui.sorting import Sort, matching_keys


class FilterSort(OperatorScreenBase):
    """Scope, filter and order of the operator table."""

    NATURAL_ORDER = "execution order"

    @property
    def natural_order(self) -> str:
        """What the unsorted view is ordered by: execution order, or the dump's fallback order."""
        golden = self.acc.comparison.golden
        source = golden.order_source.split(" (")[0]
        return self.NATURAL_ORDER if golden.order_is_execution else f"dump order ({source})"

    def in_scope(self) -> list[str]:
        """The rows on screen: the scope's nodes, filtered, in the chosen order."""
        names = [n.name for n in self._tree.preorder(self.scope) if n.name in self._pairs]
        return self.ordered(self._filtered(names))

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
            return self.verdicts.input_rank(key)
        if column == "outputs":
            return self.verdicts.output_rank(key)
        return row.get(column)

    def sort_by(self, sort: Sort) -> None:
        """The user's sort (``TableScreen.sort_by``: from the top); the detail follows the cursor there."""
        super().sort_by(sort)
        self.show_detail(self.cursor_key())

    def _filtered(self, names: list[str]) -> list[str]:
        """The rows whose name as shown, golden or test name or type holds the filter text."""
        nodes = {name: self._pairs[name] for name in names}
        texts = {
            name: (self._labels[name], name, node.test, node.golden_type, node.test_type)
            for name, node in nodes.items()
        }
        return matching_keys(texts, self.filter_text)

    # --- the filter box -------------------------------------------------------------------------

    def action_filter(self) -> None:
        """``/``: the keys that follow are the filter's until Enter or Esc.

        The app sends each key to the widget focused when it routes it, and ``Widget.focus`` moves
        the focus only later: keys typed together with ``/`` (pasted, or bunched by a slow link) went
        to the table and ran as commands. As a priority binding this runs while the app routes ``/``,
        and the focus moves at once, before the next key is routed.
        """
        box = self.filter_box()
        if self.focused is box:
            raise SkipAction  # a / typed in the filter is text (ATB paths hold some)
        box.value = self.filter_text
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
        box = self.filter_box()
        if box.display:
            self.filter_text = box.value.strip()

    @on(Input.Submitted, "#filter")
    def _apply_filter(self, event: Input.Submitted) -> None:
        self._set_filter(event.value.strip())

    def _set_filter(self, text: str) -> None:
        """Close the filter box and filter by ``text`` (empty: every operator of the scope)."""
        self.filter_box().display = False
        self.filter_text = text
        self.ops_table().focus()
