"""How app-level messages are posted from other threads."""

from __future__ import annotations

import threading


class OneInFlight:
    """At most one message of a kind waiting: ``arrive()`` (any thread) says whether to post one;
    ``handled()`` (the UI thread, before it reads the news) lets the next arrival post again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = False

    def arrive(self) -> bool:
        with self._lock:
            if self._waiting:
                return False
            self._waiting = True
            return True

    def handled(self) -> None:
        with self._lock:
            self._waiting = False
