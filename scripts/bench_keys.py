"""How fast a key shows on a real terminal: ``?``, Esc, a cursor move and ``f``, from the keystroke
written to the terminal to the frame that shows its result.

    python scripts/bench_keys.py [--repeat 20] [--size 120x40] [--baseline-tree DIR] [--demo DIR]

Writes the demo's dumps (``tui-acc demo --no-tui``; ``--demo DIR`` reuses a folder it wrote) and runs
``python -m tui_acc --no-cache --config DIR/tui-acc.toml DIR/golden DIR/test`` on a pseudo-terminal
of its own (``scripts/pty_terminal.py``: it reads the app's output as a terminal does, frame by
frame, and keeps the screen). Once every token is compared, each round types, and waits for the
result on the screen:

- on the token list: ``?`` (the help drawn), Esc (gone), ``j`` and ``k`` (the cursor on the next /
  previous token), ``f`` (the first failing token's operators, the cursor on ◆);
- on the operator screen: ``?`` and Esc, ``j`` and ``k`` (the cursor on the next row; then the
  tensor detail under the table naming that operator), the same with the error map shown (``m``),
  ``f`` after ``g`` (the cursor back on ◆), Esc (back to the token list).

Each figure is the median and the 90th percentile over ``--repeat`` rounds, in ms, and the CPU time
the app's event loop (its main thread: /proc's schedstat) spent on the key and what followed it,
until the app had drawn nothing for 0.15 s: what the key costs, whatever else the machine runs. The
first ``?`` of the session is shown apart too. Between two keys the script waits until the app is
quiet, so no key waits for the one before. Esc includes textual's wait for more bytes after a lone
escape byte (ESCDELAY, 100 ms unless set: a terminal sends Esc as the first byte of other keys too).

``--baseline-tree DIR`` (another checkout of tui-acc, e.g. ``git worktree add`` of main) runs that
tree's app the same way, on a terminal of its own beside this tree's: rounds alternate between the
two (this tree first in even rounds), so both are measured on the same machine at the same moments,
and the ratios of the medians (this tree / the baseline) are printed.

Nothing here is a test: the machine may be shared (the CPUs and the load average at the start and
the end are printed; ``nice -n -10`` gives the two apps the CPU first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from pty_terminal import Cells, PtyTerminal  # noqa: E402  (scripts/pty_terminal.py, beside this one)

# a line of the help screen's first page (tui/screens/help.py), and of no other screen
HELP_LINE = "open a token's operators"
TOKENS_SHOWN = re.compile(r"(\d+)/\1 tokens compared")  # the token list's summary, every token done
OPERATORS_SHOWN = re.compile(r"token \d+  │  \d+ ops")  # the operator screen's summary line
MAP_SHOWN = re.compile(r"tensor \d+/\d+")  # the error map's title
QUIET = 0.15  # s without output: the app has done what the key asked
HELD = 8  # moves of a held key


class App:
    """One tree's tui-acc on its own terminal, and what its screens show."""

    def __init__(self, tree: Path, demo: Path, width: int, height: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEXTUAL", "NO_COLOR"))}
        env.update(TERM="xterm-256color", COLORTERM="truecolor", PYTHONPATH=str(tree))
        dumps = ["--config", str(demo / "tui-acc.toml"), str(demo / "golden"), str(demo / "test")]
        self.tree = tree
        self.terminal = PtyTerminal(
            [sys.executable, "-m", "tui_acc", "--no-cache", *dumps], tree, env, width, height
        )
        self.cursor_colour: tuple[int, ...] | None = None
        self._sent = 0.0  # when the last key was typed
        self._loop_ns = 0  # the event loop's CPU time then

    def launch(self) -> None:
        """Wait for every token compared, then note the colour of the cursor row (the one row of the
        token table whose background no other row has: the others are zebra stripes)."""
        self.terminal.wait_for(lambda c: TOKENS_SHOWN.search(c.text()) is not None, "every token compared")
        self.terminal.settle()
        rows = table_rows(self.terminal.cells, "Token")
        colours = [self.terminal.cells.backgrounds[y][x] for y, x, _ in rows]
        unique = [colour for colour in colours if colours.count(colour) == 1]
        if len(unique) != 1:
            raise SystemExit(f"{self.tree}: which row has the cursor?\n{self.terminal.cells.text()}")
        self.cursor_colour = unique[0]

    def key(self, keys: str, test: Callable[[Cells], bool], what: str) -> float:
        """Type ``keys`` once the app is quiet and wait for ``test``: ms from the key to that frame."""
        self.terminal.settle(quiet=QUIET)
        self._loop_ns = self.loop_cpu_ns()
        self._sent = self.terminal.send(keys)
        return (self.terminal.wait_for(test, f"{what} after {keys!r}") - self._sent) * 1000

    def then(self, test: Callable[[Cells], bool], what: str) -> float:
        """Wait for ``test`` after the last key: ms from that key to the frame that shows it."""
        return (self.terminal.wait_for(test, what) - self._sent) * 1000

    def cost(self) -> float:
        """Once the app is quiet: ms of CPU its event loop spent since the last key."""
        self.terminal.settle(quiet=QUIET)
        return (self.loop_cpu_ns() - self._loop_ns) / 1e6

    def loop_cpu_ns(self) -> int:
        """CPU time of the app's main thread (textual's event loop), ns."""
        schedstat = Path(f"/proc/{self.terminal.process.pid}/schedstat")
        return int(schedstat.read_text().split()[0]) if schedstat.exists() else 0

    def cursor_key(self, cells: Cells, header: str) -> str:
        """The first cell of the row under the cursor of the table headed by ``header`` ("": none)."""
        for y, x, words in table_rows(cells, header):
            if cells.backgrounds[y][x] == self.cursor_colour:
                return words[0]
        return ""

    def close(self) -> None:
        self.terminal.close()


def table_rows(cells: Cells, header: str) -> list[tuple[int, int, list[str]]]:
    """(row, column, words from there on) of each row of the table whose header line has
    ``header`` (the token table's "Token", the operator table's "#")."""
    lines = cells.lines()
    for top_line, line in enumerate(lines):  # noqa: B007  (the header line: the rows follow it)
        x = line.find(f"{header} ")
        if x >= 0 and (header != "#" or "Operator" in line):
            break
    else:
        return []
    rows = []
    for y in range(top_line + 1, len(lines)):
        words = lines[y][x:].split()
        if not words or not re.fullmatch(r"◆?\d+", words[0]):
            break
        rows.append((y, x, words))
    return rows


def panel_names(cells: Cells, operator: str) -> bool:
    """Whether the panel under the operator table names ``operator`` (as its Operator cell shows it:
    the end of its name, after a dot)."""
    lines = cells.lines()
    border = next((y for y, line in enumerate(lines) if line.startswith("▔▔▔")), None)
    if border is None:
        return False
    words = (word for line in lines[border + 1 :] for word in line.split())
    return any(word == operator or word.endswith(f".{operator}") for word in words)


class Round:
    """One round of keys on one app: each figure's latency and event-loop CPU, ms."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.latency: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def time(self, name: str, keys: str, test: Callable[[Cells], bool], what: str) -> None:
        """``keys``' latency and cost, as figure ``name``."""
        self.latency[name] = self.app.key(keys, test, what)
        self.cpu[name] = self.app.cost()

    def move(self, name: str, keys: str, target: str, operator: str | None = None) -> None:
        """A cursor move to row ``target``: the cursor drawn there; on the operator screen
        (``operator``: its Operator cell) the panel under the table showing it, as ``name, then the
        panel follows``."""
        header = "Token" if operator is None else "#"
        test = lambda c: self.app.cursor_key(c, header) == target  # noqa: E731
        self.latency[name] = self.app.key(keys, test, f"the cursor on {target}")
        if operator is not None:
            follows = lambda c: panel_names(c, operator)  # noqa: E731
            self.latency[f"{name}, then the panel follows"] = self.app.then(follows, f"{operator} shown")
        self.cpu[name] = self.app.cost()

    def held(self, name: str, key: str, targets: list[str], operator: str, interval: float = 1 / 30) -> None:
        """``key`` held down: typed every ``interval`` s (a terminal's key repeat), the cursor moving
        through ``targets``. Figures: the median and the worst latency of a move (a move passed over
        in a frame that shows a later one counts from its own key to that frame), and from the last
        key to the panel showing ``operator``, the last target's."""
        terminal, sent = self.app.terminal, []
        terminal.settle(quiet=QUIET)
        self.app._loop_ns = self.app.loop_cpu_ns()
        latencies: dict[int, float] = {}
        next_key = time.perf_counter()
        deadline = next_key + 30
        while len(latencies) < len(targets) and time.perf_counter() < deadline:
            if len(sent) < len(targets) and time.perf_counter() >= next_key:
                sent.append(terminal.send(key))
                next_key += interval
            wait = (
                next_key - time.perf_counter() if len(sent) < len(targets) else deadline - time.perf_counter()
            )
            for arrived in terminal.frames(wait):
                here = self.app.cursor_key(terminal.cells, "#")
                reached = targets.index(here) if here in targets[: len(sent)] else -1
                for move in range(reached + 1):
                    latencies.setdefault(move, (arrived - sent[move]) * 1000)
        if len(latencies) < len(targets):
            raise SystemExit(f"{key} held: the cursor did not reach {targets[-1]}:\n{terminal.cells.text()}")
        self.app._sent = sent[-1]
        moves = sorted(latencies.values())
        self.latency[f"{name}: a move, median"] = statistics.median(moves)
        self.latency[f"{name}: a move, the slowest"] = moves[-1]
        self.latency[f"{name}: the panel, from the last key"] = self.app.then(
            lambda c: panel_names(c, operator), f"{operator} shown"
        )
        self.cpu[f"{name}: a move, median"] = self.app.cost() / len(targets)

    def untimed(self, keys: str, test: Callable[[Cells], bool], what: str) -> None:
        """Keys that set the next figure up."""
        self.app.key(keys, test, what)


def one_round(app: App) -> Round:
    """Every key once, on the token list then on the operator screen."""
    cells = app.terminal.cells
    text = lambda c: c.text()  # noqa: E731
    on_tokens = lambda c: TOKENS_SHOWN.search(text(c)) is not None and HELP_LINE not in text(c)  # noqa: E731
    on_operators = lambda c: OPERATORS_SHOWN.search(text(c)) is not None and HELP_LINE not in text(c)  # noqa: E731
    help_shown = lambda c: HELP_LINE in text(c)  # noqa: E731
    at_culprit = lambda c: app.cursor_key(c, "#").startswith("◆")  # noqa: E731
    step = Round(app)

    step.time("tokens: ? (help drawn)", "?", help_shown, "the help")
    step.time("tokens: Esc (help gone)", "\x1b", on_tokens, "the token list")
    here = app.cursor_key(cells, "Token")
    step.move("tokens: j (cursor down)", "j", str(int(here) + 1))
    step.move("tokens: k (cursor up)", "k", here)
    step.time("tokens: f (operators, cursor on ◆)", "f", lambda c: on_operators(c) and at_culprit(c), "◆")

    step.time("operators: ? (help drawn)", "?", help_shown, "the help")
    step.time("operators: Esc (help gone)", "\x1b", on_operators, "the operators")
    for panel in ("detail", "error map"):
        if panel == "error map":
            step.untimed("m", lambda c: MAP_SHOWN.search(text(c)) is not None, "the error map")
        culprit = app.cursor_key(cells, "#")
        below = str(int(culprit.lstrip("◆")) + 1)
        operators = {words[0]: words[1] for _, _, words in table_rows(cells, "#")}
        for keys, target, way in (("j", below, "down"), ("k", culprit, "up")):
            shown = "" if panel == "detail" else ", error map shown"
            step.move(f"operators: {keys} (cursor {way}{shown})", keys, target, operators[target])
        if panel == "error map":
            step.untimed(
                "m", lambda c: MAP_SHOWN.search(text(c)) is None and "cosine" in text(c), "the numbers"
            )
    culprit = app.cursor_key(cells, "#")
    rows = [(words[0], words[1]) for _, _, words in table_rows(cells, "#")]
    below = [key for key, _ in rows][[key for key, _ in rows].index(culprit) + 1 :][:HELD]
    if len(below) == HELD:  # on screen under ◆ (the demo at 120x40: rows 43-50)
        step.held(f"operators: j held ({HELD} keys, 30 a second)", "j", below, dict(rows)[below[-1]])
    step.untimed("g", lambda c: app.cursor_key(c, "#") == "0", "the top")
    step.time("operators: f (cursor back on ◆)", "f", at_culprit, "◆")
    step.time("operators: Esc (back to the tokens)", "\x1b", on_tokens, "the token list")
    return step


def summary(samples: list[float]) -> tuple[float, float]:
    """Median and 90th percentile."""
    ordered = sorted(samples)
    return round(statistics.median(ordered), 1), round(ordered[round(0.9 * (len(ordered) - 1))], 1)


def machine() -> dict[str, object]:
    """CPUs, their model, the load now."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return {"cpus": os.cpu_count(), "cpu model": model, "load average 1, 5, 15 min": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=20, help="rounds per tree")
    parser.add_argument("--size", default="120x40", help="the terminal, COLUMNSxLINES")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout, measured alternately")
    parser.add_argument("--demo", type=Path, help="a folder `tui-acc demo --no-tui --out` wrote")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    trees = {"this tree": REPO}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    figures: dict[str, object] = {"terminal": args.size, "at start": machine()}
    rounds: dict[str, list[Round]] = {label: [] for label in trees}
    with tempfile.TemporaryDirectory() as scratch:
        demo = args.demo
        if demo is None:
            demo = Path(scratch) / "demo"
            command = [sys.executable, "-m", "tui_acc", "demo", "--no-tui", "--out", str(demo)]
            subprocess.run(command, cwd=REPO, check=True, capture_output=True)
        apps = {label: App(tree, demo, width, height) for label, tree in trees.items()}
        try:
            for app in apps.values():
                app.launch()
            for index in range(args.repeat):
                for label in list(apps) if index % 2 == 0 else list(reversed(apps)):
                    rounds[label].append(one_round(apps[label]))
        finally:
            for app in apps.values():
                app.close()
    figures["at end"] = machine()
    for label, done in rounds.items():
        figures[label] = {
            name: {
                "median ms": summary([r.latency[name] for r in done])[0],
                "p90 ms": summary([r.latency[name] for r in done])[1],
                **({"loop CPU ms": summary([r.cpu[name] for r in done])[0]} if name in done[0].cpu else {}),
                "each round ms": [round(r.latency[name], 1) for r in done],
            }
            for name in done[0].latency
        }
        figures[label]["the session's first ?, ms"] = round(done[0].latency["tokens: ? (help drawn)"], 1)
    print(json.dumps(figures, indent=2, ensure_ascii=False))
    print_table(rounds, args.repeat)


def print_table(rounds: dict[str, list[Round]], repeat: int) -> None:
    """A line a figure: median / p90 ms and the event loop's CPU ms per tree, the ratio of the medians."""
    labels = list(rounds)
    print(f"\nms from the key to the frame that shows it, median / p90 of {repeat} [event-loop CPU ms]")
    print(
        f"{'':58}"
        + "".join(f"{label:>28}" for label in labels)
        + ("  this/baseline" if len(labels) > 1 else "")
    )
    for name in rounds[labels[0]][0].latency:
        line = f"{name:58}"
        for label in labels:
            median, p90 = summary([r.latency[name] for r in rounds[label]])
            cpu = rounds[label][0].cpu.get(name)
            spent = (
                f"[{summary([r.cpu[name] for r in rounds[label]])[0]:5.1f}]" if cpu is not None else " " * 7
            )
            line += f"{median:>11.1f} / {p90:<7.1f}{spent:>8}"
        if len(labels) > 1:
            ratio = statistics.median(r.latency[name] for r in rounds[labels[0]]) / statistics.median(
                r.latency[name] for r in rounds[labels[1]]
            )
            line += f"  {ratio:>13.2f}"
        print(line)


if __name__ == "__main__":
    main()
