"""The C kernel's loops built three ways, the same results: native -O3 (x86-64: its AVX-512/AVX2/SSE4.2
clones), native -O0 (scalar, no clones) and aarch64 (NEON, run under qemu-user): for Kunpeng hosts.

    python scripts/cross_check_ckernel.py

Needs gcc, and for the aarch64 build ``aarch64-linux-gnu-gcc`` and ``qemu-aarch64`` (Debian:
gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user); a build whose tools are missing is skipped.
The kernel part of tui_acc/metrics/_ckernel.c (between the markers below, no Python API) is compiled
into a small program that sweeps seeded rows (NaN, Inf, giants, zeros, wide logits, every vector
tail) in float32 and float64, with and without KL. Counts, extremes and the worst element must be
equal; sums may differ by reassociation (printed). Nothing here is a test: CI has no cross tools.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tui_acc" / "metrics" / "_ckernel.c"
START, END = "/* The state layout", "/* The buffer's single type code"
FLAGS = ["-ffp-contract=off", "-std=c11"]

PRELUDE = """#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef ptrdiff_t Py_ssize_t;
"""

DRIVER = r"""
static uint64_t rng_state = 88172645463325252ULL;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double draw(int row)
{
    double u = uniform(), v = (uniform() - 0.5) * 8.0;
    if (row % 7 == 3 && u < 0.01) return NAN;
    if (row % 7 == 4 && u < 0.01) return u < 0.005 ? INFINITY : -INFINITY;
    if (row % 7 == 5 && u < 0.01) return 1e200;
    if (u < 0.05) return 0.0;
    return row % 7 == 6 ? v * 200.0 : v; /* wide logits: most of the softmax underflows */
}
static void run(int is64, Py_ssize_t rows, Py_ssize_t width, int kl)
{
    size_t n = (size_t)(rows * width);
    double *g = malloc(n * 8), *t = malloc(n * 8);
    float *gf = malloc(n * 4), *tf = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        g[i] = draw((int)(i / (size_t)width));
        t[i] = uniform() < 0.001 ? g[i] + 3.0 : g[i] * (1.0 + (uniform() - 0.5) * 0.004);
        gf[i] = (float)g[i];
        tf[i] = (float)t[i];
    }
    State s;
    memset(&s, 0, sizeof s);
    s.sums[M_GMAX] = s.sums[M_TMAX] = -INFINITY;
    s.sums[M_GMIN] = s.sums[M_TMIN] = INFINITY;
    s.counts[C_WIDX] = -1;
    if (is64)
        sweep_f64(g, t, rows, width, 7, kl, &s);
    else
        sweep_f32(gf, tf, rows, width, 7, kl, &s);
    printf("%d %ld %d", is64, (long)width, kl);
    for (int i = 0; i < N_SUMS; i++) printf(" %.17g", s.sums[i]);
    for (int i = 0; i < N_COUNTS; i++) printf(" %lld", (long long)s.counts[i]);
    printf("\n");
    free(g), free(t), free(gf), free(tf);
}
int main(void)
{
    Py_ssize_t widths[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 255, 256, 257, 1000, 4096};
    for (int is64 = 0; is64 < 2; is64++)
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int kl = 0; kl < 2; kl++)
                run(is64, 14, widths[w], kl);
    return 0;
}
"""

# sums[] positions compared exactly: the extremes and the worst element's values (kernel_layout)
EXACT = range(9, 17)
KL = 8


def build(folder: Path, name: str, compiler: str, flags: list[str], runner: list[str]) -> list[str] | None:
    if not shutil.which(compiler) or (runner and not shutil.which(runner[0])):
        print(f"{name}: skipped ({compiler} or {runner[0] if runner else ''} not found)")
        return None
    program = folder / name
    subprocess.run(
        [compiler, *flags, *FLAGS, str(folder / "harness.c"), "-o", str(program), "-lm"], check=True
    )
    out = subprocess.run([*runner, str(program)], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def compare(name: str, reference: list[str], other: list[str]) -> bool:
    mismatches, worst = 0, 0.0
    for ref_line, other_line in zip(reference, other, strict=True):
        ref, oth = ref_line.split(), other_line.split()
        if ref[:3] != oth[:3] or ref[20:] != oth[20:]:
            mismatches += 1
            print(f"  counts differ: {ref_line}\n                 {other_line}")
        for index, (a, b) in enumerate(zip(map(float, ref[3:20]), map(float, oth[3:20]), strict=True)):
            if index in EXACT:
                if not (a == b or (math.isnan(a) and math.isnan(b))):
                    mismatches += 1
                    print(f"  sums[{index}] differs: {a!r} against {b!r} ({ref[:3]})")
            elif a != b:
                scale = max(abs(a), abs(b), 1e-3 if index == KL else 1e-300)
                worst = max(worst, abs(a - b) / scale)
    print(f"{name}: {len(other)} sweeps, {mismatches} mismatches, sums within {worst:.1e} relative")
    return mismatches == 0


def main() -> int:
    text = SOURCE.read_text()
    kernel = text[text.index(START) : text.index(END)]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "harness.c").write_text(PRELUDE + kernel + DRIVER)
        reference = build(folder, "native-O3", "gcc", ["-O3"], [])
        if reference is None:
            return 1
        ok = True
        for other_name, compiler, flags, runner in (
            ("native-O0", "gcc", ["-O0"], []),
            ("aarch64-O3", "aarch64-linux-gnu-gcc", ["-O3", "-static"], ["qemu-aarch64"]),
        ):
            other = build(folder, other_name, compiler, flags, runner)
            if other is not None:
                ok &= compare(f"{other_name} against native-O3", reference, other)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
