"""How fast torchfile/reader.read_torch_file reads torch.save's files, against torch.load(mmap=True,
weights_only=True).

``python scripts/bench_torch_zip.py [FOLDER] [--baseline-tree DIR]``: times each reader on the
``.pth``/``.pt`` files under FOLDER (a dump), or on a few 4-40 MB files it writes (7B shapes: hidden
4096, FFN 11008, 256 tokens) and two whose pickle is most of the work (SGLang's value-and-meta dict,
a 2,000-tensor state dict). Prints, per file and in total, the best of several rounds (files in the
page cache): opening (mapped, nothing touched), reading into memory, and opening plus touching every
value (a float32 copy: every page read, what a metric kernel's input costs).

``--baseline-tree DIR`` (another checkout of tui-acc, e.g. a ``git archive`` of main): our reader
opening each file mapped, this tree's and DIR's, in processes of their own alternating, the best of
their rounds each, and the ratio. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tui_acc.dumps.dtypes import widened  # noqa: E402
from tui_acc.dumps.torchfile.reader import read_torch_file  # noqa: E402


def _write_samples(folder: Path) -> list[Path]:
    import torch

    generator = torch.Generator().manual_seed(0)
    meta = {"dims": "t h[tp]", "shape": torch.Size([4, 4]), "dtype": torch.float32}
    pickled = {
        "sglang_meta.pt": {"value": torch.randn(4, 4, generator=generator), "meta": meta},
        "state_dict_2000.pth": {f"layers.{i // 4}.w{i % 4}": torch.randn(16, 16) for i in range(2000)},
    }
    paths = []
    for name, obj in pickled.items():
        torch.save(obj, folder / name)
        paths.append(folder / name)
    shapes = {
        "hidden_fp32_4MB.pth": ((256, 4096), torch.float32),
        "ffn_bf16_5.6MB.pth": ((256, 11008), torch.bfloat16),
        "ffn_fp32_11MB.pth": ((256, 11008), torch.float32),
        "weight_bf16_22MB.pth": ((1024, 11008), torch.bfloat16),
        "ffn_fp32_39MB.pth": ((896, 11008), torch.float32),
    }
    for name, (shape, dtype) in shapes.items():
        path = folder / name
        torch.save(torch.randn(shape, generator=generator).to(dtype), path)
        paths.append(path)
    return paths


def _best(action: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def _tensors(obj: object) -> list[object]:
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in _tensors(value)]
    if isinstance(obj, (list, tuple)):
        return [t for value in obj for t in _tensors(value)]
    return [obj]


def _ours_touched(path: Path) -> None:
    for array in _tensors(read_torch_file(path, mapped=True)):
        if isinstance(array, np.ndarray):
            np.array(widened(array), copy=True)


def _torch_touched(path: Path) -> None:
    import torch

    for tensor in _tensors(torch.load(path, mmap=True, weights_only=True, map_location="cpu")):
        if isinstance(tensor, torch.Tensor):
            tensor.to(torch.float32, copy=True).contiguous()


def _import_seconds(statement: str) -> float:
    code = f"import time; s = time.perf_counter(); {statement}; print(time.perf_counter() - s)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(3)
    ]
    return min(runs)


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mapping_costs_no_memory(folder: Path) -> str:
    """A 64 MB tensor opened mapped: the resident set grows by the pickle and the page tables only."""
    import torch

    path = folder / "mapped_64MB.pth"
    torch.save(torch.ones(16, 1 << 20), path)
    before = _resident_bytes()
    values = read_torch_file(path, mapped=True)
    opened = _resident_bytes()
    assert isinstance(values, np.ndarray)
    float(values.sum())
    touched = _resident_bytes()
    return (
        f"64 MB tensor, mapped: resident +{(opened - before) / 2**20:.2f} MiB when opened, "
        f"+{(touched - before) / 2**20:.1f} MiB once every value is read"
    )


_OPEN_TIMES = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tui_acc.dumps.torchfile.reader import read_torch_file
best = {}
for path in sys.argv[3:]:
    for _ in range(int(sys.argv[2])):
        start = time.perf_counter()
        read_torch_file(Path(path), mapped=True)
        best[path] = min(best.get(path, 1e9), time.perf_counter() - start)
print(json.dumps(best))
"""


def _against_baseline(paths: list[Path], baseline: Path, rounds: int) -> None:
    """Opening each file mapped with this tree's reader and the baseline's: processes alternating,
    the best of all their rounds each."""
    trees = {"this tree": REPO, "baseline": baseline.resolve()}
    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    for _ in range(3):
        for name, tree in trees.items():
            command = [sys.executable, "-c", _OPEN_TIMES, str(tree), str(rounds), *map(str, paths)]
            found = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
            for path, seconds in found.items():
                best[name][path] = min(best[name].get(path, 1e9), seconds)
    width = max(len(p.name) for p in paths)
    print(f"\nopened mapped, against {baseline}: {'file':{width}}  this tree    baseline    ratio")
    for path in paths:
        ours, theirs = best["this tree"][str(path)], best["baseline"][str(path)]
        print(f"  {path.name:{width}}  {ours * 1e3:9.3f} ms {theirs * 1e3:9.3f} ms  {ours / theirs:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", nargs="?", type=Path, help="a dump's folder (default: written samples)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-tree", type=Path, help="another checkout's reader, timed alternately")
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory()
    if args.folder:
        paths = sorted(p for p in args.folder.rglob("*") if p.suffix in (".pth", ".pt") and p.is_file())
    else:
        paths = _write_samples(Path(scratch.name))
    import torch

    readers: dict[str, Callable[[Path], object]] = {
        "ours mapped": lambda p: read_torch_file(p, mapped=True),
        "torch mmap": lambda p: torch.load(p, mmap=True, weights_only=True, map_location="cpu"),
        "ours read": lambda p: read_torch_file(p, mapped=False),
        "torch read": lambda p: torch.load(p, weights_only=True, map_location="cpu"),
        "ours mapped+f32": _ours_touched,
        "torch mmap+f32": _torch_touched,
    }
    totals = dict.fromkeys(readers, 0.0)
    width = max(len(p.name) for p in paths[:20])
    print(f"{'file':{width}}  {'MB':>6}  " + "  ".join(f"{name:>15}" for name in readers))
    for number, path in enumerate(paths):
        times = {name: _best(lambda r=reader, p=path: r(p), args.rounds) for name, reader in readers.items()}
        for name, seconds in times.items():
            totals[name] += seconds
        if number < 20:
            size = path.stat().st_size / 1e6
            cells = "  ".join(f"{times[name] * 1e3:12.3f} ms" for name in readers)
            print(f"{path.name:{width}}  {size:6.1f}  {cells}")
    print(
        f"{f'all {len(paths)} files':{width}}  {'':6}  "
        + "  ".join(f"{t * 1e3:12.3f} ms" for t in totals.values())
    )
    print(_mapping_costs_no_memory(Path(scratch.name)))
    print(f"import: torch {_import_seconds('import torch'):.3f} s, ", end="")
    print(f"tui_acc.dumps.torchfile.reader {_import_seconds('import tui_acc.dumps.torchfile.reader'):.3f} s")
    if args.baseline_tree:
        _against_baseline(paths, args.baseline_tree, args.rounds * 4)


if __name__ == "__main__":
    main()
