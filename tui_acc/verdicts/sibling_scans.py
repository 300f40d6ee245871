"""What the siblings before a node hand on, found in time linear in a module's children.

A node whose inputs were not dumped is fed by the last earlier sibling whose outputs have a verdict
(``walk.TokenWalk._feed``). Looking back from each node anew is quadratic in a module of thousands of
children none of which has outputs (a dump's empty module folders): each parent's scan is kept
instead (how far it went, what it found), so the next sibling scans only the children since.
"""

from __future__ import annotations

from collections.abc import Callable

from tui_acc.dumps.model import NodeTree
from tui_acc.verdicts.rules import Facts


class SiblingScans:
    """``last_output(name)``: the facts a node hands on (its own, or a container's last child's), or
    None; what the walk has judged so far."""

    def __init__(self, tree: NodeTree, last_output: Callable[[str], Facts | None]) -> None:
        self._tree = tree
        self._last_output = last_output
        # by parent: the children list the positions were taken from, and each child's index there
        self._positions: dict[str, tuple[list[str], dict[str, int]]] = {}
        self._scans: dict[str, tuple[int, int | None]] = {}  # by parent: scanned up to, found at

    def handed_on_before(self, parent: str, child: str) -> Facts | None:
        """The last of ``parent``'s children before ``child`` whose outputs have a verdict."""
        position = self._position(parent, child)
        siblings = self._tree.children(parent)
        scanned, found = self._scans.get(parent, (0, None))
        if scanned > position:  # asked about an earlier child than last time: scan from the start
            scanned, found = 0, None
        for index in range(position - 1, scanned - 1, -1):
            facts = self._last_output(siblings[index])
            if facts is not None and _has_verdict(facts):
                found = index
                break
        self._scans[parent] = (position, found)
        return None if found is None else self._last_output(siblings[found])

    def forget(self, name: str) -> None:
        """Call before ``name`` is judged (anew): what it, and each container above it, hands on may
        change, so the scans of their parents that already passed them are forgotten."""
        current, parent = name, self._tree.nodes[name].parent
        while parent is not None:
            scan = self._scans.get(parent)
            if scan is not None and self._position(parent, current) < scan[0]:
                del self._scans[parent]
            current, parent = parent, self._tree.nodes[parent].parent

    def _position(self, parent: str, child: str) -> int:
        """``child``'s index among ``parent``'s children (list.index per node would be quadratic too).
        A later token's nodes adopted into the tree mid-walk (``NodeTree.adopt``) give the parent a new
        list, where a new child may sit between old ones: positions and the scan are then taken anew."""
        children = self._tree.children(parent)
        known = self._positions.get(parent)
        if known is None or known[0] is not children:
            known = self._positions[parent] = (children, {c: i for i, c in enumerate(children)})
            self._scans.pop(parent, None)
        return known[1][child]


def _has_verdict(facts: Facts) -> bool:
    return facts.row["outputs_passed"] is not None and not facts.row.get("outputs_unknown")
