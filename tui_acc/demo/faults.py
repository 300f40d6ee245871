"""Realistic faults to inject into the test run of the demo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tui_acc.demo.modules import Handle, Module


@dataclass(frozen=True)
class StaleTailTile:
    """A matmul kernel that skips its last output tile on one step.

    The skipped columns keep what the output buffer held from the previous step, the way a
    tiling bug on an accelerator leaves stale data behind (N % tile != 0, a missed tail).
    """

    module: str  # full dump name, e.g. root.model.layers.2.mlp.down_proj
    token: int
    tile: int = 48

    def describe(self) -> str:
        """The fault in a sentence, for the demo's summary and ``demo.json``."""
        return (
            f"{self.module} at token {self.token}: the last {self.tile} output columns keep the previous "
            "step's values (a matmul that skipped its tail tile)"
        )

    def install(self, model: Module, current_token: Callable[[], int]) -> Handle:
        """Hook the fault onto ``self.module`` of ``model``, ahead of any capture hook, so a dump sees its
        result.

        Args:
            model: the test run's root module.
            current_token: the token being generated (the capture's counter); the fault fires at
                ``self.token``.

        Returns:
            The hook's handle: ``remove()`` takes the fault out again.
        """
        target = dict(model.named_modules())[self.module.removeprefix("root.")]
        previous: dict[str, np.ndarray] = {}

        def hook(module: Module, args: Any, output: np.ndarray) -> np.ndarray:
            stale = previous.get("out")
            previous["out"] = output.copy()
            if current_token() != self.token or stale is None:
                return output
            patched = output.copy()
            rows = min(stale.shape[-2], patched.shape[-2])
            patched[..., -rows:, -self.tile :] = stale[..., -rows:, -self.tile :]
            return patched

        # prepend: the fault is part of the module, so any capture hook must see its result
        return target.register_forward_hook(hook, prepend=True)
