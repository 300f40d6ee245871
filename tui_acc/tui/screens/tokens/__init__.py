"""The first screen, the token list, one module per feature: ``screen.py`` (``TokenScreen``: the first
frame, the rows arriving, the summary and the KL strip) composes ``jump.py`` (f: from launch to the
culprit); ``columns.py`` is what each row shows and what ``e`` exports."""

from __future__ import annotations

from tui_acc.tui.screens.tokens.columns import _token_export_schema
from tui_acc.tui.screens.tokens.screen import TokenScreen

__all__ = ["TokenScreen", "_token_export_schema"]
