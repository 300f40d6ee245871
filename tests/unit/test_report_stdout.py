"""``report``'s stdout while descriptor 1 points at stderr (cli/stdout_guard.py): what the command line
sends to stdout still gets there, in a process of its own (descriptor 1 is then the real stdout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def _report(demo_pair: Any, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tui_acc",
        "report",
        str(demo_pair.golden),
        str(demo_pair.test),
        "--no-cache",
        *extra,
    ]


def test_a_csv_sent_to_dev_stdout_reaches_stdout(demo_pair: Any) -> None:
    """``--csv /dev/stdout`` (docs/tui.md): the rows on stdout, not on stderr where descriptor 1
    leads while the comparison runs; the report says the name the user gave."""
    done = subprocess.run(
        _report(demo_pair, "--csv", "/dev/stdout", "--force"), capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 1, done.stderr  # the demo's fault
    rows = [line for line in done.stdout.splitlines() if ",root.model." in line]
    assert len(rows) > 10, done.stdout[-500:]
    assert ",root.model." not in done.stderr
    assert "/dev/stdout" in done.stdout  # the text report names where the CSV went, as typed


def test_a_reader_that_left_ends_no_report_in_a_traceback(demo_pair: Any) -> None:
    """stdout a pipe nobody reads any more (``| head`` gone): every write fails (EPIPE). The report
    ends with its own exit code and nothing on stderr but what it says itself."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # before the report writes a byte: the failure is certain, not a race
    try:
        done = subprocess.run(
            _report(demo_pair), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=240
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1  # the demo's fault, as with a reader
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_the_ranks_report_keeps_stdout_for_its_json(ranks_case: Any) -> None:
    """``report --ranks DUMP --json`` under the same guard: what anything else writes to descriptor 1
    while the ranks are checked (Ray's driver prints what its cluster tells it whenever it arrives)
    goes to stderr; stdout is the one JSON object."""
    dump = ranks_case("msprobe-tp2") / "step0"
    noisy = (
        "import os, sys\n"
        "from tui_acc.collectives import check\n"
        "opened = check.RanksCheck.__init__\n"
        "def said_meanwhile(self, *args, **kwargs):\n"
        "    os.write(1, b'(raylet) a node was marked dead\\n')\n"
        "    opened(self, *args, **kwargs)\n"
        "check.RanksCheck.__init__ = said_meanwhile\n"
        "from tui_acc.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", noisy, "report", "--ranks", str(dump), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["ranks"] == ["rank0", "rank1"]
    assert "(raylet) a node was marked dead" in done.stderr
