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
        """Note a new arrival (any thread); True when no message is waiting, so the caller posts one."""
        with self._lock:
            if self._waiting:
                return False
            self._waiting = True
            return True

    def handled(self) -> None:
        """The waiting message is being handled (UI thread): the next arrival posts again."""
        with self._lock:
            self._waiting = False
