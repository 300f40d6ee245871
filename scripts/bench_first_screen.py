"""Time to first screen on a dump of many files, in a real terminal (tmux).

    python scripts/bench_first_screen.py [--files 100000]

Builds (in a temporary folder) an msit torch layout with ``--files`` tensor files, indexes it
headless, then launches ``tui-acc`` on it in tmux and times until the token list is on screen
(Python start-up and imports included). Nothing here is a test: machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    from bench_7b import synthetic_index

    from tui_acc import open_comparison
    from tui_acc.dumps import open_dump

    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        dump = Path(tmp_name) / "dump"
        figures["index one dump s"] = round(synthetic_index(dump, args.files), 3)
        start = time.perf_counter()
        cmp = open_comparison(dump, dump, cache=False)
        figures["open the comparison (both sides) s"] = round(time.perf_counter() - start, 4)
        figures["tokens"] = len(cmp.pairing.tokens)
        atb = Path(tmp_name) / "atb"
        synthetic_atb(atb, args.files)
        start = time.perf_counter()
        atb_index = open_dump(atb)
        figures["ATB layout: index one dump s"] = round(time.perf_counter() - start, 4)
        start = time.perf_counter()
        atb_index.tokens[max(atb_index.tokens)]
        figures["ATB layout: list one more token when asked s"] = round(time.perf_counter() - start, 4)
        if shutil.which("tmux"):
            times = []
            for attempt in range(3):
                name = f"tui-acc-first-screen-{attempt}"
                command = f"{sys.executable} -m tui_acc {dump} {dump} --no-cache"
                start = time.perf_counter()
                subprocess.run(
                    ["tmux", "new-session", "-d", "-s", name, "-x", "100", "-y", "30", command], check=True
                )
                while time.perf_counter() - start < 60:
                    screen = subprocess.run(
                        ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
                    )
                    if "Verdict" in screen.stdout and f"/{len(cmp.pairing.tokens)} tokens" in screen.stdout:
                        break
                    time.sleep(0.01)
                times.append(time.perf_counter() - start)
                if attempt == 0:
                    figures["key to screen change s (median of 10: ? opens help, Esc closes it)"] = (
                        key_latency(name)
                    )
                subprocess.run(["tmux", "kill-session", "-t", name], check=False)
            figures["token view in a terminal, launch included s (best of 3)"] = round(min(times), 2)
    print(json.dumps(figures, indent=2))


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


def key_latency(session: str) -> float:
    """How long a key takes to change the screen while the tokens are still being compared."""

    def screen() -> str:
        command = ["tmux", "capture-pane", "-p", "-t", session]
        return subprocess.run(command, capture_output=True, text=True).stdout

    def timed(key: str, shown: bool) -> float:
        start = time.perf_counter()
        subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
        while ("Verdicts" in screen()) != shown and time.perf_counter() - start < 10:
            time.sleep(0.002)
        return time.perf_counter() - start

    latencies = []
    for _ in range(5):
        latencies.append(timed("?", shown=True))
        latencies.append(timed("Escape", shown=False))
    return round(sorted(latencies)[len(latencies) // 2], 3)


if __name__ == "__main__":
    main()
