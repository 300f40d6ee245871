"""The footer of the comparison screens: textual's, built again only when the keys it shows change."""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """textual's ``Footer``, which builds its keys again whenever its screen's bindings may have
    changed: when a dialog or the help opens over the screen and when it closes. The screen under
    the help was then laid out again, and the help drawn again over it (a frame of the whole
    screen, 10-20 ms each way, while the help was being shown). Here they are built again only
    when what they show differs."""

    _shown: Hashable | None = None  # the keys last built, as ``_keys`` says them

    def _keys(self) -> Hashable:
        """What the footer shows: each binding of the screen with whether it is enabled, its tooltip."""
        return tuple(
            (key, binding, enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
        )

    def compose(self) -> ComposeResult:
        """The keys, as textual's footer builds them (noted: the next change is compared with them).
        textual's footer builds none until its first ``bindings_changed`` says the bindings are
        ready: what it showed before that is nothing, and is not noted."""
        self._shown = self._keys() if self.is_attached and self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen) -> None:
        """Build the keys again, unless they are the ones shown."""
        shown = self._shown is not None and self.is_attached and screen is self.screen
        if shown and self._keys() == self._shown:
            return
        super().bindings_changed(screen)
