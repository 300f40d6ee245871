"""The demo is the same on every CPU: the snapshot tests and the README's figures rest on it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from tui_acc.demo import FAULT_MODULE
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor

# What another CPU changes, forced on this one: torch's scalar kernels instead of AVX2/AVX-512 ones,
# MKL's SSE4.2 code path, oneDNN without AVX (no bf16 dot products), numba for a generic x86-64.
# (On other architectures the variables are ignored and the test still compares two builds.)
ANOTHER_CPU = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "NUMBA_CPU_NAME": "generic",
}


def _bytes(tensor: np.ndarray) -> bytes:
    return np.ascontiguousarray(tensor).tobytes()


def _report(golden: Path, test: Path, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tui_acc", "report", str(golden), str(test), "--json", "--no-cache"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1, out.stderr  # the demo's fault fails
    return json.loads(out.stdout)


def _what_users_read(report: object) -> object:
    """The report without its float metrics: verdicts, labels, ids, names, counts.

    On the same bits, metrics differ between CPUs only in the order of their float64 sums (the
    kernel's property tests bound that against exact references); what a user reads off them
    must not differ at all.
    """
    if isinstance(report, float):
        return float
    if isinstance(report, dict):
        return {k: _what_users_read(v) for k, v in report.items()}
    if isinstance(report, list):
        return [_what_users_read(v) for v in report]
    return report


def test_the_demo_is_bit_identical_on_another_cpu_path(demo_pair, tmp_path: Path) -> None:
    env = {**os.environ, **ANOTHER_CPU}
    capability = [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
    if platform.machine() in ("x86_64", "AMD64"):  # the variables took effect: torch's scalar kernels
        assert subprocess.run(capability, env=env, capture_output=True, text=True).stdout.strip() == "DEFAULT"
    other = tmp_path / "demo"
    subprocess.run(
        [sys.executable, "-m", "tui_acc", "demo", "--no-tui", "--out", str(other)],
        env=env,
        check=True,
        capture_output=True,
    )
    ours = sorted(p.relative_to(demo_pair.out) for p in demo_pair.out.rglob("*.pth"))
    theirs = sorted(p.relative_to(other) for p in other.rglob("*.pth"))
    assert [p.parts[-2:] for p in ours] == [p.parts[-2:] for p in theirs] and len(ours) > 2000
    for mine, their in zip(ours, theirs, strict=True):
        a, b = load_tensor(demo_pair.out / mine, ANYWHERE), load_tensor(other / their, ANYWHERE)
        assert a.dtype == b.dtype and a.shape == b.shape, mine
        assert _bytes(a) == _bytes(b), mine  # the same bits, not merely equal values

    manifest = json.loads((other / "demo.json").read_text())
    assert manifest["golden_ids"] == demo_pair.golden_ids and manifest["test_ids"] == demo_pair.test_ids
    here = _report(demo_pair.golden, demo_pair.test)
    there = _report(other / "golden", other / "test", env)
    for report in (here, there):
        for side in ("golden", "test"):
            del report[side]["path"], report[side]["data_dir"]  # the folders differ, nothing else may
    assert _what_users_read(here) == _what_users_read(there)
    assert here["first_failing_op"]["golden"] == FAULT_MODULE
