"""The hot path runs without torch: a report on torch's own .pth/.pt dumps never imports it, the
kernel loads in the background, and the engine sizes its pool from the cores it may use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Runs the CLI in a fresh interpreter, then says which heavy modules the run imported (stderr, so
# the report's JSON on stdout stays whole).
_REPORT_AND_TELL = """
import sys
from tui_acc.cli import main
code = main(["report", "--json", "--no-cache", *sys.argv[1:]])
print(sorted(m for m in ("torch", "pandas") if m in sys.modules), code, file=sys.stderr)
"""


def _report_imports(golden: Path, test: Path) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT_AND_TELL, str(golden), str(test)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return json.loads(done.stdout), done.stderr.strip().splitlines()[-1]


def test_a_report_on_torch_dumps_never_imports_torch(demo_pair) -> None:
    """The demo's dumps are .pth files written by torch.save (msit's torch layout)."""
    report, imported = _report_imports(demo_pair.golden, demo_pair.test)
    assert imported == "[] 1"  # nothing heavy imported; exit 1: the injected fault was found
    assert report["first_failing_op"]["golden"] == "root.model.layers.2.mlp.down_proj"


def test_a_report_on_an_msprobe_dump_never_imports_torch(model_case) -> None:
    case = model_case("llama-msprobe-L1")
    expected = json.loads((case / "case.json").read_text())
    report, imported = _report_imports(case / "golden", case / "test")
    assert imported == "[] 1"
    assert report["first_failing_token"] == expected["fault_token"]


def test_the_kernel_loads_in_the_background_once() -> None:
    from tui_acc.metrics import fastkernel, kernel_loading

    if not fastkernel.available():
        pytest.skip("numba is not installed here: the numpy kernel needs no loading")
    kernel_loading.start_loading()
    first = kernel_loading._thread
    kernel_loading.start_loading()
    assert kernel_loading._thread is first is not None
    first.join()
    kernel = fastkernel.compiled(fastkernel.kernel_name())
    assert not isinstance(kernel, str), kernel
    if fastkernel.kernel_name() == "numba":
        assert len(kernel.signatures) >= 2  # type: ignore[attr-defined]  # float32 and float64 chunks


def test_the_engine_uses_the_cores_it_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """taskset or a container's cpuset, not the machine's core count."""
    import os

    from tui_acc.metrics import engine

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    assert engine.usable_cores() == 1


def test_the_check_across_ranks_never_imports_torch(ranks_case) -> None:
    """msprobe's .pt files of a real two-rank run: the goldens are float64 sums, the metrics numpy's."""
    case = ranks_case("msprobe-tp2")
    tell = _REPORT_AND_TELL.replace('"--no-cache", ', "")
    done = subprocess.run(
        [sys.executable, "-c", tell, "--ranks", str(case / "step0")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stderr.strip().splitlines()[-1] == "[] 1"
    assert json.loads(done.stdout)["first_bad"] is not None
