"""A mapping whose keys are known at once and whose values are built the first time they are read."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LazyMapping(Mapping[K, V], Generic[K, V]):
    """``build(key)`` runs once per key, on first read, under a lock (worker threads share it).

    Used so that the first screen of a dump of 100,000 files needs only its folder names: a
    token's files are listed, and a token is paired, when it is first compared or opened.
    """

    def __init__(self, keys: Iterable[K], build: Callable[[K], V]) -> None:
        self._keys = list(keys)
        self._known = set(self._keys)
        self._build = build
        self._built: dict[K, V] = {}
        self._lock = threading.Lock()

    def __getitem__(self, key: K) -> V:
        if key not in self._known:
            raise KeyError(key)
        with self._lock:
            if key not in self._built:
                self._built[key] = self._build(key)
            return self._built[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._known

    def is_built(self, key: K) -> bool:
        """Whether ``key``'s value is built already (reading it would not call ``build``); never builds it."""
        return key in self._built
