"""Builds the compiled metric kernel and the SIGBUS guard of mapped files; everything else about the
package is in pyproject.toml.

Both extensions are optional: where they cannot be built (no C compiler, no Python headers) the
package still installs, the kernel falls back to numba, then numpy (tui_acc/metrics/fastkernel.py),
and tensor files are read instead of mapped (tui_acc/dumps/mapped/).
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

# No -march=native: a wheel built here may run on another CPU. The x86-64 AVX2 variant of the fast
# loop is a target clone chosen at load time (see the C file). -ffp-contract=off: no fused
# multiply-adds, so the sums round as numba's do, on every architecture.
# MSVC: C11 for `restrict`, and no contraction either (/fp:precise).
MSVC_ARGS = ["/O2", "/std:c11", "/fp:precise"]
COMPILE_ARGS = MSVC_ARGS if os.name == "nt" else ["-O3", "-ffp-contract=off", "-std=c11"]

KERNEL = Extension(
    "tui_acc.metrics._ckernel",
    ["tui_acc/metrics/_ckernel.c"],
    extra_compile_args=COMPILE_ARGS,
    libraries=[] if os.name == "nt" else ["m"],
    optional=True,
)
# POSIX only: Windows has no SIGBUS (a mapped file cannot be truncated while mapped there)
GUARD = Extension(
    "tui_acc.dumps.mapped._mapguard",
    ["tui_acc/dumps/mapped/_mapguard.c"],
    extra_compile_args=["-O2", "-std=c11"],
    optional=True,
)

setup(ext_modules=[KERNEL] if os.name == "nt" else [KERNEL, GUARD])
