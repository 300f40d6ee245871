"""What the error map (``tui_acc.metrics.error_map``) costs on a large pair, against the pair's row.

    python scripts/bench_error_map.py [--gib 1.0] [--width 4096] [--rounds 2] [--keep DIR]

Writes a golden float32 tensor of ``--gib`` GiB (rows of ``--width``) and its bfloat16 test, with one
bad row and two outlier channels, as two torch.save files, opens them as tui-acc does (two tensor
files: the engine's ``held_pair``, mapped from the files), and prints in one process, alternating:

- wall and CPU seconds of the pair's metric row (``compare_tensors``: the baseline, what every pair
  already costs) and of its error map, best of ``--rounds`` (files in the page cache);
- the error map's heap peak (tracemalloc: every numpy buffer it allocates, the pair already mapped)
  against the tensor's bytes, and the process's peak RSS growth over the timed runs (VmHWM, reset
  after the pair is written: the mapped files' pages the runs touched count too);
- what the map found (the bad row, the channels), to show the run read what it timed.

Nothing here is a test: the machine may be shared (the load is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from settle import settle  # noqa: E402  (scripts/settle.py, beside this one)

from tui_acc.metrics.error_map import error_map  # noqa: E402
from tui_acc.session import CompareOptions, open_comparison  # noqa: E402

BAD_ROW_FRACTION = 0.37
OUTLIER_CHANNELS = (7, 1234)


def _write_pair(folder: Path, gib: float, width: int) -> tuple[Path, Path]:
    import torch

    rows = int(gib * (1 << 30)) // (4 * width)
    generator = torch.Generator().manual_seed(0)
    golden = torch.randn((rows, width), generator=generator)
    test = golden.to(torch.bfloat16)
    test[int(rows * BAD_ROW_FRACTION)] += 1.0  # one token gone wrong
    test[:, list(OUTLIER_CHANNELS)] *= 1.5  # two channels scaled
    paths = folder / "golden.pt", folder / "test.pt"
    torch.save(golden, paths[0])
    torch.save(test, paths[1])
    return paths


def _peak_rss_kib() -> int:
    with Path("/proc/self/status").open() as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def _reset_peak_rss() -> None:
    """VmHWM back to the current RSS (Linux 4.0+); where that is refused, the growth is since start."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _timed(action: Callable[[], object]) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = action()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=1.0, help="the golden's size in GiB (default 1)")
    parser.add_argument("--width", type=int, default=4096, help="channels: the last dimension (default 4096)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each, best kept (default 2)")
    parser.add_argument(
        "--keep", type=Path, help="write the pair here (and keep it) instead of a temp folder"
    )
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="bench-error-map-") as temp:
        folder = args.keep or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        golden_path, test_path = _write_pair(folder, args.gib, args.width)
        print(
            f"wrote {golden_path.stat().st_size / 2**30:.2f} + {test_path.stat().st_size / 2**30:.2f} GiB"
            f" in {time.perf_counter() - start:.1f} s"
        )
        settle(folder)  # mapped, as a dump opened minutes after its run is
        cmp = open_comparison(golden_path, test_path, CompareOptions(cache=False))
        numel = golden_path.stat().st_size // 4  # about: the header is a few hundred bytes
        (node,) = cmp.pairing.node_pairs(0)
        pair = node.tensors[0]
        engine = cmp.engine

        def row() -> object:
            from tui_acc.metrics.kernels import compare_tensors

            with engine.held_pair(pair) as (g, t):
                return compare_tensors(g, t, kl=False)

        def picture() -> object:
            with engine.held_pair(pair) as (g, t):
                return error_map(g, t)

        _reset_peak_rss()  # writing the pair raised it: the runs' own peak is wanted
        rss_before = _peak_rss_kib()
        best: dict[str, tuple[float, float]] = {}
        found = None
        for _ in range(args.rounds):
            for name, action in (("row", row), ("error map", picture)):
                wall, cpu, result = _timed(action)
                if name == "error map":
                    found = result
                old = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(old[0], wall), min(old[1], cpu))
        rss_growth = (_peak_rss_kib() - rss_before) / 2**20
        with engine.held_pair(pair) as (g, t):  # the files mapped: the map's own buffers are traced
            tracemalloc.start()
            error_map(g, t)
            _, heap_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    print(f"pair: [{numel // args.width}, {args.width}] float32 vs bfloat16, {numel / 1e6:.0f}M elements")
    for name, (wall, cpu) in best.items():
        print(f"{name:>10}: {wall:6.2f} s wall  {cpu:6.2f} s CPU  {wall / numel * 1e9:5.1f} ns/element")
    print(f"error map / row: {best['error map'][0] / best['row'][0]:.2f}x wall")
    print(
        f"error map heap peak: {heap_peak / 2**20:.1f} MiB"
        f" ({heap_peak / (numel * 4):.2%} of the golden's bytes)"
    )
    print(f"peak RSS growth over the runs: {rss_growth:.2f} GiB (mapped file pages included)")
    assert found is not None
    emap = found  # type: ignore[assignment]
    print(f"found: {emap.where()}; worst element row {emap.worst.row}, channel {emap.worst.channel}")
    print(f"histogram read every {emap.sampled_every} element(s): {emap.read / 1e6:.1f}M")


if __name__ == "__main__":
    main()
