"""What inferring execution order from data flow costs when an msit torch dump lost its file times.

    python scripts/bench_dataflow_order.py [--files 100000] [--layers 32] [--no-crc] [--repeat 5]

The dump is real data flow: the demo's Llama (``--layers`` decoder layers) run through the demo's
msit-layout capture hook for two tokens, then token folders hard-linked up to ``--files`` tensor
files, as ``bench_scale.py`` does (the order is inferred from one token, so the others only need
to exist). It is indexed twice in the same run, best of ``--repeat``:

1. plain: the files keep their times (the order comes from them, no file is opened);
2. data flow: every file stamped with one time, as a copy that did not keep them leaves it; the
   reader then opens the sample token's files and reads their zip directories (and, with
   ``--no-crc``, hashes the storages that a file of the other role matches in size, as for dumps
   saved with ``torch.serialization.set_crc32_options(False)``).

It prints both times, their ratio and what was read. The page cache is warm in both (the dump was
just written); a cold cache costs the data-flow index one small read per file of one token.
Nothing here is a test: machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from settle import settle  # noqa: E402  (scripts/settle.py, beside this one)


def make_dump(root: Path, files: int, layers: int, crc: bool) -> tuple[Path, int]:
    """A demo-model msit torch dump of about ``files`` tensor files; its device folder and its count."""
    import torch

    from tui_acc.demo.capture import MsitTorchCapture
    from tui_acc.demo.model import TinyConfig, build_model, generate

    model = build_model(0, TinyConfig(num_layers=layers))
    with MsitTorchCapture(model, root) as capture:
        generate(model, [1, 37, 200, 88, 4, 9, 61, 300], new_tokens=2)
    device = capture.data_dir
    if not crc:  # the capture writes CRCs; torch.save without them (its option) is the slow path here
        torch.serialization.set_crc32_options(False)
        try:
            for path in device.rglob("*.pth"):
                torch.save(torch.load(path, weights_only=True), path)
        finally:
            torch.serialization.set_crc32_options(True)
    per_token = sum(len(files) for _, _, files in os.walk(device / "1"))
    written = 2 * per_token
    token = 2
    while written < files:
        for folder, _, names in os.walk(device / "1"):
            target = device / str(token) / Path(folder).relative_to(device / "1")
            target.mkdir(parents=True, exist_ok=True)
            for name in names:
                os.link(Path(folder) / name, target / name)
        written += per_token
        token += 1
    return device, written


def best_index_time(path: Path, repeat: int) -> tuple[float, str]:
    from tui_acc.dumps import open_dump

    times, source = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        index = open_dump(path)
        times.append(time.perf_counter() - start)
        source = index.order_source
    return min(times), source


def sample_token_reads(device: Path) -> tuple[int, int]:
    """Tensor files of the sampled token (token 0), and their bytes: what plain indexing never opens."""
    count = size = 0
    for folder, _, names in os.walk(device / "0"):
        for name in names:
            if name.endswith(".pth"):
                count += 1
                size += (Path(folder) / name).stat().st_size
    return count, size


def stamp_as_a_copy(root: Path) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(Path(folder) / name, ns=(1_700_000_000_000_000_000,) * 2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=100_000, help="tensor files in the dump")
    parser.add_argument("--layers", type=int, default=32, help="decoder layers of the demo model")
    parser.add_argument("--no-crc", action="store_true", help="save without CRC-32s (storages are hashed)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        start = time.perf_counter()
        device, files = make_dump(tmp / "dump", args.files, args.layers, crc=not args.no_crc)
        settle(tmp)
        took = time.perf_counter() - start
        print(f"dump: {files} tensor files, {args.layers} layers, generated in {took:.1f} s")
        plain, plain_source = best_index_time(tmp / "dump", args.repeat)
        stamp_as_a_copy(tmp)
        inferred, inferred_source = best_index_time(tmp / "dump", args.repeat)
        opened, opened_bytes = sample_token_reads(device)
    print(f"plain index (file times):   {plain * 1000:8.1f} ms  order: {plain_source}")
    print(f"index with data flow:       {inferred * 1000:8.1f} ms  order: {inferred_source}")
    print(f"ratio data flow / plain:    {inferred / plain:8.2f}")
    print(
        f"files opened for the order: {opened} of {files} (one token), their zip directories only"
        + (
            f"; storages hashed where sizes match (files total {opened_bytes / 2**20:.1f} MiB)"
            if args.no_crc
            else ""
        )
    )


if __name__ == "__main__":
    main()
