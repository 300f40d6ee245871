"""A dropped SSH session: the driver neither dies on the dead terminal nor resumes on its SIGCONT."""

from __future__ import annotations

import errno
import io
import os
import signal
import sys

import pytest

from tui_acc.tui.app import AccApp
from tui_acc.tui.driver import HangupSafeDriver, TerminalOutput

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no terminal hang-up on Windows")


def test_output_to_a_terminal_that_hung_up_goes_nowhere_without_an_error() -> None:
    terminal, app_side = os.openpty()
    with os.fdopen(app_side, "w") as file:
        output = TerminalOutput(file)
        output.write("before\n")
        output.flush()
        assert os.read(terminal, 100) == b"before\r\n" and not output.gone
        os.close(terminal)  # the terminal hangs up: a write to it now fails with EIO
        output.write("x" * 100_000)
        output.flush()
        assert output.gone
        output.write("after")  # and later writes are dropped, not raised
        output.flush()


def test_a_passing_error_loses_one_write_not_the_terminal() -> None:
    class Busy(io.StringIO):
        busy = True

        def write(self, text: str) -> int:
            if self.busy:
                self.busy = False
                raise BlockingIOError(errno.EAGAIN, "try again")
            return super().write(text)

    file = Busy()
    output = TerminalOutput(file)
    output.write("lost")
    output.write("kept")
    assert not output.gone and file.getvalue() == "kept"


async def test_sigcont_without_a_suspend_does_not_resume(
    demo_app: AccApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    try:
        driver = HangupSafeDriver(demo_app)  # installs its SIGTSTP/SIGCONT handlers
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    resumed: list[bool] = []
    monkeypatch.setattr(driver, "resume_application_mode", lambda: resumed.append(True))
    driver._sigcont_application(signal.SIGCONT, None)  # what the kernel sends with SIGHUP
    assert resumed == []
    driver._suspended = True  # as after Ctrl+Z
    driver._sigcont_application(signal.SIGCONT, None)
    assert resumed == [True]
    assert isinstance(driver._file, TerminalOutput)


def test_the_app_uses_it_in_a_terminal(demo_app: AccApp) -> None:
    assert AccApp.get_driver_class(demo_app) is HangupSafeDriver
