"""Targeted re-dumps: build the dumper's command for a token and subtree, run it, open the result."""

from tui_acc.redump.plan import RedumpPlan, build_plan
from tui_acc.redump.selection import RedumpError, Selection
from tui_acc.redump.settings import DUMPERS, RedumpSettings, SideSettings, load_settings, remember_exec

__all__ = [
    "DUMPERS",
    "RedumpError",
    "RedumpPlan",
    "RedumpSettings",
    "Selection",
    "SideSettings",
    "build_plan",
    "load_settings",
    "remember_exec",
]
