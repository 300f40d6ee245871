"""Builds the compiled metric kernel; everything else about the package is in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler, no Python headers) the package
still installs and the kernel falls back to numba, then numpy (tui_acc/metrics/fastkernel.py).
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

setup(
    ext_modules=[
        Extension(
            "tui_acc.metrics._ckernel",
            ["tui_acc/metrics/_ckernel.c"],
            extra_compile_args=COMPILE_ARGS,
            libraries=[] if os.name == "nt" else ["m"],
            optional=True,
        )
    ]
)
