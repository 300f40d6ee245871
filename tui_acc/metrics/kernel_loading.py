"""The compiled kernel loaded in the background, before the first pair needs it.

Loading it takes under a millisecond with the C kernel; where only numba is there, its import and
cached machine code for the kernel's two signatures take about half a second on every launch, and
compiling them on a machine that has never run it a few seconds.
Nothing about it depends on the dumps, so a command that will compare starts it first and opens
the dumps meanwhile; the first ``compare_tensors`` then finds it ready (or waits on numba's own
lock for the rest). The TUI starts it once its first screen is up, so it never delays that.
"""

from __future__ import annotations

import atexit
import contextlib
import threading

_lock = threading.Lock()
_thread: threading.Thread | None = None
# how long a process that ends waits for the loading to finish (it is an import: well under this)
_EXIT_WAIT_SECONDS = 60.0


def start_loading() -> None:
    """Load the kernel on a thread of its own (once per process; later calls do nothing). A process
    that ends meanwhile (a report refusing its input at once) waits for it first: an interpreter
    torn down while that thread is inside numpy's import crashed (SIGSEGV, one exit in two)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="tui-acc-kernel-load", daemon=True)
            _thread.start()
            atexit.register(_thread.join, _EXIT_WAIT_SECONDS)


def _load() -> None:
    # a failure here is met again by the first comparison, which reports it as that pair's error
    with contextlib.suppress(Exception):
        from tui_acc.metrics.kernels import warm_up

        warm_up()
