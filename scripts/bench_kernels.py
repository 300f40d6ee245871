"""The metric kernels side by side: the C extension, numba, numpy (``tui_acc.metrics.fastkernel``).

    python scripts/bench_kernels.py [--elements 8388608] [--repeat 5]

Prints, for each kernel available here, in one run (ratios to the C kernel beside each figure):

- start-up: importing the kernel and its first call on float32 and float64 chunks (numba's cached
  machine code loaded), wall clock, and the process's peak RSS growth, each in a fresh process;
- throughput (CPU time, best of ``--repeat``): ns per element of ``kernels.compare_tensors`` on a
  float32 golden against a test of bf16 values widened to float32 (``--elements``, rows of 4096),
  with and without KL; and of the kernel's ``sweep`` alone, on the 1M-element chunks ``kernels``
  feeds it;
- per-call overhead: ``compare_tensors`` on a 4096-element pair, and one ``sweep`` of it.

Nothing here is a test: the machine may be shared (the load is printed).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tui_acc.metrics import fastkernel, kernel_layout, kernels  # noqa: E402

WIDTH = 4096
# as kernels._sweep_compiled cuts a pair: rows of about CHUNK_ELEMENTS elements per sweep call
CHUNK_ROWS = max(1, kernels.CHUNK_ELEMENTS // WIDTH)

# The peak RSS from /proc (VmHWM, reset by exec) where there is one: a child's ru_maxrss starts at its
# parent's peak on Linux, which would hide the growth. The package and numpy are imported first, so
# only the kernel's own load is timed and counted.
START_UP = """
import json, os, resource, sys, time
import numpy as np
import tui_acc
from tui_acc.metrics import fastkernel, kernel_layout, kernels

def peak_kib():
    try:
        with open('/proc/self/status') as status:
            return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

base = peak_kib()
start = time.perf_counter()
sums, counts = kernel_layout.new_state()
for dtype in (np.float32, np.float64):
    one = np.ones((1, 4), dtype)
    fastkernel.sweep(one, one, 0, True, sums, counts)
elapsed = time.perf_counter() - start
grown = peak_kib() - base
loaded = sorted({name.split('.')[0] for name in sys.modules} & {'numba', 'llvmlite'})
print(json.dumps({"s": elapsed, "rss_kib": grown, "kernel": fastkernel.kernel_name(), "loaded": loaded}))
"""


def available_kernels() -> list[str]:
    return [
        name
        for name in fastkernel.KERNELS
        if name == "numpy" or not isinstance(fastkernel.compiled(name), str)
    ]


def start_up(kernel: str) -> dict[str, Any]:
    env = {**os.environ, fastkernel.ENV: kernel, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", START_UP]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def best_of(repeat: int, run: Callable[[], object]) -> float:
    """The least CPU time of ``repeat`` runs: on a shared machine the wall clock mostly measures the
    neighbours, while the process's CPU time (all its threads) is the work the kernel did."""
    run()  # warm: pages faulted in, kernel loaded
    times = []
    for _ in range(repeat):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def as_kernel_input(values: np.ndarray) -> Any:
    """What ``compare_tensors`` takes: numpy arrays (torch tensors before the torch-free flow)."""
    if "ndarray" in str(inspect.signature(kernels.compare_tensors).parameters["golden"].annotation):
        return values
    import torch

    return torch.from_numpy(values)


def pair(elements: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    golden = rng.standard_normal((max(1, elements // WIDTH), WIDTH), dtype=np.float32)
    noisy = golden + np.float32(0.01) * rng.standard_normal(golden.shape, dtype=np.float32)
    # bf16 values (round to nearest even on the top 16 bits), widened back to float32 as the kernel sees them
    bits = noisy.view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return golden, rounded.astype(np.uint32).view(np.float32)


def with_kernel(kernel: str, run: Callable[[], object]) -> Callable[[], object]:
    def forced() -> object:
        os.environ[fastkernel.ENV] = kernel
        try:
            return run()
        finally:
            del os.environ[fastkernel.ENV]

    return forced


def sweep_all(kernel: str, golden: np.ndarray, test: np.ndarray, kl: bool) -> Callable[[], object]:
    sweep = fastkernel.compiled(kernel)
    assert not isinstance(sweep, str)

    def run() -> None:
        sums, counts = kernel_layout.new_state()
        for start in range(0, golden.shape[0], CHUNK_ROWS):
            end = start + CHUNK_ROWS
            sweep(golden[start:end], test[start:end], start * WIDTH, kl, sums, counts)

    return run


def ratio_line(label: str, figures: dict[str, float], unit: str, scale: float) -> str:
    reference = figures.get("c")
    cells = []
    for kernel, value in figures.items():
        cell = f"{kernel} {value * scale:9.3f} {unit}"
        if reference and kernel != "c":
            cell += f" ({value / reference:5.2f}x c)"
        cells.append(f"{cell:34}")
    return f"{label:44} " + "  ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    names = available_kernels()
    compiled = [name for name in names if name != "numpy"]
    load = os.getloadavg()
    print(f"kernels here: {', '.join(names)}; {os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f}")

    ups = {name: start_up(name) for name in compiled}
    seconds = {name: up["s"] for name, up in ups.items()}
    print(ratio_line("start-up: import + first calls (f32, f64)", seconds, "ms", 1e3))
    grown = {name: up["rss_kib"] for name, up in ups.items()}
    print(ratio_line("start-up: peak RSS growth", grown, "MiB", 1 / 1024))
    for name, up in ups.items():
        print(f"  {name}: kernel {up['kernel']}, numba/llvmlite imported: {up['loaded'] or 'no'}")

    golden, test = pair(args.elements)
    n = golden.size
    g_in, t_in = as_kernel_input(golden), as_kernel_input(test)
    for kl in (False, True):
        switch = "on" if kl else "off"

        def compare(kl: bool = kl) -> object:
            return kernels.compare_tensors(g_in, t_in, kl=kl)

        whole = {name: best_of(args.repeat, with_kernel(name, compare)) / n for name in names}
        print(ratio_line(f"compare_tensors, {n / 2**20:.0f}M elements, KL {switch}", whole, "ns/el", 1e9))
        alone = {name: best_of(args.repeat, sweep_all(name, golden, test, kl)) / n for name in compiled}
        print(ratio_line(f"sweep only, 1M-element chunks, KL {switch}", alone, "ns/el", 1e9))

    calls = 200
    small_g, small_t = golden[:1].copy(), test[:1].copy()
    small_gi, small_ti = as_kernel_input(small_g), as_kernel_input(small_t)

    def compare_small() -> object:
        return [kernels.compare_tensors(small_gi, small_ti) for _ in range(calls)]

    per_call = {name: best_of(args.repeat, with_kernel(name, compare_small)) / calls for name in names}
    print(ratio_line(f"compare_tensors on a {WIDTH}-element pair", per_call, "us", 1e6))
    sweeps = {
        name: best_of(args.repeat, sweep_small(name, small_g, small_t, calls)) / calls for name in compiled
    }
    print(ratio_line(f"one sweep call on a {WIDTH}-element pair, KL on", sweeps, "us", 1e6))


def sweep_small(kernel: str, golden: np.ndarray, test: np.ndarray, calls: int) -> Callable[[], object]:
    sweep = fastkernel.compiled(kernel)
    assert not isinstance(sweep, str)
    sums, counts = kernel_layout.new_state()

    def run() -> None:
        for _ in range(calls):
            sweep(golden, test, 0, True, sums, counts)

    return run


if __name__ == "__main__":
    main()
