"""Running a re-dump: its own process group, output into a log file that a thread follows.

The child writes straight into ``redump.log`` (not into a pipe to us), so a run the user detaches
keeps going and keeps logging after tui-acc exits; the follower thread only reads that file.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tui_acc.redump.plan import RedumpPlan
from tui_acc.redump.selection import RedumpError

MAX_LINES = 5000  # kept for the log panel; the file has everything
# Seconds a stopped dumper has to end after SIGTERM before SIGKILL: the user's stop key gives it
# time to flush its files; tui-acc ending (quit, a signal, exit) gives it less.
STOP_GRACE = 5.0
EXIT_GRACE = 2.0


class RedumpRun:
    """One re-dump process. ``status``: running, succeeded, failed, cancelled, detached."""

    def __init__(
        self,
        plan: RedumpPlan,
        cwd: Path | None = None,
        on_line: Callable[[str], None] | None = None,
        on_exit: Callable[[RedumpRun], None] | None = None,
    ) -> None:
        self.plan = plan
        self.cwd = cwd
        self.on_line = on_line
        self.on_exit = on_exit
        self.lines: list[str] = []  # the last MAX_LINES lines
        self.emitted = 0  # every line so far (``lines`` keeps only the last ones)
        self.status = "not started"
        self.returncode: int | None = None
        self.started = 0.0
        self.ended: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._follower: threading.Thread | None = None
        self._stop_following = threading.Event()
        self._done = threading.Event()
        self._news = threading.Condition()  # a new line, or the end

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the new folder, write the config files, start the command (no shell unless planned)."""
        plan = self.plan
        try:
            plan.folder.mkdir(parents=True, exist_ok=False)
        except FileExistsError as exc:
            problem = f"{plan.folder}: already exists; a re-dump always goes to a new folder"
            raise RedumpError(problem) from exc
        except OSError as exc:
            raise RedumpError(f"{plan.folder}: cannot create it ({exc.strerror})") from exc
        try:  # a full disk or a folder made read-only under us: an error the dialog shows, not a crash
            for path, text in plan.files.items():
                path.write_text(text + "\n", encoding="utf-8")
            log = plan.log.open("ab")
        except OSError as exc:
            raise RedumpError(
                f"{exc.filename or plan.folder}: cannot write it ({exc.strerror or exc})"
            ) from exc
        try:
            log.write(f"$ {plan.command_line()}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                plan.argv,
                cwd=self.cwd,
                env={**os.environ, **plan.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: cancel stops it and its children
            )
        except OSError as exc:
            self.status, self.ended = "failed", time.monotonic()
            log.write(f"tui-acc: cannot start {plan.argv[0]!r}: {exc.strerror or exc}\n".encode())
            log.close()
            self._done.set()
            raise RedumpError(f"cannot start {plan.argv[0]!r}: {exc.strerror or exc}") from exc
        log.close()  # the child has its own copy of the descriptor
        self.status, self.started = "running", time.monotonic()
        # However tui-acc ends (an exception, a signal turned into an exit), a run the user did
        # not choose to leave running does not outlive it.
        atexit.register(self.stop, EXIT_GRACE)
        self._follower = threading.Thread(target=self._follow, name="tui-acc-redump-log", daemon=True)
        self._follower.start()

    def _follow(self) -> None:
        process = self._process
        assert process is not None
        with self.plan.log.open("rb") as handle:
            pending = b""
            while True:
                chunk = handle.read(65536)
                if chunk:
                    pending = self._emit(pending + chunk)
                    continue
                if self._stop_following.is_set():
                    return
                try:
                    process.wait(timeout=0.1)  # the wait is the pacing: a quiet run costs nothing
                except subprocess.TimeoutExpired:
                    continue
                rest = handle.read()
                pending = self._emit(pending + rest)
                if pending:
                    self._line(pending.decode(errors="replace"))
                break
        self.returncode = process.returncode
        self.ended = time.monotonic()
        if self.status == "running":
            self.status = "succeeded" if process.returncode == 0 else "failed"
        self._done.set()
        with self._news:
            self._news.notify_all()
        if self.on_exit is not None:
            self.on_exit(self)

    def _emit(self, data: bytes) -> bytes:
        *complete, rest = data.split(b"\n")
        for raw in complete:
            self._line(raw.rstrip(b"\r").decode(errors="replace"))
        return rest

    def _line(self, text: str) -> None:
        with self._news:  # a waiter sees the line only once on_line has had it
            self.emitted += 1
            self.lines.append(text)
            if len(self.lines) > MAX_LINES:
                del self.lines[: len(self.lines) - MAX_LINES]
            if self.on_line is not None:
                self.on_line(text)
            self._news.notify_all()

    def lines_since(self, seen: int) -> tuple[list[str], int]:
        """The lines after the first ``seen`` (those still kept), and how many there are now."""
        with self._news:
            new = min(self.emitted - seen, len(self.lines))
            return self.lines[len(self.lines) - new :] if new > 0 else [], self.emitted

    def stop(self, grace: float) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL if it is still there after ``grace``
        seconds (0: at once). Blocks up to ``grace``: a UI calls it off its event loop. The one way
        a run is stopped (the stop key, quitting, a signal, exit); a detached run is left running.
        """
        process = self._process
        if process is None or process.poll() is not None or self.status == "detached":
            return
        self.status = "cancelled"
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # children that outlived their parent

    def detach(self) -> None:
        """Leave it running (it logs to ``plan.log``); stop following it."""
        if self.running:
            self.status = "detached"
        self._stop_following.set()
        with self._news:
            self._news.notify_all()  # no more lines will come: wait_for_line returns

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the process ended and its log is read (for scripts and tests)."""
        return self._done.wait(timeout)

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float | None = None) -> bool:
        """Block until a logged line satisfies ``predicate`` (True), or the run ended, was detached
        or the time ran out (False, unless such a line came in time).

        ``on_line`` has been called for that line by the time this returns.
        """

        def seen() -> bool:
            return any(predicate(line) for line in self.lines)

        def over() -> bool:
            return self._done.is_set() or self._stop_following.is_set()

        with self._news:
            self._news.wait_for(lambda: seen() or over(), timeout)
            return seen()

    # --- state --------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the process is still running (not yet ended, stopped or detached)."""
        return self.status == "running"

    @property
    def pid(self) -> int | None:
        """The process's id (the leader of its process group); None before it starts."""
        return self._process.pid if self._process is not None else None

    def elapsed(self) -> float:
        """Seconds since the run started (monotonic clock), up to its end once it ended; 0 before it
        starts."""
        if not self.started:
            return 0.0
        return (self.ended or time.monotonic()) - self.started


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, sig)
