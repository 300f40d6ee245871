"""The kernel loaded on a thread of its own (metrics/kernel_loading.py): a process that ends while it
loads (a report refusing its input at once) waits for it first. An interpreter torn down while that
thread was inside numpy's import died of SIGSEGV, one exit in two under load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
from pathlib import Path
from tui_acc.metrics import kernel_loading

gate, marker = Path(sys.argv[1]), Path(sys.argv[2])

def load():  # stands in for the import: it lasts until the test says
    gate.read_text()
    marker.write_text("loaded")

kernel_loading._load = load
kernel_loading.start_loading()
print("exiting", flush=True)
sys.exit(3)
"""


def test_a_process_ending_while_the_kernel_loads_waits_for_it(tmp_path: Path) -> None:
    gate, marker = tmp_path / "gate", tmp_path / "marker"
    os.mkfifo(gate)
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(gate), str(marker)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "exiting\n"
        # the loading thread holds the gate open for reading: were the process gone (or going, its
        # threads stopped), no one would read: this open fails (ENXIO) or the marker stays unwritten
        try:
            writer = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            child.kill()
            raise AssertionError(f"the process did not wait for the loading thread ({exc})") from exc
        os.write(writer, b"go")
        os.close(writer)
        assert child.wait(timeout=120) == 3
    assert marker.read_text() == "loaded"
