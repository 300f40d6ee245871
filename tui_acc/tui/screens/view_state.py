"""What a token's operator screen looked like when the user left it: reopening the token shows it
again (the app keeps one per token; a new comparison starts afresh)."""

from __future__ import annotations

from dataclasses import dataclass

from tui_acc.tui.sorting import Sort


@dataclass(frozen=True)
class OperatorView:
    filter: str
    scope: str
    cursor: str | None  # the golden operator under the cursor
    expanded: frozenset[str]  # the layer tree's open nodes
    tree_shown: bool
    sort: Sort
