"""The compiled kernel loaded in the background, before the first pair needs it.

Loading it (numba's import, then its cached machine code for the kernel's two signatures) takes about
half a second on every launch, and compiling it on a machine that has never run it a few seconds.
Nothing about it depends on the dumps, so a command that will compare starts it first and opens
the dumps meanwhile; the first ``compare_tensors`` then finds it ready (or waits on numba's own
lock for the rest). The TUI starts it once its first screen is up, so it never delays that.
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_thread: threading.Thread | None = None


def start_loading() -> None:
    """Load the kernel on a thread of its own (once per process; later calls do nothing)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="tui-acc-kernel-load", daemon=True)
            _thread.start()


def _load() -> None:
    # a failure here is met again by the first comparison, which reports it as that pair's error
    with contextlib.suppress(Exception):
        from tui_acc.metrics.kernels import warm_up

        warm_up()
