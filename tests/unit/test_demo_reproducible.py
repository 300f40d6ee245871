"""The demo is the same on every CPU: the snapshot tests and the docs' figures rest on it."""

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

# What another CPU changes, forced on this one: numpy's loops (exp, cos, sin, sums) without their
# AVX2/AVX-512 code paths (numpy 2.4 names the groups X86_V3/X86_V4, earlier numpy the features),
# OpenBLAS's kernels for a Pentium 4 (its matrix products sum in another order), numba for a
# generic x86-64. (On other architectures the variables are ignored and the test still compares
# two builds.)
ANOTHER_CPU = {
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR AVX512_SKX AVX512F AVX2 FMA3",
    "OPENBLAS_CORETYPE": "Prescott",
    "NUMBA_CPU_NAME": "generic",
}
# whether numpy runs its AVX2 loops (the variable took effect when it says False)
_NUMPY_AVX2 = (
    "from numpy._core._multiarray_umath import __cpu_features__ as f; print(f.get('X86_V3', f.get('AVX2')))"
)


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
    if platform.machine() in ("x86_64", "AMD64"):  # the variables took effect: numpy's SSE loops
        avx2 = subprocess.run([sys.executable, "-c", _NUMPY_AVX2], env=env, capture_output=True, text=True)
        assert avx2.stdout.strip() == "False", avx2.stderr
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
