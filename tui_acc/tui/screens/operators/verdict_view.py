"""Every verdict the operator screen shows, read in one place: the culprit (◆), how many operators
fail, each row's In and Out marks, the colour of its name and figures, where n / N stop, and the
In / Out columns' sort order.

Today each is read off the token's rows (their ``label``, ``outputs_passed`` and ``inputs_effective``
fields, through ``verdicts.shown``) and the culprit is ``verdicts.labels.first_suspect`` over the
golden tree; the screen asks this object only, so where verdicts come from can change here alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.text import Text

from tui_acc.dumps.model import NodeTree
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operator_table import shown_passed
from tui_acc.tui.sorting import verdict_rank
from tui_acc.verdicts.shown import failing


class VerdictView:
    """The verdicts of one token's operators, as the screen shows them (rows not computed yet have
    none: None, pending)."""

    def __init__(self, tree: NodeTree, rows: Mapping[str, Row], names: Iterable[str]) -> None:
        """``tree``: the golden's, the verdicts' own (whatever tree the token is read by); ``rows``:
        the screen's rows as they arrive (read, never written); ``names``: the token's operators."""
        self._tree = tree
        self._rows = rows
        self._names = tuple(names)
        self.culprit: str | None = None  # ◆, once every operator of the token is judged

    def settle(self) -> str | None:
        """Every operator is judged: ◆ is the innermost, earliest operator where the error starts."""
        from tui_acc.verdicts.labels import first_suspect  # judged on the golden tree

        judged = {name: self._rows[name] for name in self._names if name in self._rows}
        found = first_suspect(self._tree, judged)
        self.culprit = found["golden_node"] if found else None
        return self.culprit

    def is_culprit(self, name: str) -> bool:
        """Whether ``name`` is ◆."""
        return name == self.culprit

    def passed(self, name: str) -> bool | None:
        """The Out column's ✓ (True) or ✗ (False), which also colours the row's name and figures."""
        row = self._rows.get(name)
        return None if row is None else shown_passed(row)

    def input_mark(self, name: str) -> Text:
        """The In column: the inputs' verdict, ``f`` where it is the feeding operator's."""
        row = self._rows.get(name) or {}
        return fmt.input_mark(row.get("inputs_effective"), row.get("inputs_from"))

    def output_mark(self, name: str) -> Text:
        """The Out column: ✓ or ✗ with where the error starts (L, c, i), ``!`` for an error."""
        row = self._rows.get(name) or {}
        return fmt.output_mark(self.passed(name), row.get("label"), bool(row.get("error")))

    def input_rank(self, name: str) -> int | None:
        """The In column's order when sorted by it: failures first."""
        return verdict_rank((self._rows.get(name) or {}).get("inputs_effective"))

    def output_rank(self, name: str) -> int | None:
        """The Out column's order when sorted by it: failures first, where the error starts leading."""
        row = self._rows.get(name) or {}
        return verdict_rank(shown_passed(row), row.get("label"))

    def is_failing(self, name: str) -> bool:
        """Where n / N stop: a failure that shows in the operator itself (not a module failing only
        by a child, ``c``)."""
        row = self._rows.get(name)
        return failing(row) is True and row is not None and row.get("label") != "contains"

    def failing_count(self) -> int:
        """How many operators the summary counts as failing (modules failing by a child excluded)."""
        return sum(1 for row in self._rows.values() if failing(row) and row.get("label") != "contains")
