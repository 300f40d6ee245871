"""Every verdict the operator screen shows, read in one place: the culprit (◆), how many operators
fail, each row's In and Out marks, the colour of its name and figures, where n / N stop, the In / Out
columns' sort order, and what the summary says of the layer in scope.

They are the judge's (``tui_acc.verdicts``): while the token computes, each row arrives with its
node's verdict in its fields; once every operator is judged, the token's ``TokenVerdict`` settles
the culprit and the counts, the same object the report reads, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rich.text import Text

from tui_acc.dumps.model import NodeTree
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operator_table import shown_passed
from tui_acc.tui.sorting import verdict_rank

if TYPE_CHECKING:
    from tui_acc.verdicts.verdict import Counts, TokenVerdict

# where a failure shows in the operator itself (n / N stop there; the summary counts them)
_FAILING = ("local", "inherited")


class VerdictView:
    """The verdicts of one token's operators, as the screen shows them (rows not computed yet have
    none: None, pending)."""

    def __init__(self, tree: NodeTree, rows: Mapping[str, Row], names: Iterable[str]) -> None:
        """``tree``: the golden's, the verdicts' own (whatever tree the token is read by); ``rows``:
        the screen's rows as they arrive (read, never written); ``names``: the token's operators."""
        self._tree = tree
        self._rows = rows
        self._names = tuple(names)
        self.verdict: TokenVerdict | None = None  # the token's, once every operator is judged

    def settle(self, verdict: TokenVerdict) -> str | None:
        """Every operator is judged: ◆ and the counts are the token verdict's."""
        self.verdict = verdict
        return self.culprit

    @property
    def culprit(self) -> str | None:
        """◆: the innermost, earliest operator where the error starts (None: none, or not known yet)."""
        found = self.verdict.culprit if self.verdict is not None else None
        return found.node if found is not None else None

    def is_culprit(self, name: str) -> bool:
        """Whether ``name`` is ◆."""
        return name == self.culprit

    def passed(self, name: str) -> bool | None:
        """The Out column's ✓ (True) or ✗ (False), which also colours the row's name and figures."""
        row = self._rows.get(name)
        return None if row is None else shown_passed(row)

    def input_mark(self, name: str) -> Text:
        """The In column: the inputs as the rule that judged saw them (✗ for an inherited error, ✓
        where the error is the operator's own), ``f`` where it is the feeding operator's."""
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
        """Where n / N stop: a failure that shows in the operator itself, local or inherited (not a
        module that only holds a local operator, ``c``)."""
        return (self._rows.get(name) or {}).get("label") in _FAILING

    def counts(self) -> Counts | None:
        """The token verdict's counts, once known."""
        return self.verdict.counts if self.verdict is not None else None

    def failing_count(self) -> int:
        """How many operators the summary counts as failing: local and inherited ones, as the report
        counts them (the token verdict's count once known)."""
        counts = self.counts()
        if counts is not None:
            return counts.failing
        return sum(1 for row in self._rows.values() if row.get("label") in _FAILING)

    def scope_part(self, tree: NodeTree, scope: str) -> str:
        """What the summary says of module ``scope`` of ``tree`` (the tree the token is read by): its
        own mark, then how many operators inside it fail and are local (not the cosine of
        everything inside, which reads as passing where one operator fails)."""
        inside = [
            self._rows[n.name] for n in tree.preorder(scope) if n.name != scope and n.name in self._rows
        ]
        local = sum(1 for r in inside if r.get("label") == "local")
        failing = sum(1 for r in inside if r.get("label") in _FAILING)
        own = self._rows.get(scope)
        passed = shown_passed(own) if own is not None else None
        mark = "✓ " if passed else "✗ " if passed is False else ""
        if not failing:
            return f"{mark}nothing inside fails"
        return f"{mark}{failing} failing inside" + (f", {local} local" if local else "")
