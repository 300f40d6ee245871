"""NO_COLOR in a real terminal: the failures are drawn bold or reverse, never the faintest thing."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_tmux import Terminal
from tests.processes import all_end

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

_SGR_OR_CHAR = re.compile(r"\x1b\[([0-9;]*)m|\x1b[^m]*?[A-Za-z]|(.)")


def attributes_at(line: str, text: str) -> set[str]:
    """The attributes (``bold``, ``reverse``) in force where ``text`` starts on a captured line."""
    bold = reverse = False
    drawn: list[tuple[str, set[str]]] = []
    for match in _SGR_OR_CHAR.finditer(line):
        params, char = match.group(1), match.group(2)
        if char is not None:
            drawn.append((char, {name for name, on in (("bold", bold), ("reverse", reverse)) if on}))
            continue
        if params is None:
            continue
        codes = (params or "0").split(";")
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in ("38", "48", "58"):  # a colour: 5;N or 2;R;G;B follows
                i += 3 if codes[i + 1 : i + 2] == ["5"] else 5
                continue
            if code in ("0", ""):
                bold = reverse = False
            elif code == "1":
                bold = True
            elif code == "22":
                bold = False
            elif code == "7":
                reverse = True
            elif code == "27":
                reverse = False
            i += 1
    where = "".join(char for char, _ in drawn).find(text)
    assert where >= 0, f"{text!r} is not on the line {line!r}"
    return drawn[where][1]


def test_attributes_are_read_from_the_escapes() -> None:
    line = "\x1b[38;5;237mab\x1b[1m\x1b[48;5;241m \x1b[7m◆42\x1b[0m"
    assert attributes_at(line, "◆") == {"bold", "reverse"}
    assert attributes_at(line, "b") == set()
    assert attributes_at("\x1b[1;7m\x1b[0m\x1b[38;2;1;2;3m◆", "◆") == set()


@pytest.fixture
def no_color_terminal(demo_pair, tmp_path: Path) -> Iterator[Terminal]:
    """tui-acc on the demo pair with NO_COLOR=1, at 80x24; it must end when its terminal closes."""
    command = [
        "env",
        "NO_COLOR=1",
        sys.executable,
        "-m",
        "tui_acc",
        str(demo_pair.golden),
        str(demo_pair.test),
    ]
    term = Terminal(command, tmp_path)
    try:
        yield term
    finally:
        term.close()
        try:
            assert all_end([term.ending], 30), (
                f"tui-acc (pid {term.pid}) still runs after its terminal closed"
            )
        finally:
            os.close(term.ending)


def test_without_colour_the_first_failing_operator_is_bold_or_reverse(no_color_terminal: Terminal) -> None:
    term = no_color_terminal
    term.keys("f")  # one key from launch: the first failing token, at its first failing operator
    term.wait_for(
        lambda s: "◆42" in s and "error starts here" in s and "any key cancels" not in s,
        "the cursor on the first failing operator, its tensor detail shown",
    )
    plain, styled = term.screen().splitlines(), term.screen(escapes=True).splitlines()
    assert len(plain) == len(styled)

    def line(*parts: str) -> str:
        found = [styled[i] for i, text in enumerate(plain) if all(part in text for part in parts)]
        assert len(found) == 1, (parts, "\n".join(plain))
        return found[0]

    row = line("◆42")
    assert attributes_at(row, "◆") & {"bold", "reverse"}, repr(row)
    assert attributes_at(row, "✗L") & {"bold", "reverse"}, repr(row)
    verdict = line("error starts here")
    assert attributes_at(verdict, "✗") & {"bold", "reverse"}, repr(verdict)
    # a failing row away from the cursor: its name stands out too (red was grey on grey)
    failing = line("2.mlp ", "✗c")
    assert "bold" in attributes_at(failing, "2.mlp "), repr(failing)
    passing = line("2.mlp.up_proj ")
    assert "bold" not in attributes_at(passing, "2.mlp.up_proj"), repr(passing)
    # the cursor row is in reverse video: no colour is sent, so its background cannot say it
    assert "reverse" in attributes_at(row, "2.mlp.down_proj"), repr(row)
    assert "reverse" not in attributes_at(failing, "2.mlp "), repr(failing)
