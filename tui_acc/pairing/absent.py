"""Records one side holds and the other does not, placed where they fall in execution order.

A filtered dump leaves records out: msprobe's default ``risk_level`` FOCUS drops reshape, view,
transpose, permute, to and the like; a ``list`` or ``scope`` narrows it further. Pairing skips what
has no partner, and the feed rule looks past it (an operator's inputs are judged by its own files,
or by the paired operator before it). This says, for each paired operator, which unpaired records
lie between the paired operator before it and it, so the detail panel can name them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from tui_acc.dumps.model import DumpIndex
from tui_acc.pairing.model import NodePair, Unmatched


def absent_before(
    token: int, golden: DumpIndex, test: DumpIndex, pairs: Sequence[NodePair], unmatched: Sequence[Unmatched]
) -> dict[str, list[Unmatched]]:
    """Golden node name -> the records of ``token`` present on one side only that come right before it.

    A golden-only record is placed by the golden's execution order, a test-only one by the test's
    (against the test partners of the paired nodes). Records after the last paired node are left out.
    """
    golden_at = _positions(golden, token)
    test_at = _positions(test, token)
    by_golden = sorted((golden_at[p.golden], p.golden) for p in pairs if p.golden in golden_at)
    by_test = sorted((test_at[p.test], p.golden) for p in pairs if p.test in test_at)
    found: dict[str, list[Unmatched]] = {}
    for record in unmatched:
        if record.token != token or record.kind != "node":
            continue
        at, order = (golden_at, by_golden) if record.side == "golden" else (test_at, by_test)
        position = at.get(record.name)
        if position is None:
            continue
        following = bisect_right(order, (position, "\uffff"))
        if following < len(order):
            found.setdefault(order[following][1], []).append(record)
    return found


def _positions(index: DumpIndex, token: int) -> dict[str, int]:
    present = index.tokens.get(token, {})
    return {node.name: i for i, node in enumerate(n for n in index.tree.preorder() if n.name in present)}
