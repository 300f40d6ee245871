"""The tensors a dump's files were last read into, kept a little while, so that each is read and
decoded once where two readers want it one after the other: the verdicts replay an operator from
its dumped inputs, weights and output just after the metrics pass read those very files for the
operator's rows (a linear's weight was read twice, 0.31 of the replay's 0.38 s on a 7B-shaped pair:
docs/performance.md).

One per dump (``DumpIndex.recent``), least recently used first out past its budget: ``BUDGET_BYTES``,
or the largest tensor read from the dump so far where that is less. The two dumps' together then
hold at most the largest pair, and the engine stays within its memory bound (300 MiB + 3x the largest
pair: docs/performance.md, where large pairs are compared one at a time). An entry is used only
while its file is as it was read (size, modification time, inode): a file rewritten since is read
again. What is kept is read-only: every
holder shares one array, and a reader that wrote into its inputs would change them for the others
(numpy refuses the write instead).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported with the first tensor, not with the index (the first screen)
    import numpy as np

BUDGET_BYTES = 192 << 20  # a 7B linear's weight, its input and its output, as one side holds them


class RecentTensors:
    """The last tensors read from one dump's files, within ``budget`` bytes (any thread)."""

    def __init__(self, budget: int = BUDGET_BYTES) -> None:
        self.budget = budget
        self.hits = 0  # reads saved (for the benchmarks and the tests)
        self._largest = 0  # the largest tensor read so far: the budget is never more
        self._held: OrderedDict[Hashable, tuple[np.ndarray, tuple[int, ...]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, path: Path, key: Hashable, load: Callable[[], np.ndarray]) -> np.ndarray:
        """The tensor ``load`` reads from the file ``path``, as read before under ``key`` where the
        file is unchanged since; else ``load()``'s, kept (read-only) where it fits."""
        state = _state(path)
        with self._lock:
            held = self._held.get(key)
            if held is not None and state is not None and held[1] == state:
                self._held.move_to_end(key)
                self.hits += 1
                return held[0]
        values = load()
        with self._lock:
            self._largest = max(self._largest, values.nbytes)
            budget = min(self.budget, self._largest)
        if state is None or values.nbytes > budget or _state(path) != state:
            return values  # not a file stat can vouch for, too large, or changed while read
        values.flags.writeable = False
        with self._lock:
            if key in self._held:
                self._bytes -= self._held.pop(key)[0].nbytes
            self._held[key] = (values, state)
            self._bytes += values.nbytes
            while self._bytes > budget:
                self._bytes -= self._held.popitem(last=False)[1][0].nbytes
        return values

    def clear(self) -> None:
        """Let go of every tensor kept."""
        with self._lock:
            self._held.clear()
            self._bytes = 0

    def __getstate__(self) -> dict[str, int]:
        """Sent to another process (a Ray node's index): the budget alone, nothing kept."""
        return {"budget": self.budget}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["budget"])  # type: ignore[misc]


def _state(path: Path) -> tuple[int, ...] | None:
    """What tells a file rewritten: its size, modification and change times, inode and device."""
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino, found.st_dev)
