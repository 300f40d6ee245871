"""A terminal of our own for the benchmarks: a pty whose output this process reads and draws.

``PtyTerminal`` starts a program on a pseudo-terminal it owns, at a given size, as a terminal
emulator does; it answers textual's query for synchronized output (DEC mode 2026), so that every
frame comes framed, and it keeps the screen as a terminal would (``Cells``: each cell's character
and background colour). ``wait_for`` reads what the program writes and returns the moment the first
frame that satisfies a test of the screen arrived: a keystroke's latency, as a user sees it, from
the byte written to the terminal to the frame on it. Only what textual writes is understood
(cursor moves, SGR colours, text; every other sequence is read and ignored). No tmux and no polling
of a screen: the time of each frame is the time its last byte was read.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rich.cells import get_character_cell_size

SYNC_START, SYNC_END = "\x1b[?2026h", "\x1b[?2026l"  # a frame begins / ends (textual's _display)
# textual asks whether the terminal supports synchronized output; the answer: supported, reset
ASKS_SYNC, SUPPORTS_SYNC = b"\x1b[?2026$p", b"\x1b[?2026;2$y"

_TOKEN = re.compile(
    r"\x1b\[([?>=<]?)([0-9;:]*)[ -/]*([@-~])"  # CSI: private marker, parameters, final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (the window title): ignored
    r"|\x1b[()#%].|\x1b[^\[\]]"  # character sets and other two-byte escapes: ignored
    r"|[\x00-\x1f]"  # a control character
    r"|[^\x00-\x1f]+"  # text
)

Colour = tuple[int, ...] | None


class Cells:
    """A screen of ``width`` x ``height`` cells: the text and each cell's background colour."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.chars = [[" "] * width for _ in range(height)]
        self.backgrounds: list[list[Colour]] = [[None] * width for _ in range(height)]
        self.x = self.y = 0
        self.background: Colour = None

    def feed(self, data: str) -> None:
        """Apply what the program wrote (no line wrap: textual turns it off)."""
        for match in _TOKEN.finditer(data):
            final = match.group(3)
            if final is not None:
                if not match.group(1):  # private modes (?25l ...) change nothing drawn
                    self._csi(match.group(2), final)
                continue
            text = match.group(0)
            if text[0] == "\r":
                self.x = 0
            elif text[0] == "\n":
                self.y = min(self.y + 1, self.height - 1)
            elif text[0] >= " ":
                self._text(text)

    def lines(self) -> list[str]:
        """The screen's text, a string a row (a wide character's second cell is empty)."""
        return ["".join(row) for row in self.chars]

    def text(self) -> str:
        """The screen's text, rows joined by newlines."""
        return "\n".join(self.lines())

    def _text(self, text: str) -> None:
        row, backgrounds = self.chars[self.y], self.backgrounds[self.y]
        for char in text:
            width = get_character_cell_size(char)
            if width == 0 or self.x + width > self.width:
                continue
            row[self.x], backgrounds[self.x] = char, self.background
            if width == 2:
                row[self.x + 1], backgrounds[self.x + 1] = "", self.background
            self.x += width

    def _csi(self, parameters: str, final: str) -> None:
        numbers = [int(p) if p.isdigit() else 0 for p in parameters.replace(":", ";").split(";")]
        if final == "m":
            self._sgr(numbers)
        elif final in "Hf":  # cursor position, 1-based
            row = numbers[0] if numbers[0] else 1
            column = numbers[1] if len(numbers) > 1 and numbers[1] else 1
            self.y, self.x = min(row, self.height) - 1, min(column, self.width) - 1
        elif final == "J" and numbers[0] == 2:  # erase the screen
            self.chars = [[" "] * self.width for _ in range(self.height)]
            self.backgrounds = [[self.background] * self.width for _ in range(self.height)]

    def _sgr(self, numbers: list[int]) -> None:
        index = 0
        while index < len(numbers):
            number = numbers[index]
            if number in (0, 49):
                self.background = None
            elif number in (38, 48):  # 38;2;r;g;b or 38;5;n: the foreground is not kept
                truecolour = index + 1 < len(numbers) and numbers[index + 1] == 2
                step = 4 if truecolour else 2
                if number == 48:
                    self.background = tuple(numbers[index + 2 : index + step + 1])
                index += step
            elif 40 <= number <= 47 or 100 <= number <= 107:
                self.background = (number,)
            index += 1


class PtyTerminal:
    """``command`` running on a pty of ``width`` x ``height`` that this object reads and draws."""

    def __init__(
        self, command: Sequence[str], cwd: Path, env: dict[str, str], width: int = 120, height: int = 40
    ) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
        self.process = subprocess.Popen(
            list(command), stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, start_new_session=True
        )
        os.close(slave)
        os.set_blocking(self.master, False)
        self.cells = Cells(width, height)
        self._pending = ""  # output read, not yet drawn: the rest of a frame
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode  # chunks cut anywhere
        self._synchronised = False  # frames are framed once textual knows the terminal does it
        self.drawn_at = time.perf_counter()  # when the frame last drawn arrived
        self._frames: list[tuple[float, str]] = []  # (when its last byte was read, the frame): not drawn yet

    def send(self, keys: str) -> float:
        """Type ``keys``; returns the moment they were written (``time.perf_counter``)."""
        start = time.perf_counter()
        os.write(self.master, keys.encode())
        return start

    def wait_for(self, test: Callable[[Cells], bool], what: str, timeout: float = 30.0) -> float:
        """Draw frame after frame until one leaves the screen satisfying ``test``; returns when that
        frame's last byte was read (``time.perf_counter``).

        Raises:
            TimeoutError: no frame did within ``timeout`` seconds (the screen is in the message).
        """
        deadline = time.perf_counter() + timeout
        if test(self.cells):
            return self.drawn_at
        while time.perf_counter() < deadline and self.process.poll() is None:
            for arrived in self.frames(deadline - time.perf_counter()):
                if test(self.cells):
                    return arrived  # the frames after it stay to be drawn
        raise TimeoutError(f"waited {timeout} s for {what}; the screen:\n{self.cells.text()}")

    def frames(self, timeout: float) -> Iterator[float]:
        """Wait up to ``timeout`` for output, then draw what came a frame at a time, yielding when
        each frame's last byte was read, the screen as that frame left it."""
        if not self._frames:
            self._read(max(timeout, 0.0))
        while self._frames:  # one at a time: the first frame that shows a result is the one timed
            self._draw(*self._frames.pop(0))
            yield self.drawn_at

    def settle(self, quiet: float = 0.2, timeout: float = 10.0) -> None:
        """Read and draw until the program has written nothing for ``quiet`` seconds."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline and self._read(quiet):
            self._draw_all()
        self._draw_all()

    def _draw_all(self) -> None:
        for arrived, frame in self._frames:
            self._draw(arrived, frame)
        self._frames.clear()

    def _draw(self, arrived: float, frame: str) -> None:
        self.cells.feed(frame)
        self.drawn_at = arrived

    def _read(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for output and read all there is, each piece timed as it comes off
        the pty, cut into whole frames (``_frames``); whether anything was read."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        read = False
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:  # BlockingIOError: nothing more for now; EIO: the program ended
                break
            if not chunk:
                break
            read, arrived = True, time.perf_counter()
            if ASKS_SYNC in chunk:
                os.write(self.master, SUPPORTS_SYNC)
            self._pending += self._decode(chunk)
            self._cut_frames(arrived)
        return read

    def _cut_frames(self, arrived: float) -> None:
        """Move each whole frame pending to ``_frames`` (all of it, before textual frames its output)."""
        if SYNC_START in self._pending:
            self._synchronised = True
        if not self._synchronised:
            self._frames.append((arrived, self._pending))
            self._pending = ""
            return
        while (end := self._pending.find(SYNC_END)) >= 0:
            self._frames.append((arrived, self._pending[:end]))
            self._pending = self._pending[end + len(SYNC_END) :]

    def close(self, timeout: float = 10.0) -> None:
        """End the program (SIGHUP as a closed terminal sends, then SIGKILL) and close the pty."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(1)  # SIGHUP: tui-acc ends as q ends it
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self.master)
