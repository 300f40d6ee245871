"""Values computed at most once, shared between threads: what is known, and what is being computed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class RowStore(Generic[Key, Value]):
    """Values by key. A key being computed by one thread is waited for, not recomputed, by another."""

    def __init__(self) -> None:
        self._rows: dict[Key, Value] = {}
        self._in_flight: dict[Key, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: Key) -> Value | None:
        """The value of ``key`` if known, else None; never waits for one being computed (any thread)."""
        with self._lock:
            return self._rows.get(key)

    def __contains__(self, key: Key) -> bool:
        with self._lock:
            return key in self._rows

    def adopt(self, key: Key, row: Value) -> Value:
        """Keep ``row`` unless one is known already; returns the one kept."""
        with self._lock:
            return self._rows.setdefault(key, row)

    def rows(self) -> list[Value]:
        """A snapshot of every known value, in the order they became known (any thread)."""
        with self._lock:
            return list(self._rows.values())

    def once(self, key: Key, produce: Callable[[], Value]) -> Value:
        """The row of ``key``: known, waited for while another thread produces it, or produced here."""
        while True:
            with self._lock:
                if key in self._rows:
                    return self._rows[key]
                event = self._in_flight.get(key)
                if event is None:
                    event = self._in_flight[key] = threading.Event()
                    break
            event.wait()
        try:
            row = produce()
            with self._lock:
                self._rows[key] = row
            return row
        finally:
            with self._lock:
                del self._in_flight[key]
            event.set()
