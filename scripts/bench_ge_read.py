"""Reading TorchAir GE dumps: tensor bytes per second, and the time to a comparison's token list.

    python scripts/bench_ge_read.py [--gigabytes 1] [--files 100000] [--runs 5]

1. **Throughput.** Writes a GE dump of ``--gigabytes`` of bf16 tensors (files of one input and one
   output, 4 MiB each, as GE lays them out: an 8-byte header length, the ``DumpData`` header, then
   the tensors' bytes), reads every file once to warm the page cache, then loads every tensor
   through tui-acc's reader (``dumps.tensors.load_tensor``, the header parsed, the member's bytes
   mapped) and sums it, ``--runs`` times. The baseline, timed in the same run on the same files:
   ``numpy.fromfile`` of the same bytes (the header's offsets known beforehand, nothing parsed) and
   the same sum. Printed: GB/s of tensor bytes for each, and the ratio.
2. **First screen.** Writes a GE dump of ``--files`` files (one graph of 1,000 ops run
   ``files / 1000`` times, each file a small tensor) with its graph text, and a hard-linked copy as
   the golden (GE against GE), then times fresh processes (start-up and imports included) from
   launch to one dump's index, and to the comparison's token list (``open_comparison`` and
   ``pairing.tokens``: what the TUI's first screen draws), and, as the baseline in the same run,
   fresh processes that only walk the same folders (``os.walk``, every file's name). The TUI itself
   in a terminal: ``bench_first_screen.py --layout ge``.

Nothing here is a test: machines are noisy (the load average is printed with the figures). The
header is encoded by hand from ``scripts/proto/dump_data.proto``'s field numbers; the fixtures the
tests read were encoded by the protobuf library (``make_torchair_fixtures.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DT_BF16, FORMAT_ND = 27, 2
FILE_BYTES = 4 << 20  # per file: one input and one output of 2 MiB each
OPS_PER_GRAPH = 1000


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _tensor(shape: tuple[int, ...], size: int, size_field: int) -> bytes:
    dims = b"".join(_varint(d) for d in shape)
    return _field(1, DT_BF16) + _field(2, FORMAT_ND) + _field(3, _field(1, dims)) + _field(size_field, size)


def _header(op: str, shape: tuple[int, ...]) -> bytes:
    """DumpData: version (1), dump_time (2), output (3: its size is field 6), input (4: size field 5),
    op_name (6)."""
    size = int(np.prod(shape)) * 2
    return (
        _field(1, b"2.0")
        + _field(2, 1)
        + _field(3, _tensor(shape, size, 6))
        + _field(4, _tensor(shape, size, 5))
        + _field(6, op.encode())
    )


def _write_file(path: Path, op: str, shape: tuple[int, ...], payload: bytes) -> int:
    header = _header(op, shape)
    path.write_bytes(len(header).to_bytes(8, "little") + header + payload + payload)
    return 8 + len(header)


def _graph_text(ops: list[str]) -> str:
    lines = ['name: "graph_1"']
    for i, op in enumerate(ops):
        lines += ["op {", f'  name: "{op}"', '  type: "Add"']
        if i:
            lines.append(f'  input: "{ops[i - 1]}:0"')
        lines += [
            "  output_desc {",
            '    name: "y"',
            "    dtype: DT_BF16",
            "    shape { dim: 8 }",
            "  }",
            "}",
        ]
    return "\n".join(lines) + "\n"


def _step_folder(base: Path, step: int) -> Path:
    folder = base / "worldsize1_global_rank0" / "20261129000000" / "0" / "graph_1" / "1" / str(step)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def throughput(root: Path, gigabytes: float, runs: int) -> dict[str, float]:
    from tui_acc.dumps import open_dump
    from tui_acc.dumps.tensors import load_tensor

    base = root / "msprobe_ge_dump"
    files = max(1, int(gigabytes * (1 << 30)) // FILE_BYTES)
    shape = (1024, FILE_BYTES // 4 // 1024)  # bf16: 2 MiB per tensor
    values = np.random.default_rng(0).standard_normal(size=shape, dtype=np.float32)
    payload = (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # bf16: the high halves
    ops = [f"Add_{i}" for i in range(files)]
    (base).mkdir(parents=True)
    (base / "dynamo_original_graph_1_rank_0_pid_1_ts_1.txt").write_text(_graph_text(ops), encoding="utf-8")
    folder = _step_folder(base, 0)
    offsets = {}
    for i, op in enumerate(ops):
        path = folder / f"Add.{op}.{i + 2}.6.{1764374400000000 + i}"
        offsets[path] = _write_file(path, op, shape, payload)
    for path in offsets:  # the page cache warm
        path.read_bytes()
    index = open_dump(root)
    refs = [ref for refs in index.tokens[0].values() for ref in refs]
    tensor_bytes = sum(int(np.prod(shape)) * 2 for _ in refs)
    ours, baseline = [], []
    for _ in range(runs):
        start = time.perf_counter()
        total = 0.0
        for ref in refs:
            total += float(load_tensor(ref.path, index.load_policy, ref.member).sum(dtype=np.float32))
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        for path, offset in offsets.items():
            raw = np.fromfile(path, dtype=np.uint16, offset=offset)
            for half in np.split(raw, 2):
                total += float(half.view(ml_dtypes.bfloat16).sum(dtype=np.float32))
        baseline.append(time.perf_counter() - start)
    return {
        "tensor GB": tensor_bytes / 1e9,
        "tui-acc GB/s (best)": tensor_bytes / 1e9 / min(ours),
        "numpy.fromfile GB/s (best)": tensor_bytes / 1e9 / min(baseline),
        "ratio tui-acc / fromfile (best)": min(baseline) / min(ours),
    }


def write_ge_dump(root: Path, files: int) -> float:
    """A GE dump of ``files`` small files under ``root`` (one graph of 1,000 ops, run ``files / 1000``
    times) with its graph text; the seconds it took to write."""
    start = time.perf_counter()
    base = root / "msprobe_ge_dump"
    ops = [f"Add_{i}" for i in range(OPS_PER_GRAPH)]
    base.mkdir(parents=True)
    (base / "dynamo_original_graph_1_rank_0_pid_1_ts_1.txt").write_text(_graph_text(ops), encoding="utf-8")
    payload = np.zeros(8, dtype=np.uint16).tobytes()
    stamp = 1764374400000000
    for step in range(max(1, files // OPS_PER_GRAPH)):
        folder = _step_folder(base, step)
        for i, op in enumerate(ops):
            stamp += 1
            _write_file(folder / f"Add.{op}.{i + 2}.6.{stamp}", op, (8,), payload)
    return time.perf_counter() - start


def first_screen(root: Path, files: int, runs: int) -> dict[str, float]:
    write_ge_dump(root / "test", files)
    shutil.copytree(root / "test", root / "golden", copy_function=os.link)
    opened = (
        "import sys; from pathlib import Path; from tui_acc import CompareOptions, open_comparison; "
        "c = open_comparison(Path(sys.argv[1]), Path(sys.argv[2]), CompareOptions(cache=False)); "
        "assert len(c.pairing.tokens) > 0"
    )
    indexed = (
        "import sys; from pathlib import Path; from tui_acc.dumps import open_dump; "
        "assert len(open_dump(Path(sys.argv[2])).tokens) > 0"
    )
    walked = "import os, sys; [f for a in sys.argv[1:] for _, _, f in os.walk(a)]"
    times: dict[str, list[float]] = {"pair": [], "one": [], "walk": []}
    for _ in range(runs):
        for code, kind in ((opened, "pair"), (indexed, "one"), (walked, "walk")):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", code, str(root / "golden"), str(root / "test")], check=True, cwd=REPO
            )
            times[kind].append(time.perf_counter() - start)
    median = {kind: statistics.median(found) for kind, found in times.items()}
    return {
        "files per side": float(files),
        "one GE dump indexed, launch included, s (median)": median["one"],
        "both sides paired to the token list, launch included, s (median)": median["pair"],
        "python os.walk of both, launch included, s (median)": median["walk"],
        "ratio paired / walk (median)": median["pair"] / median["walk"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as folder:
        for name, value in throughput(Path(folder) / "read", args.gigabytes, args.runs).items():
            print(f"{name}: {value:.3f}")
    with tempfile.TemporaryDirectory() as folder:
        for name, value in first_screen(Path(folder), args.files, args.runs).items():
            print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
