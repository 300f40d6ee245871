"""The kernel loaded on a thread of its own (metrics/kernel_loading.py): a process that ends while it
loads (a report refusing its input at once) waits for it first. An interpreter torn down while that
thread was inside numpy's import died of SIGSEGV, one exit in two under load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
from pathlib import Path
from tui_acc.metrics import kernel_loading

marker = Path(sys.argv[1])

def load():  # stands in for the import: it lasts until the test says
    sys.stdin.readline()
    marker.write_text("loaded")

kernel_loading._load = load
kernel_loading.start_loading()
print("exiting", flush=True)
sys.exit(3)
"""


def test_a_process_ending_while_the_kernel_loads_waits_for_it(tmp_path: Path) -> None:
    """The loading thread waits on the child's stdin, which the test fills only once the main thread
    is on its way out: a process that did not wait has its thread stopped unfinished, the marker
    unwritten."""
    marker = tmp_path / "marker"
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(marker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "exiting\n"
        try:
            child.stdin.write("go\n")
            child.stdin.close()
        except BrokenPipeError:  # gone already: it did not wait
            pass
        assert child.wait(timeout=120) == 3
    assert marker.is_file(), "the process did not wait for the loading thread"
    assert marker.read_text() == "loaded"
