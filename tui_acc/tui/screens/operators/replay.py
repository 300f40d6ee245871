"""``p``: the operator under the cursor recomputed from its own dumped inputs, on each side, on a
worker; the answer opens in the replay dialog (``screens/replay.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on, work
from textual.message import Message

from tui_acc.tui import formatting as fmt
from tui_acc.tui.screens.operators.base import OperatorScreenBase
from tui_acc.tui.screens.replay import ReplayScreen

if TYPE_CHECKING:
    from tui_acc.verdicts.replay_check import Replay


class ReplayKey(OperatorScreenBase):
    """Replay of the operator under the cursor."""

    class ReplayFinished(Message):
        """An operator's replay arrived from its worker (or why it could not start)."""

        def __init__(self, name: str, replay: Replay | None, problem: str | None = None) -> None:
            super().__init__()
            self.name = name
            self.replay = replay
            self.problem = problem

    def action_replay(self) -> None:
        """``p``: recompute the operator under the cursor from its own dumped inputs, on each side."""
        name = self.cursor_key()
        if name is None:
            self.notify("No operator under the cursor to replay.")
            return
        self.set_status(f"replaying {fmt.display_name(name)} from its dumped inputs…")
        self.replay_operator(name)

    @work(thread=True, exclusive=True, group="replay", exit_on_error=False, name="replay")
    def replay_operator(self, name: str) -> None:
        """Tensors are read and recomputed here, off the event loop; so is tui-acc.toml ([replay])."""
        from tui_acc.config import ConfigError, load_config
        from tui_acc.replay.registry import Registry, RegistryError
        from tui_acc.verdicts.replay_check import UnknownNode, replay_node

        config_file = self.acc.config_file
        try:
            config = load_config(config_file if config_file.is_file() else None)
            registry = Registry.from_config(config.sections.get("replay"), config.source)
            comparison = self.acc.comparison
            replay = replay_node(comparison, self.token, name, registry, comparison.engine.tensor_row)
        except (ConfigError, RegistryError, UnknownNode) as exc:
            self.post_message(self.ReplayFinished(name, None, str(exc)))
            return
        self.post_message(self.ReplayFinished(name, replay))

    @on(ReplayFinished)
    def _show_replay(self, message: ReplayFinished) -> None:
        if message.replay is None:
            self.set_status(f"replay: {message.problem}", error=True)
            return
        self.set_status(f"replay of {fmt.display_name(message.name)}: {message.replay.reading}")
        self.app.push_screen(ReplayScreen(message.replay))
