"""One engine-wide backlog of work and the worker threads that take from it, started once.

Every request for many rows (the token list, a token's operators, a report) opens a ``Batch``.
Workers, and the callers themselves while they wait for a row, take from the newest batch still
wanted first: what the user opened last is what is on screen, so the operator screen opened while
the token list computes gets every thread, and the token list resumes when it closes. Inside a
batch, the items of the nodes the screen shows (``prefer``) go first.

An exception raised while a worker computes an item is kept in its batch and raised in the caller's
thread when its batch ends (``Batch.finish``), where the UI reports it: nothing a worker raises vanishes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
# The nodes the user is looking at now (golden names); read before each item is taken.
Preference = Callable[[], Collection[str]]
StopCheck = Callable[[], bool]


class Batch(Generic[Item]):
    """Items waiting to be computed for one caller, in its order unless ``prefer`` names nodes.

    ``prefer`` is asked again before every item, so when the user scrolls or narrows the view the
    rows now on screen jump the queue and those that scrolled away wait: nothing is computed twice,
    and the caller that needs every row in its order still gets them all.
    """

    def __init__(
        self,
        items: Iterable[Item],
        compute: Callable[[Item], None],
        should_stop: StopCheck,
        node_of: Callable[[Item], str],
        prefer: Preference | None,
    ) -> None:
        # The caller's order, and the same items by node: a take looks up the few nodes on screen
        # instead of scanning everything still pending (a token can hold 100,000 pairs).
        self._queue: deque[tuple[int, Item]] = deque(enumerate(items))
        self._by_node: dict[str, deque[tuple[int, Item]]] = {}
        for entry in self._queue:
            self._by_node.setdefault(node_of(entry[1]), deque()).append(entry)
        self._taken: set[int] = set()
        self._compute = compute
        self._prefer = prefer
        self.should_stop = should_stop
        self._closed = False
        self._failure: BaseException | None = None
        self._running = 0  # items taken and not yet finished
        self._lock = threading.Condition()

    @property
    def open(self) -> bool:
        """Whether it still has items to hand out (not closed, not stopped, not empty)."""
        with self._lock:
            pending = not self._closed and self._has_pending()
        return pending and not self.should_stop()

    def _has_pending(self) -> bool:
        self._drop_taken(self._queue)
        return bool(self._queue)

    def _drop_taken(self, entries: deque[tuple[int, Item]]) -> None:
        while entries and entries[0][0] in self._taken:
            entries.popleft()

    def take(self) -> Item | None:
        """The next item (counted as running until ``run`` finishes it), or None when there is none
        left or the batch is closed. The first, in the caller's order, of the nodes on screen; else
        the first of all."""
        wanted = self._prefer() if self._prefer is not None else ()
        with self._lock:
            if self._closed:
                return None
            best: tuple[int, Item] | None = None
            for node in wanted:
                entries = self._by_node.get(node)
                if entries:
                    self._drop_taken(entries)
                    if entries and (best is None or entries[0][0] < best[0]):
                        best = entries[0]
            if best is None:
                self._drop_taken(self._queue)
                if not self._queue:
                    return None
                best = self._queue[0]
            self._taken.add(best[0])
            self._running += 1
            return best[1]

    def run(self, item: Item) -> None:
        """Compute an item ``take`` gave; what it raises is kept for the caller (the first failure
        wins). It counted as running from the moment it was taken, so ``finish`` waits for it."""
        try:
            self._compute(item)
        except BaseException as exc:  # raised again in the caller's thread, never lost
            with self._lock:
                if self._failure is None:
                    self._failure = exc
        finally:
            with self._lock:
                self._running -= 1
                self._lock.notify_all()

    def finish(self) -> None:
        """Wait for the items in progress, then raise the first failure (in the caller's thread)."""
        with self._lock:
            while self._running:
                self._lock.wait()
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        """No more items are handed out (the caller is done or cancelled); those in progress finish."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._by_node.clear()


class Scheduler:
    """``workers - 1`` threads (the caller's thread is the last worker), started on first use."""

    def __init__(self, workers: int, name: str = "tui-acc-metrics") -> None:
        self.workers = workers
        self._name = name
        self._batches: list[Batch[Any]] = []  # oldest first; the newest open one is served first
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closing = False

    @contextmanager
    def batch(
        self,
        items: Iterable[Item],
        compute: Callable[[Item], None],
        should_stop: StopCheck,
        node_of: Callable[[Item], str],
        prefer: Preference | None = None,
    ) -> Iterator[Batch[Item]]:
        """A batch the workers serve while the block runs; closed when it ends. When the block ends
        normally, the items still in progress are waited for and a failure in a worker is raised
        here; a block that raised (a cancel) leaves at once."""
        batch: Batch[Item] = Batch(items, compute, should_stop, node_of, prefer)
        self._start()
        with self._changed:
            self._batches.append(batch)
            self._changed.notify_all()
        try:
            yield batch
        finally:
            batch.close()
            with self._changed:
                self._batches.remove(batch)
        batch.finish()

    def close(self) -> None:
        """The workers end once no batch is left (the engine is being replaced: a re-dump opened);
        a batch opened later is computed by its caller alone."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def threads(self) -> list[threading.Thread]:
        """The worker threads started so far (a copy of the list): what a caller joins after ``close``."""
        return list(self._threads)

    def help(self) -> bool:
        """Compute one item of the newest open batch on the calling thread; False when none is left.

        A caller waiting for a row it needs calls this instead of idling: its thread works on what is
        on screen, and the row it waits for is reached through its own batch as the others drain.
        """
        found = self._next()
        if found is None:
            return False
        batch, item = found
        batch.run(item)
        return True

    def _next(self) -> tuple[Batch[Any], Any] | None:
        with self._changed:
            candidates = [b for b in reversed(self._batches) if b.open]
        for batch in candidates:
            item = batch.take()
            if item is not None:
                return batch, item
        return None

    def _start(self) -> None:
        with self._changed:
            if self._threads or self.workers < 2:
                return
            for number in range(self.workers - 1):
                thread = threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True)
                thread.start()
                self._threads.append(thread)

    def _work(self) -> None:
        """A worker's life: the newest open batch's next item, or sleep until a batch comes."""
        while True:
            found = self._next()
            if found is not None:
                batch, item = found
                batch.run(item)
                continue
            with self._changed:  # batches are added under this lock: no wake-up is missed
                if not any(batch.open for batch in self._batches):
                    if self._closing:
                        return
                    self._changed.wait()
