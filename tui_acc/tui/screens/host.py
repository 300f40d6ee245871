"""What the screens use of the app that shows them, stated here so that no screen imports the app
(the app imports every screen: importing it back would be a cycle). ``AccApp`` provides all of it;
mypy checks that in app.py (``_provides_host``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from tui_acc.redump import RedumpSettings
from tui_acc.redump.runner import RedumpRun
from tui_acc.session import Comparison
from tui_acc.tui.screens.redump_dialog import RedumpChoice
from tui_acc.tui.screens.view_state import OperatorView


class Host(Protocol):
    comparison: Comparison
    export_dir: Path
    clock: Callable[[], datetime]  # export names carry a timestamp
    redump_settings: RedumpSettings
    redump_run: RedumpRun | None
    redump_operator: str | None  # the golden operator a re-dump was asked for
    operator_views: dict[int, OperatorView]  # each token's operator screen as the user left it
    config_file: Path  # --config, else ./tui-acc.toml: where [replay] plug-ins are read from too
    swap_command: str | None  # the command line with golden and test swapped (sides.py)
    nodes_said: Callable[[], str] | None  # a Ray run's line of nodes (--ray); None: a local run

    def start_redump(self, choice: RedumpChoice) -> None:
        """Run the re-dump ``choice`` in the background; its lines go to the re-dump log (L)."""

    def action_stop_redump(self) -> None:
        """Stop the running re-dump (its whole process group); a note when none runs."""

    def action_open_redump(self) -> None:
        """Open the finished re-dump in place of its side, at the same token and operator; a note when
        none has finished."""
