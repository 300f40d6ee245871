"""The work list behind the engine's worker threads: what the user looks at is computed first."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable

from tui_acc.pairing import TensorPair

# The nodes the user is looking at now (golden names); read by the workers before each pair.
Preference = Callable[[], Collection[str]]


class Backlog:
    """Tensor pairs waiting for a worker, in the caller's order unless ``prefer`` names nodes.

    ``prefer`` is asked again before every pair, so when the user scrolls or narrows the view the
    rows now on screen jump the queue and those that scrolled away wait: nothing is computed twice,
    and the consumer that needs every row in execution order still gets them all.
    """

    def __init__(self, pairs: Iterable[TensorPair], prefer: Preference | None = None) -> None:
        self._pending = list(pairs)
        self._prefer = prefer
        self._closed = False
        self._lock = threading.Lock()

    def take(self) -> TensorPair | None:
        """The next pair to compute, or None when there is none left or the backlog was closed."""
        wanted = self._prefer() if self._prefer is not None else ()
        with self._lock:
            if self._closed or not self._pending:
                return None
            index = next((i for i, p in enumerate(self._pending) if p.golden_node in wanted), 0)
            return self._pending.pop(index)

    def close(self) -> None:
        """Workers stop taking pairs (the caller is done or cancelled); pairs in progress finish."""
        with self._lock:
            self._closed = True
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
