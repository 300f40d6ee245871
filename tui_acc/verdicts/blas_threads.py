"""BLAS on one thread while any replay runs.

The engine already runs a worker per core; BLAS's own threads on top of them (OpenBLAS starts one
per core for each call) made a report with replays three times slower on two cores. The first
replay to start sets BLAS to one thread, the last to end sets back what the process had.

Replays run on any thread, so the one that sets is seldom the one that sets back. threadpoolctl 3.8
lets only one "controlling" thread change OpenBLAS's process-wide pool (the first that did, while it
lives) and silently ignores the others: there a worker's replay would run on BLAS's every thread, and
the process's own setting would never come back. Every change here is made under one lock, by the
thread that makes it, and no thread keeps the control after it (``OpenBLASController.
clear_controlling_thread``, before and after): a long-lived worker that replayed once must not leave
the rest of the process, its own ``threadpool_limits`` included, without a say. Older threadpoolctl
has no such rule and no such call.

The BLAS libraries are found once, at the first replay: replays compute with numpy, whose BLAS is
loaded by then (looking again took 2 ms a replay).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_users = 0  # replays running now
_limit: Any = None  # threadpoolctl's limiter while one runs: what sets the process's setting back
_controller: Any = None  # found once: looking for the loaded BLAS libraries takes 2 ms a call


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread while this and any other replay run (see the module's docstring)."""
    global _users, _limit
    with _lock:
        if _users == 0:
            _hand_over_control()
            _limit = _blas().limit(limits=1, user_api="blas")
            _hand_over_control()
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _limit is not None:
                _hand_over_control()
                _limit.restore_original_limits()
                _hand_over_control()
                _limit = None


def _blas() -> Any:
    global _controller
    if _controller is None:
        import numpy  # noqa: F401  (its BLAS loaded before the controller looks for it)
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


def _hand_over_control() -> None:
    """No thread controls OpenBLAS's pool now (threadpoolctl 3.8): the next to set it takes control."""
    import threadpoolctl

    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
