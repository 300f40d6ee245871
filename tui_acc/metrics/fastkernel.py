"""Which compiled kernel sweeps the chunks: the C extension, else numba, else none (numpy).

Every compiled kernel has one calling convention, ``sweep(g, t, offset, kl, sums, counts)``: g and t
are C-contiguous 2-D float32 or float64 chunks of one dtype, ``offset`` the flat index of their
first element, ``sums``/``counts`` the state of ``kernel_layout``, updated in place. Where none is
available ``kernels`` computes the same metrics with numpy; the tests hold the three to the same
results.

The order, first available wins:

1. ``c``: ``_ckernel.c``, built when the package is installed (optional: it needs a C compiler).
   It loads in a millisecond; numba's import and cached machine code cost about half a second and
   140 MiB on every launch, so numba is never imported when this one is there.
2. ``numba``: ``numba_kernel``.
3. ``numpy``: no compiled kernel (``available()`` is False).

``TUI_ACC_KERNEL=c|numba|numpy`` forces one; forcing one that is not available is an error
(``KernelUnavailable``), never a silent fallback. The variable is read at every call, so a test
can switch kernels between comparisons.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from tui_acc.errors import TuiAccError

ENV = "TUI_ACC_KERNEL"
# in the order they are tried
KERNELS = ("c", "numba", "numpy")

Sweep = Callable[[Any, Any, int, bool, Any, Any], None]


class KernelUnavailable(TuiAccError, RuntimeError):
    """``TUI_ACC_KERNEL`` names a kernel that is unknown or not available on this machine."""


_lock = threading.Lock()
# kernel name -> its sweep, or the reason it cannot be loaded; filled once per name
_loaded: dict[str, Sweep | str] = {}


def compiled(name: str) -> Sweep | str:
    """Kernel ``name``'s sweep (imported on first use), or why it is not available here."""
    found = _loaded.get(name)
    if found is None:
        with _lock:  # two worker threads asking at once import it once
            found = _loaded.get(name)
            if found is None:
                found = _loaded[name] = _import(name)
    return found


def _import(name: str) -> Sweep | str:
    try:
        if name == "c":
            from tui_acc.metrics import _ckernel

            return _ckernel.sweep
        if name == "numba":
            from tui_acc.metrics import numba_kernel

            if numba_kernel.sweep is None:
                return "numba is not installed"
            return numba_kernel.sweep
    except Exception as error:  # not built (no C compiler at install time), a numba that fails to load
        return f"{type(error).__name__}: {error}"
    return "the numpy kernel is not compiled"


def kernel_name() -> str:
    """The kernel in use now: ``TUI_ACC_KERNEL`` if set, else the first available of KERNELS."""
    forced = os.environ.get(ENV, "").strip().lower()
    if forced:
        if forced not in KERNELS:
            raise KernelUnavailable(f"{ENV}={forced!r}: expected one of {', '.join(KERNELS)}")
        if forced != "numpy":
            found = compiled(forced)
            if isinstance(found, str):
                raise KernelUnavailable(
                    f"{ENV}={forced}: the {forced} kernel is not available here ({found})"
                )
        return forced
    for name in KERNELS[:-1]:
        if not isinstance(compiled(name), str):
            return name
    return "numpy"


def check_forced() -> None:
    """Raise KernelUnavailable now if ``TUI_ACC_KERNEL`` cannot be honoured (said once by the CLI,
    not once per pair). Without the variable nothing is loaded here: the choice is made at first use."""
    if os.environ.get(ENV, "").strip():
        kernel_name()


def available() -> bool:
    """Whether a compiled kernel will run ``sweep`` (else ``kernels`` uses numpy)."""
    return kernel_name() != "numpy"


def bf16_sweep() -> Sweep | None:
    """The C kernel's ``sweep_bf16`` (a bfloat16 test chunk swept as it lies: its uint16 bits, the
    golden float32 or bfloat16 bits alike) where the C kernel is the one in use; else None (the
    chunks are widened for ``sweep``)."""
    if kernel_name() != "c":
        return None
    from tui_acc.metrics import _ckernel

    return getattr(_ckernel, "sweep_bf16", None)  # None: built from an older _ckernel.c


def sweep(g: Any, t: Any, offset: int, kl: bool, sums: Any, counts: Any) -> None:
    """Add one chunk to the state with the chosen compiled kernel (see the module's docstring)."""
    name = kernel_name()
    found = compiled(name)
    if isinstance(found, str):
        raise KernelUnavailable(f"no compiled kernel to sweep with ({name}: {found})")
    found(g, t, offset, kl, sums, counts)
