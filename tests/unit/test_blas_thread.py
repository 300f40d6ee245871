"""BLAS held to one thread while a replay runs (verdicts/blas_threads.py): the engine
already runs a worker per core. Held while any replay runs, on any thread; the process's own setting
back once none does, however often it is taken."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import threadpoolctl

from tui_acc.verdicts.blas_threads import one_blas_thread


def _blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}


def test_blas_is_held_to_one_thread_while_any_replay_runs_and_given_back_after() -> None:
    assert np.dot(np.ones(4), np.ones(4)) == 4  # numpy's BLAS loaded
    before = _blas_threads()
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):  # a setting of the process's own
        own = _blas_threads()
        for _ in range(3):  # taken again and again: the libraries are found once, the setting each time
            with one_blas_thread():
                assert _blas_threads() <= {1}
            assert _blas_threads() == own
        alone: list[set[int]] = []

        def replay_alone() -> None:  # after this thread's replays: another thread's is held too
            with one_blas_thread():
                alone.append(_blas_threads())

        worker = threading.Thread(target=replay_alone)
        worker.start()
        worker.join()
        assert alone == [{1}] and _blas_threads() == own
        inside, other_done = threading.Event(), threading.Event()
        seen: list[set[int]] = []

        def other_replay() -> None:
            with one_blas_thread():
                inside.set()
                other_done.wait()
            seen.append(_blas_threads())

        with one_blas_thread():
            worker = threading.Thread(target=other_replay)
            worker.start()
            inside.wait()
        assert _blas_threads() <= {1}  # the other replay still runs: still one thread
        other_done.set()
        worker.join()
        assert seen == [own] and _blas_threads() == own
    assert _blas_threads() == before


def test_a_live_worker_that_replayed_leaves_the_rest_of_the_process_its_say() -> None:
    """threadpoolctl 3.8 ignores every thread but the one in control while it lives: a metrics worker
    (long-lived) that ran one replay must not keep the control, or the main thread's own limit is
    silently dropped."""
    assert np.dot(np.ones(4), np.ones(4)) == 4
    before = _blas_threads()

    def replay() -> set[int]:
        with one_blas_thread():
            return _blas_threads()

    with ThreadPoolExecutor(max_workers=1) as worker:
        assert worker.submit(replay).result() == {1}
        assert _blas_threads() == before  # the worker lives on, idle
        with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
            assert _blas_threads() == {1}  # the main thread's own limit holds
        assert _blas_threads() == before
