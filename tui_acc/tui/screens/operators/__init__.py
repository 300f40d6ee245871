"""A token's operators, one module per feature: ``screen.py`` (``OperatorScreen``: the layout, the rows
arriving, the tree's scope) composes ``filter_sort.py`` (/ and what s sorts by), ``replay.py`` (p),
``detail.py`` (the panel under the table: d, m, [ ]), ``jump.py`` (f, ◆) and ``summary.py`` (the line
above the table); ``cells.py`` is what each row shows, ``verdict_view.py`` every verdict the screen
shows, ``base.py`` the state they share."""

from __future__ import annotations

from tui_acc.tui.screens.operators.screen import OperatorScreen

__all__ = ["OperatorScreen"]
