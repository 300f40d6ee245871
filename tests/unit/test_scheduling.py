"""The engine-wide scheduler: what is on screen first, workers started once, no failure lost.

No test sleeps: each waits on events the work itself sets, with generous timeouts that only a
hang would reach.
"""

from __future__ import annotations

import threading

import pytest

from tui_acc.metrics.scheduling import Batch, Scheduler

WAIT = 60  # seconds; reached only if the scheduler hangs


def _node(item: str) -> str:
    return item[0]


def test_a_batch_serves_the_preferred_nodes_first_and_rereads_the_preference() -> None:
    wanted: set[str] = {"d"}
    batch: Batch[str] = Batch(
        ["a1", "b1", "c1", "d1", "e1"], lambda _: None, lambda: False, _node, lambda: wanted
    )
    assert batch.take() == "d1"
    assert batch.take() == "a1"  # nothing preferred left: the caller's order
    wanted = {"e", "c"}  # the user scrolled: asked again before every item
    assert [batch.take(), batch.take()] == ["c1", "e1"]
    batch.close()
    assert batch.take() is None and not batch.open


def test_the_newest_batch_is_served_first_and_the_older_one_resumes() -> None:
    """The token list (batch A) is computing when the user opens an operator screen (batch B): the
    worker finishes the item in hand, then serves all of B before the rest of A."""
    scheduler = Scheduler(workers=2)  # one worker thread; the test's thread never helps
    order: list[str] = []
    started, release, b_done, a_done = (threading.Event() for _ in range(4))

    def compute(item: str) -> None:
        order.append(item)
        if item == "a1":
            started.set()
            assert release.wait(WAIT)
        if item == "b2":
            b_done.set()
        if item == "a3":
            a_done.set()

    with scheduler.batch(["a1", "a2", "a3"], compute, lambda: False, _node):
        assert started.wait(WAIT)  # the worker holds a1
        with scheduler.batch(["b1", "b2"], compute, lambda: False, _node):
            release.set()
            assert b_done.wait(WAIT)
        assert a_done.wait(WAIT)
    assert order == ["a1", "b1", "b2", "a2", "a3"]


def test_a_stopped_batch_is_not_served() -> None:
    scheduler = Scheduler(workers=2)
    order: list[str] = []
    stop_a = threading.Event()
    started, release, b_done = (threading.Event() for _ in range(3))

    def compute(item: str) -> None:
        order.append(item)
        if item == "a1":
            started.set()
            assert release.wait(WAIT)
        if item == "b1":
            b_done.set()

    with scheduler.batch(["a1", "a2"], compute, stop_a.is_set, _node):
        assert started.wait(WAIT)
        stop_a.set()  # the user left the screen: its worker was cancelled
        with scheduler.batch(["b1"], compute, lambda: False, _node):
            release.set()
            assert b_done.wait(WAIT)
    assert order == ["a1", "b1"]


def test_workers_are_started_once_for_every_batch() -> None:
    scheduler = Scheduler(workers=3, name="tui-acc-test-once")
    for _ in range(3):
        with scheduler.batch(["a", "b", "c"], lambda _: None, lambda: False, _node) as batch:
            while scheduler.help():
                pass
        assert not batch.open
    threads = [t for t in threading.enumerate() if t.name.startswith("tui-acc-test-once")]
    assert len(threads) == 2


def test_an_exception_in_a_worker_thread_reaches_the_caller() -> None:
    scheduler = Scheduler(workers=2)
    raised = threading.Event()

    def compute(item: str) -> None:
        if item == "bad":
            assert threading.current_thread() is not threading.main_thread()
            raised.set()
            raise ValueError("a worker failed on bad")

    with (
        pytest.raises(ValueError, match="a worker failed on bad"),
        scheduler.batch(["bad"], compute, lambda: False, _node),
    ):
        assert raised.wait(WAIT)  # the worker thread took it; this thread never helped


def test_closing_ends_the_workers_once_their_batches_are_done() -> None:
    scheduler = Scheduler(workers=3, name="tui-acc-test-close")
    with scheduler.batch(["a", "b"], lambda _: None, lambda: False, _node):
        while scheduler.help():
            pass
    threads = scheduler.threads()
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    scheduler.close()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    done: list[str] = []
    with scheduler.batch(["c", "d"], done.append, lambda: False, _node):
        while scheduler.help():  # no worker left: the caller computes alone
            pass
    assert done == ["c", "d"]
