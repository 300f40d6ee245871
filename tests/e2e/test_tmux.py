"""What an SSH user sees: the real binary in a real terminal (tmux), driven by keystrokes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    def __init__(self, command: list[str], cwd: Path, width: int = 80, height: int = 24) -> None:
        self.name = f"tui-acc-{uuid.uuid4().hex[:8]}"
        subprocess.run(
            [
                "tmux",
                "new-session",
                "-d",
                "-s",
                self.name,
                "-x",
                str(width),
                "-y",
                str(height),
                "-c",
                str(cwd),
                *command,
            ],
            check=True,
        )

    def screen(self) -> str:
        result = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True
        )
        return result.stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
        """Poll the screen until ``predicate`` holds: the app's own progress, not a fixed delay."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def alive(self) -> bool:
        return subprocess.run(["tmux", "has-session", "-t", self.name], capture_output=True).returncode == 0

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def terminal_factory():
    opened: list[Terminal] = []

    def make(command: list[str], cwd: Path) -> Terminal:
        term = Terminal(command, cwd)
        opened.append(term)
        return term

    yield make
    for term in opened:
        term.close()


def test_ssh_user_finds_the_fault_and_exports_it(demo_pair, tmp_path: Path, terminal_factory) -> None:
    from tui_acc import open_comparison

    fault = open_comparison(demo_pair.golden, demo_pair.test).engine.first_failing_op(demo_pair.fault_token)
    assert fault is not None
    tui_acc = [sys.executable, "-m", "tui_acc", str(demo_pair.golden), str(demo_pair.test)]
    term = terminal_factory(tui_acc, tmp_path)
    term.wait_for(lambda s: "first failing: 3" in s, "the token verdicts")
    term.keys("f", "Enter")
    term.wait_for(lambda s: "◆ model.layers.2.mlp.down_proj" in s, "the operator verdicts")
    term.keys("f")
    screen = term.wait_for(lambda s: "model.layers.2.mlp.down_proj  Linear" in s, "the tensor detail")
    assert "◆42" in screen and f"{fault['cosine']:.6f}" in screen
    term.keys("e")
    term.wait_for(lambda s: "Export 58 rows of token3-ops to CSV" in s, "the export dialog")
    term.keys("Enter")
    term.wait_for(lambda s: "exported 58 rows to" in s, "the export path")
    (exported,) = tmp_path.glob("tui-acc-token3-ops-*.csv")
    assert "root.model.layers.2.mlp.down_proj" in exported.read_text()
    term.keys("Escape")
    term.wait_for(lambda s: "Token" in s and "Verdict" in s, "the token list")
    term.keys("q")
    deadline = time.monotonic() + 30
    while term.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not term.alive()


def test_bad_path_prints_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tui_acc", str(tmp_path / "nope"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert f"tui-acc: error: {tmp_path / 'nope'}: no such file or directory" in result.stderr
