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

from typing import IO, Any

from textual.drivers.linux_driver import LinuxDriver


class TerminalOutput:
    """The driver's output file: once a write or flush fails (the terminal is gone), a sink."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> None:
        if not self.gone:
            try:
                self._file.write(text)
            except OSError:
                self.gone = True

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except OSError:
                self.gone = True

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
