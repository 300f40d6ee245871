"""GE statistics dumps (``dump_data="stats"``) of the TorchAir Llama fixture: ``ge-stats/clean/`` and
``ge-stats/fault/``, packed as ``tests/data/torchair/ge-stats.tar.xz``.

Each GE dump file of ``llama.tar.xz``'s ``ge-clean`` and ``ge-fault`` becomes the CSV the runtime
writes in its place with statistics on: ``{its name}.csv``, the header
``Input/Output,Index,Data Size,Data Type,Format,Shape,Count,Max Value,Min Value,Avg Value,l2norm,Nan Count``
(the names msprobe's reader of these chunks matches: ccsrc ``AclDumpDataProcessor.cpp``), then a
row per input and output, the statistics of the bytes as laid out on the device (a FRACTAL_NZ
tensor's padding included). The files are decoded here by the protobuf library from
``scripts/proto/dump_data.proto`` and the statistics computed in float64 by numpy: nothing of
tui-acc's reader. No public source spells the runtime's data type and shape strings: they are
written as GE names them (``DT_BF16``) and dims joined by ``x``. The graph texts are copied as they are.

Run in the tools venv (protobuf, grpcio-tools)::

    ~/tools-venv/bin/python scripts/make_ge_stats_fixture.py
"""

from __future__ import annotations

import io
import struct
import sys
import tarfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_ge_dump_fixtures import compiled

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "data" / "torchair" / "llama.tar.xz"
OUT = REPO / "tests" / "data" / "torchair" / "ge-stats.tar.xz"
KINDS = {"ge-clean": "ge-stats/clean", "ge-fault": "ge-stats/fault"}
HEADER = (
    "Input/Output,Index,Data Size,Data Type,Format,Shape,Count,Max Value,Min Value,Avg Value,l2norm,Nan Count"
)
# dump_data.proto's OutputDataType -> (GE's name, numpy type of its bytes)
TYPES = {1: ("DT_FLOAT", np.float32), 2: ("DT_FLOAT16", np.float16), 7: ("DT_INT32", np.int32),
         8: ("DT_INT64", np.int64), 11: ("DT_BOOL", np.bool_), 27: ("DT_BF16", np.uint16)}  # fmt: skip
FORMATS = {0: "NCHW", 2: "ND", 29: "FRACTAL_NZ"}


def values(raw: bytes, data_type: int) -> np.ndarray:
    """The tensor's values in float64 (bf16 widened by its bits: the high half of a float32)."""
    array = np.frombuffer(raw, dtype=TYPES[data_type][1])
    if data_type == 27:
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)


def stats_csv(pb, data: bytes) -> str:
    (length,) = struct.unpack_from("<Q", data)
    dump = pb.DumpData()
    dump.ParseFromString(data[8 : 8 + length])
    offset = 8 + length
    lines = [HEADER]
    for role, tensors in (("Input", dump.input), ("Output", dump.output)):
        for index, tensor in enumerate(tensors):
            raw = data[offset : offset + tensor.size]
            offset += tensor.size
            array = values(raw, tensor.data_type)
            shape = "x".join(str(d) for d in tensor.shape.dim)
            if array.size:
                numbers = [array.max(), array.min(), array.mean(), np.linalg.norm(array)]
                stats = ",".join(repr(float(v)) for v in numbers) + f",{int(np.isnan(array).sum())}"
            else:
                stats = ",,,,0"
            kind = TYPES[tensor.data_type][0]
            fmt = FORMATS[tensor.format & 0xFF]
            lines.append(f"{role},{index},{tensor.size},{kind},{fmt},{shape},{array.size},{stats}")
    return "\n".join(lines) + "\n"


def main() -> int:
    pb = compiled()
    written = 0
    with tarfile.open(SOURCE) as source, tarfile.open(OUT, "w:xz") as out:
        for member in source.getmembers():
            top, _, rest = member.name.removeprefix("llama/").partition("/")
            if top not in KINDS or not member.isfile():
                continue
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            name = f"{KINDS[top]}/{rest}"
            if Path(rest).name.startswith("dynamo_original_graph_"):
                body = data
            else:
                name += ".csv"
                body = stats_csv(pb, data).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(body), 0
            out.addfile(info, io.BytesIO(body))
            written += 1
    print(f"{OUT}: {written} files, {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
