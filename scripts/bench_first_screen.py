"""Time to first screen on a dump of many files, in a real terminal (tmux).

    python scripts/bench_first_screen.py [--files 100000] [--runs 7] [--baseline-tree DIR] [--layout ge]

Builds (in a temporary folder) an msit torch layout (``--layout ge``: a TorchAir GE dump of one graph
of 1,000 ops, bench_ge_read.py's) with ``--files`` tensor files as the golden and
a hard-linked copy of it as the test, indexes them headless, then launches ``tui-acc GOLDEN TEST``
in tmux ``--runs`` times and times each launch until the token list is on screen (Python start-up
and imports included): the best and the median. With ``--baseline-tree`` (another checkout of
tui-acc, e.g. /work/main), that tree's code is launched as often, alternating with this one's, so
both are measured on the same machine at the same moments.

The launched processes read cached bytecode, as an installed tui-acc does (pip compiles it): the
bytecode goes to a temporary ``PYTHONPYCACHEPREFIX`` and one launch per tree, not counted, writes it
(``PYTHONDONTWRITEBYTECODE`` is lifted for the child). That launch's time is printed apart: the
first launch after an install or an edit also compiles the sources.

Then one more launch under ``python -X importtime`` says where the import time goes: the total,
and the largest packages by their own time (everything imported before the token list is drawn,
plus what the app imports later within the launch's first second).

Nothing here is a test: machines are noisy (note the load average printed with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A tmux server of our own: its sessions are this script's children (they run at its priority: under
# `nice -n -10` the figures say what the code costs, whatever else a shared machine runs)
TMUX = ["tmux", "-L", f"tui-acc-first-screen-{os.getpid()}"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7, help="timed launches per tree")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to launch alternately")
    parser.add_argument(
        "--layout", choices=("msit", "ge"), default="msit", help="msit torch files, or a TorchAir GE dump"
    )
    args = parser.parse_args()
    from bench_7b import synthetic_index
    from bench_ge_read import write_ge_dump

    from tui_acc import CompareOptions, open_comparison
    from tui_acc.dumps import open_dump

    figures: dict[str, object] = {"load average at start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        golden, test = tmp / "golden", tmp / "test"
        figures["layout"] = args.layout
        if args.layout == "ge":
            write_ge_dump(golden, args.files)
            start = time.perf_counter()
            open_dump(golden)
            figures["index one dump s"] = round(time.perf_counter() - start, 3)
        else:
            figures["index one dump s"] = round(synthetic_index(golden, args.files), 3)
        # the same files under another root: the CLI refuses one dump given twice
        shutil.copytree(golden, test, copy_function=os.link)
        start = time.perf_counter()
        cmp = open_comparison(golden, test, CompareOptions(cache=False))
        figures["open the comparison (both sides) s"] = round(time.perf_counter() - start, 4)
        tokens = len(cmp.pairing.tokens)
        figures["tokens"] = tokens
        atb = tmp / "atb"
        synthetic_atb(atb, args.files)
        start = time.perf_counter()
        atb_index = open_dump(atb)
        figures["ATB layout: index one dump s"] = round(time.perf_counter() - start, 4)
        start = time.perf_counter()
        atb_index.tokens[max(atb_index.tokens)]
        figures["ATB layout: list one more token when asked s"] = round(time.perf_counter() - start, 4)
        if shutil.which("tmux"):
            # a session that outlives every launch: killing the last session ends the tmux server,
            # and the next launch would race its exit ("server exited unexpectedly")
            subprocess.run([*TMUX, "new-session", "-d", "-s", "keeper", "sleep 86400"], check=True)
            # a launch that fails keeps its pane, so that what it printed can be shown
            subprocess.run([*TMUX, "set-option", "-g", "remain-on-exit", "on"], check=True)
            try:
                figures.update(first_screen(golden, test, tokens, tmp, args.runs, args.baseline_tree))
            finally:
                subprocess.run([*TMUX, "kill-server"], check=False)
        else:
            figures["token list on screen"] = "tmux not found: not measured"
        figures["load average at end"] = os.getloadavg()[0]
    print(json.dumps(figures, indent=2))


def first_screen(
    golden: Path, test: Path, tokens: int, tmp: Path, runs: int, baseline: Path | None
) -> dict[str, object]:
    """Launch to the token list on screen, per tree: the first launch (compiling), best and median."""
    trees = {"": REPO} if baseline is None else {"": REPO, "baseline: ": baseline.resolve()}
    figures: dict[str, object] = {}
    times: dict[str, list[float]] = {label: [] for label in trees}
    cpu: dict[str, list[float]] = {label: [] for label in trees}
    for label, tree in trees.items():
        prefix = tmp / f"pycache-{len(label)}"
        figures[f"{label}first launch, compiling every module's bytecode into an empty cache s"] = round(
            launch(tree, golden, test, tokens, prefix, "compile")[0], 2
        )
    for attempt in range(runs):
        # ours first on even attempts, the baseline first on odd ones: neither always runs warmer
        order = list(trees.items()) if attempt % 2 == 0 else list(reversed(trees.items()))
        for label, tree in order:
            latency = attempt == 0
            prefix = tmp / f"pycache-{len(label)}"
            wall, used = launch(tree, golden, test, tokens, prefix, f"{attempt}{len(label)}", latency)
            times[label].append(wall)
            cpu[label].append(used)
            if latency:
                key = f"{label}key to screen change just after, s (median of 10: ? opens help, Esc closes it)"
                figures[key] = _LATENCY.pop()
    for label, measured in times.items():
        figures[f"{label}token list on screen, launch included s (best of {runs})"] = round(min(measured), 3)
        figures[f"{label}token list on screen, launch included s (median of {runs})"] = round(
            statistics.median(measured), 3
        )
        figures[f"{label}all launches s"] = [round(t, 3) for t in measured]
        figures[f"{label}CPU used by then s (best; median of {runs})"] = (
            f"{min(cpu[label]):.2f}; {statistics.median(cpu[label]):.2f}"
        )
    if baseline is not None:
        figures["median / baseline median"] = round(
            statistics.median(times[""]) / statistics.median(times["baseline: "]), 2
        )
    for label, tree in trees.items():
        key = f"{label}imported before the token list is on screen (-X importtime, one launch)"
        figures[key] = import_split(
            tree, golden, test, tokens, tmp / f"pycache-{len(label)}", tmp / f"importtime-{len(label)}.txt"
        )
    return figures


_LATENCY: list[float] = []
SEEN = "--- the token list is on screen ---"


def launch(
    tree: Path,
    golden: Path,
    test: Path,
    tokens: int,
    pycache: Path,
    tag: str,
    latency: bool = False,
    importtime: Path | None = None,
) -> tuple[float, float]:
    """Seconds from launching ``tui-acc golden test`` (``tree``'s code) in a fresh tmux session to
    the token list on screen (its header and the count of every token), and the CPU seconds the
    process had used by then (all its threads: the first frame's cost, less sensitive than the
    wall time to what else the machine runs). ``pycache``: where its bytecode is kept;
    ``importtime``: where ``-X importtime`` writes, if given."""
    name = f"tui-acc-first-screen-{os.getpid()}-{tag}"
    # in the command, not the environment: a tmux server already running gives new sessions its own
    python = ["env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPYCACHEPREFIX={pycache}", f"PYTHONPATH={tree}"]
    dumps = [str(golden), str(test), "--no-cache"]
    if importtime is None:
        python += [sys.executable, "-m", "tui_acc", *dumps]
    else:
        # -X importtime writes to file descriptor 2, textual draws on sys.__stderr__: the first goes
        # to the log from here on (Python's own start-up was before), the second to the terminal
        run = "import os, sys, runpy; terminal = os.dup(2); "
        flags = "os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND"  # appended to by launch() too
        run += f"os.dup2(os.open({str(importtime)!r}, {flags}), 2); "
        run += "sys.stderr = sys.__stderr__ = open(terminal, 'w', buffering=1); "
        run += f"sys.argv = ['tui-acc', *{dumps!r}]; runpy.run_module('tui_acc', run_name='__main__')"
        python += [sys.executable, "-X", "importtime", "-c", run]
    command = f"cd {shlex.quote(str(tree))} && exec {shlex.join(python)}"
    start = time.perf_counter()
    subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", "100", "-y", "30", command], check=True)
    shown = False
    while time.perf_counter() - start < 60:
        screen = subprocess.run([*TMUX, "capture-pane", "-p", "-t", name], capture_output=True, text=True)
        if "Verdict" in screen.stdout and f"/{tokens} tokens" in screen.stdout:
            shown = True
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    if importtime:  # what is imported from here on comes after the token list was seen
        with importtime.open("a") as log:
            log.write(f"{SEEN}\n")
    if not shown:
        raise SystemExit(f"{tree} ({tag}): the token list did not show within 60 s:\n{screen.stdout}")
    pid = subprocess.run(  # the command execs tui-acc: the pane's process is the app
        [*TMUX, "display-message", "-p", "-t", name, "#{pane_pid}"], capture_output=True, text=True
    ).stdout.strip()
    cpu = cpu_seconds(pid)
    if latency:
        _LATENCY.append(key_latency(name))
    subprocess.run([*TMUX, "kill-session", "-t", name], check=False)
    # the next launch starts once this one has ended (it competes for the cores, writes bytecode)
    deadline = time.perf_counter() + 10
    while Path(f"/proc/{pid}").exists() and time.perf_counter() < deadline:
        time.sleep(0.01)
    return elapsed, cpu


def cpu_seconds(pid: str) -> float:
    """User + system CPU time a process has used (all its threads)."""
    # /proc/PID/stat: fields 14 and 15 (utime, stime), counted after the ")" that ends the name
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def import_split(
    tree: Path, golden: Path, test: Path, tokens: int, pycache: Path, log: Path
) -> dict[str, object]:
    """One launch under ``-X importtime`` (its stderr to ``log``): what was imported before the
    token list was seen on screen, in total and the packages that cost the most by their own time
    (tui_acc by module group). Imports are slower under -X importtime than without it."""
    launch(tree, golden, test, tokens, pycache, "importtime", importtime=log)
    own: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        if line == SEEN:
            break
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line.removeprefix("import time:").split("|")
        parts = name.strip().split(".")
        package = ".".join(parts[:2]) if parts[0] == "tui_acc" else parts[0]
        own[package] += int(self_us)
    split: dict[str, object] = {"total s": round(sum(own.values()) / 1e6, 3)}
    split.update({f"{package} s": round(us / 1e6, 3) for package, us in own.most_common(8)})
    return split


def synthetic_atb(root: Path, files: int) -> None:
    """An msit ATB layout of ``files`` empty .bin files: 250 ops of 4 tensors per token folder."""
    device = root / "msit_dump_20250101_000000" / "tensors" / "0_4242"
    per_token = 250 * 4
    for token in range(max(1, files // per_token)):
        for layer in range(25):
            for op in range(10):
                node = device / str(token) / f"{layer}_LlamaLayer" / f"{op}_LinearOperation"
                for when, kind in (("before", "intensor"), ("after", "outtensor")):
                    (node / when).mkdir(parents=True, exist_ok=True)
                    for k in range(2):
                        (node / when / f"{kind}{k}.bin").touch()


# a line of the help screen's first page (tui/screens/help.py), and of no other screen
HELP_LINE = "open a token's operators"


def key_latency(session: str) -> float:
    """How long a key takes to change the screen while the tokens are still being compared."""

    def screen() -> str:
        command = [*TMUX, "capture-pane", "-p", "-t", session]
        return subprocess.run(command, capture_output=True, text=True).stdout

    def timed(key: str, shown: bool) -> float:
        start = time.perf_counter()
        subprocess.run([*TMUX, "send-keys", "-t", session, key], check=True)
        while (HELP_LINE in screen()) != shown:
            if time.perf_counter() - start > 10:
                raise SystemExit(f"{key} did not {'open' if shown else 'close'} the help within 10 s")
            time.sleep(0.002)
        return time.perf_counter() - start

    latencies = []
    for _ in range(5):
        latencies.append(timed("?", shown=True))
        latencies.append(timed("Escape", shown=False))
    return round(sorted(latencies)[len(latencies) // 2], 3)


if __name__ == "__main__":
    main()
