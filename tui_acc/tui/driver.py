"""The terminal driver for a terminal that may vanish: an SSH session that drops.

When the terminal hangs up, the kernel sends the session leader SIGHUP and then SIGCONT. Textual's
Linux driver takes any SIGCONT as the end of a Ctrl+Z and resumes: it starts a second writer
thread, whose first write to the dead terminal fails (EIO) and kills it. The writer's queue holds
30 writes; the app's next writes fill it, and the one after (at the latest, the driver's own
``close`` on the way out) blocks the event loop for good. Every dropped session then left a
tui-acc process behind, holding its memory and its dumps open. This driver resumes only what it
suspended, and its output goes nowhere, without an error, once the terminal is gone.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import IO, Any

from textual.drivers.linux_driver import LinuxDriver

# What a write to a terminal that hung up (or a closed pipe or descriptor) fails with.
_GONE = frozenset({errno.EIO, errno.EPIPE, errno.ENXIO, errno.EBADF, errno.ENODEV})


class TerminalOutput:
    """The driver's output file. It never raises: textual's writer thread would die of it.

    Once the terminal is gone (``_GONE``) it is a sink; any other error (say EAGAIN, when something
    left the terminal non-blocking) loses that one write, which leaves some cells stale until they
    are drawn again, rather than stopping all output for good.
    """

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> None:
        """Write ``text`` to the terminal; a no-op once it is gone, never raises."""
        self._attempt(self._file.write, text)

    def flush(self) -> None:
        """Flush the terminal; a no-op once it is gone, never raises."""
        self._attempt(self._file.flush)

    def _attempt(self, operation: Callable[..., object], *args: object) -> None:
        if self.gone:
            return
        try:
            operation(*args)
        except OSError as exc:
            self.gone = exc.errno in _GONE

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class HangupSafeDriver(LinuxDriver):
    """Textual's Linux driver, safe against a terminal that hangs up (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert self._file is not None  # sys.__stderr__: a terminal app has one
        self._file = TerminalOutput(self._file)  # type: ignore[assignment]  # a file in all it is asked
        self._suspended = False

    def _sigtstp_application(self, *args: Any) -> None:
        self._suspended = True
        super()._sigtstp_application(*args)

    def _sigcont_application(self, *args: Any) -> None:
        if self._suspended:  # the end of a Ctrl+Z, not the SIGCONT that comes with a hang-up
            self._suspended = False
            super()._sigcont_application(*args)
