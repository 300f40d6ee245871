"""What an SSH user sees: the real binary in a real terminal (tmux), driven by keystrokes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.processes import all_end

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
        pane = ["tmux", "display-message", "-p", "-t", self.name, "#{pane_pid}"]
        self.pid = int(subprocess.run(pane, capture_output=True, text=True, check=True).stdout)
        self.ending = os.pidfd_open(self.pid)  # readable once the app has ended (no pid reuse race)

    def screen(self, escapes: bool = False) -> str:
        """The visible text; with ``escapes``, the SGR colour and style codes as well."""
        command = ["tmux", "capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.name]
        return subprocess.run(command, capture_output=True, text=True).stdout

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
        term.close()  # tmux hangs up the terminal: SIGHUP (and SIGCONT) to the app, as a dropped SSH session
    try:
        for term in opened:
            assert all_end([term.ending], 30), (
                f"tui-acc (pid {term.pid}) still runs after its terminal closed"
            )
    finally:
        for term in opened:
            os.close(term.ending)


def test_ssh_user_finds_the_fault_and_exports_it(demo_pair, tmp_path: Path, terminal_factory) -> None:
    from tui_acc import open_comparison

    fault = open_comparison(demo_pair.golden, demo_pair.test).verdicts.culprit(demo_pair.fault_token)
    assert fault is not None
    tui_acc = [sys.executable, "-m", "tui_acc", str(demo_pair.golden), str(demo_pair.test)]
    term = terminal_factory(tui_acc, tmp_path)
    term.wait_for(lambda s: "first failing: 3" in s, "the token verdicts")
    term.keys("f")  # one key from launch: the first failing token, at its first failing operator
    term.wait_for(lambda s: "◆ model.layers.2.mlp.down_proj" in s, "the operator verdicts")
    screen = term.wait_for(lambda s: "model.layers.2.mlp.down_proj  Linear" in s, "the tensor detail")
    assert "◆42" in screen and f"{fault['cosine']:.6f}" in screen
    term.keys("e")
    term.wait_for(lambda s: "Export 58 rows of token3-ops" in s, "the export dialog")
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


def test_keys_sent_together_after_slash_filter(demo_pair, tmp_path: Path, terminal_factory) -> None:
    """``/mlp`` in one write, as a paste or a laggy SSH link delivers it: all of it is the filter."""
    tui_acc = [sys.executable, "-m", "tui_acc", str(demo_pair.golden), str(demo_pair.test)]
    term = terminal_factory(tui_acc, tmp_path)
    term.wait_for(lambda s: "first failing: 3" in s, "the token verdicts")
    term.keys("f")
    term.wait_for(lambda s: "◆ model.layers.2.mlp.down_proj" in s, "the operator verdicts")
    term.keys("-l", "/mlp")
    screen = term.wait_for(lambda s: "filter 'mlp'" in s or "Replay" in s, "the filter, or a command run")
    assert "Replay" not in screen and "filter 'mlp'" in screen
    rows = [line for line in screen.splitlines() if re.match(r"\S*\s*[◆]?\d+\s{2,}\S", line.split("▕")[-1])]
    assert rows and all("mlp" in row for row in rows), screen


def test_an_msprobe_l1_pair_leads_to_the_faulty_api_call(
    model_case, tmp_path: Path, terminal_factory
) -> None:
    """A real msprobe L1 dump (API calls only): tokens are its forward passes, the culprit an F.linear."""
    import json

    folder = model_case("llama-msprobe-L1")
    case = json.loads((folder / "case.json").read_text())
    term = terminal_factory(
        [sys.executable, "-m", "tui_acc", str(folder / "golden"), str(folder / "test")], tmp_path
    )
    # every token compared (the first failing one is said before the last is done), and no more than
    # the forward passes: no generate() record made a token of its own
    done = f"{case['new_tokens']}/{case['new_tokens']} tokens compared"
    term.wait_for(lambda s: f"first failing: {case['fault_token']}" in s and done in s, "the token verdicts")
    term.keys("f", "Enter")
    term.wait_for(lambda s: f"◆ {case['fault_record']}" in s, "the operator verdicts")
    term.keys("f")
    term.wait_for(
        lambda s: "✗ error starts here" in s and f"{case['fault_record']}  linear" in s, "the detail"
    )
    term.keys("q")
    assert all_end([term.ending], 30)


def test_demo_ranks_leads_to_the_faulty_all_reduce(tmp_path: Path, terminal_factory) -> None:
    """``tui-acc demo --ranks 2 --no-tui``, then ``tui-acc ranks`` on the run it wrote, driven with f."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tui_acc",
            "demo",
            "--ranks",
            "2",
            "--no-tui",
            "--out",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    fault = re.search(r"injected fault: token (\d+), (\S+), rank (\d+):", made.stdout)
    dump = re.search(r"check it:  tui-acc ranks (\S+)", made.stdout)
    assert fault is not None and dump is not None, made.stdout
    token, op, rank = fault.groups()
    term = terminal_factory([sys.executable, "-m", "tui_acc", "ranks", dump.group(1)], tmp_path)
    term.wait_for(lambda s: "96 rows · 1 disagree" in s, "every rank's rows")
    term.keys("f")
    screen = term.wait_for(  # the jump said, and the detail of the row under the cursor drawn
        lambda s: (
            f"first disagreement: token {token}, {op}, rank {rank}" in s
            and f"token {token} · {op} · rank {rank}" in s
        ),
        "the jump",
    )
    assert "FAIL" in screen  # left open: closing its terminal must end it (terminal_factory checks)


_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_PLAIN_SGR = {0, 1, 2, 3, 4, 5, 7, 8, 9, 21, 22, 23, 24, 25, 27, 28, 29, 39, 49}
_SIXTEEN = set(range(30, 38)) | set(range(40, 48)) | set(range(90, 98)) | set(range(100, 108))


def _colours(screen: str) -> list[tuple[str, ...]]:
    """Every colour the terminal was told to use: ("16", code), ("256", n) or ("rgb", r, g, b)."""
    found: list[tuple[str, ...]] = []
    for params in _SGR.findall(screen):
        codes = [int(c) for c in params.split(";") if c] or [0]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in (38, 48, 58) and codes[i + 1] == 5:
                found.append(("256", str(codes[i + 2])))
                i += 3
            elif code in (38, 48, 58) and codes[i + 1] == 2:
                found.append(("rgb", *map(str, codes[i + 2 : i + 5])))
                i += 5
            else:
                if code not in _PLAIN_SGR:
                    found.append(("16", str(code)))
                i += 1
    return found


@pytest.mark.parametrize(
    ("env", "allowed", "what"),
    [
        # no-color.org: no colour codes at all (textual's own answer sent every colour as its grey)
        (["NO_COLOR=1", "TERM=xterm-256color"], None, "NO_COLOR: no colour"),
        (["-u", "COLORTERM", "TERM=screen"], lambda c: c[0] == "16" and int(c[1]) in _SIXTEEN, "16 colours"),
    ],
)
def test_verdicts_read_without_colour(
    demo_pair, tmp_path: Path, terminal_factory, env, allowed, what
) -> None:
    """Every verdict is a word or a symbol, and the terminal gets only the colours it can show."""
    tui_acc = ["env", *env, sys.executable, "-m", "tui_acc", str(demo_pair.golden), str(demo_pair.test)]
    term = terminal_factory(tui_acc, tmp_path)

    def verdicts(screen: str) -> dict[str, list[str]]:
        rows = [line.split() for line in screen.splitlines()]
        return {words[0]: words for words in rows if words and words[0].isdigit()}

    lines = verdicts(term.wait_for(lambda s: "FAIL" in verdicts(s).get("7", []), "the token verdicts"))
    assert "pass" in lines["2"] and "FAIL" in lines["3"]
    term.keys("f", "Enter")
    term.wait_for(lambda s: "◆ model.layers.2.mlp.down_proj" in s, "the operator verdicts")
    term.keys("f")
    ops = term.wait_for(lambda s: "✗ error starts here" in s, "the tensor detail")
    fault = next(line for line in ops.splitlines() if "◆42" in line)
    assert "✗L" in fault and "✓" in fault  # out fails here, in passes: no colour needed to see it
    colours = _colours(term.screen(escapes=True))
    if allowed is None:
        assert colours == [], what
        return
    assert colours, "the capture holds no colour codes at all"
    assert [c for c in colours if not allowed(c)] == [], what


def test_bad_path_prints_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tui_acc", str(tmp_path / "nope"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert f"tui-acc: error: {tmp_path / 'nope'}: no such file or directory" in result.stderr


def _dumpers_writing_into(folder: Path) -> list[int]:
    """Live processes whose TUI_ACC_DUMP_DIR lies in ``folder`` (a re-dump and its children)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = environ.read_bytes()
            state = (environ.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"TUI_ACC_DUMP_DIR={folder}".encode() in env and state not in ("Z", "X"):
            found.append(int(environ.parent.name))
    return found


def test_a_dropped_ssh_session_stops_the_redump(demo_pair, tmp_path: Path, terminal_factory) -> None:
    """Closing the terminal (SIGHUP, as when SSH drops) leaves no re-dump running."""
    import shlex

    infer = [sys.executable, "-m", "tui_acc.demo.infer", "--demo", str(demo_pair.out), "--side", "test"]
    gate = tmp_path / "gate"  # the dumper waits there before its first token: it runs until stopped
    os.mkfifo(gate)
    holding_the_gate = os.open(gate, os.O_RDWR)  # never waits for the other end (Linux)
    config = tmp_path / "tui-acc.toml"
    command = shlex.join([*infer, "--gate", str(gate)])
    config.write_text(f'[redump.test]\ndumper = "torch"\nexec = "{command}"\n')
    tui_acc = [
        sys.executable,
        "-m",
        "tui_acc",
        str(demo_pair.golden),
        str(demo_pair.test),
        "--config",
        str(config),
    ]
    term = terminal_factory(tui_acc, tmp_path)
    term.wait_for(lambda s: "first failing: 3" in s, "the token verdicts")
    term.keys("r")
    term.wait_for(lambda s: "Re-dump the test side" in s, "the re-dump dialog")
    term.keys("Enter")
    term.wait_for(lambda s: "running" in s, "the re-dump running")
    deadline = time.monotonic() + 60
    while not _dumpers_writing_into(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)  # the screen cannot tell when the dumper has started; /proc can
    dumpers = _dumpers_writing_into(tmp_path)
    assert dumpers, "the dumper never started"
    endings = [os.pidfd_open(pid) for pid in dumpers]
    try:
        term.close()  # tmux kills the session: SIGHUP to tui-acc
        assert all_end(endings, 30), "the re-dump outlived the dropped session"
    finally:
        for fd in [*endings, holding_the_gate]:
            os.close(fd)
    assert _dumpers_writing_into(tmp_path) == []


def test_hunt_asks_before_each_step_and_opens_at_the_culprit(
    demo_pair, tmp_path: Path, terminal_factory
) -> None:
    """``tui-acc hunt`` on the demo, as a user runs it: each step's commands, a yes, and the view."""
    hunt = [sys.executable, "-m", "tui_acc", "hunt", "--config", str(demo_pair.out / "tui-acc.toml")]
    term = terminal_factory(hunt, tmp_path)
    for step in ("logits", "blocks", "operators"):
        term.wait_for(lambda s, step=step: f"run step {step}? [y/N]" in s, f"the {step} step's question")
        term.keys("y", "Enter")
    # the operator screen of the failing token, the cursor on the culprit (the detail shows it)
    term.wait_for(lambda s: "model.layers.2.mlp.down_proj  Linear" in s, "the culprit")
    term.wait_for(lambda s: "✗ error starts here" in s, "its verdict")
    (folder,) = tmp_path.glob("tui-acc-runs/hunt-*")  # what tui-acc makes, in one folder
    assert sorted(p.name for p in folder.iterdir()) == ["1-logits", "2-blocks", "3-operators"]
    term.keys("q")
    deadline = time.monotonic() + 30
    while term.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not term.alive()


def test_one_dump_on_its_own_leads_to_its_nan(demo_pair, tmp_path: Path, terminal_factory) -> None:
    """``tui-acc DUMP`` with no golden: a NaN injected at token 2, found with one key."""
    import torch

    dump = tmp_path / "dump"
    shutil.copytree(demo_pair.test, dump)
    (device,) = dump.glob("msit_dump_*/torch_tensors/*_*")
    path = device / "2" / "root.model.layers.1.mlp.act_fn" / "output.pth"
    torch.save(torch.load(path).index_fill(-1, torch.tensor([5]), float("nan")), path)
    term = terminal_factory([sys.executable, "-m", "tui_acc", "dump"], tmp_path)
    term.wait_for(lambda s: "check of dump" in s and "first failing: 2" in s, "the token list")
    term.keys("f")
    term.wait_for(lambda s: "model.layers.1.mlp.act_fn  SiLU" in s, "the first anomaly's detail")
    screen = term.wait_for(lambda s: "nan (1 elements)" in s, "what is wrong with it")
    assert "✗ error starts here" in screen
    term.keys("q")
    deadline = time.monotonic() + 30
    while term.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not term.alive()
