"""``report``'s stdout while descriptor 1 points at stderr (cli/stdout_guard.py): what the command line
sends to stdout still gets there, in a process of its own (descriptor 1 is then the real stdout)."""

from __future__ import annotations

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
