"""GE dump files (TorchAir graph mode) encoded with the protobuf library from dump_data.proto as
msprobe kept it (scripts/proto/dump_data.proto): ``tests/data/torchair/ge_files/``, and the values
each tensor holds in ``ge_expected.npz`` (``{file}.{role}.{index}``, in float64) and their dtypes in
``ge_expected_dtypes.json``.

The layout is msprobe's big-dump reader's (``msaccucmp/dump_parse/big_dump_data.py``): a little-endian
uint64 header length, the header (``DumpData`` with each tensor's size, no data), then every input's
bytes, every output's, every buffer's and workspace's. The old layout puts the bytes in the header.
FRACTAL_NZ tiles are written from the ND values by the placement msaccucmp's
``convert_FRACTAL_NZ_to_ND.py`` undoes: element (h, w) of ``[H, W]`` at ``[w // 16, h // 16, h % 16,
w % 16]`` of ``[ceil(W/16), ceil(H/16), 16, 16]``. No NPU is involved: these are the format's
documented shapes, made here so that tui-acc's own wire-format reader is checked against the
protobuf library's encoder.

Run in the tools venv (protobuf and grpcio-tools)::

    ~/tools-venv/bin/python scripts/make_ge_dump_fixtures.py
"""

from __future__ import annotations

import importlib
import json
import struct
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "torchair" / "ge_files"
PROTO = Path(__file__).resolve().parent / "proto" / "dump_data.proto"
FLOAT, FLOAT16, INT64, BF16 = 1, 2, 8, 27
ND, NCHW, FRACTAL_NZ = 2, 0, 29


def compiled() -> object:
    """dump_data_pb2, generated into a temporary folder by grpc_tools' protoc."""
    from grpc_tools import protoc

    work = Path(tempfile.mkdtemp())
    code = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={work}", str(PROTO)])
    if code:
        raise SystemExit(f"protoc failed on {PROTO}")
    sys.path.insert(0, str(work))
    return importlib.import_module("dump_data_pb2")


def nz_tiles(matrix: np.ndarray) -> np.ndarray:
    """``[H, W]`` as FRACTAL_NZ ``[ceil(W/16), ceil(H/16), 16, 16]``, the padding zero."""
    rows, cols = matrix.shape
    c1, no = -(-cols // 16), -(-rows // 16)
    tiles = np.zeros((c1, no, 16, 16), matrix.dtype)
    for h in range(rows):
        for w in range(cols):
            tiles[w // 16, h // 16, h % 16, w % 16] = matrix[h, w]
    return tiles


def main() -> int:
    pb = compiled()
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    expected: dict[str, np.ndarray] = {}

    def tensor(kind: object, values: np.ndarray, code: int, fmt: int = ND, shape=None, original=None):
        item = kind()
        item.data_type, item.format = code, fmt
        item.shape.dim.extend(shape if shape is not None else values.shape)
        if original is not None:
            item.original_shape.dim.extend(original)
        item.size = values.nbytes
        return item

    def write(name: str, op: str, inputs, outputs, extra=(), inline: bool = False) -> None:
        dump = pb.DumpData(version="2.0", dump_time=1706596912161941, op_name=op)
        payload = b""
        for role, kind, items in (("input", pb.OpInput, inputs), ("output", pb.OpOutput, outputs)):
            for index, (values, code, fmt, shape, original, logical) in enumerate(items):
                made = tensor(kind, values, code, fmt, shape, original)
                if inline:
                    made.data = values.tobytes()
                else:
                    payload += values.tobytes()
                getattr(dump, role).append(made)
                expected[f"{name}.{role}.{index}"] = logical
        for size in extra:  # a buffer and a workspace: bytes tui-acc must step over
            dump.buffer.append(pb.OpBuffer(size=size))
            dump.space.append(pb.Workspace(size=size))
            payload += bytes(range(size)) * 2
        header = dump.SerializeToString()
        content = header if inline else struct.pack("<Q", len(header)) + header + payload
        (OUT / name).write_bytes(content)

    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float16)
    c = (a + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    ids = np.arange(5, dtype=np.int64).reshape(1, 5)
    write(
        "Add.Add_2.44.6.1706596912161941",
        "Add_2",
        [(a, FLOAT, ND, None, None, a), (b, FLOAT16, ND, None, None, b), (ids, INT64, ND, None, None, ids)],
        [(c, BF16, ND, None, None, c)],
        extra=(4,),
    )
    weight = rng.standard_normal((3, 20)).astype(np.float16)
    tiles = nz_tiles(weight)
    write(
        "MatMulV2.MatMul_1.1.42.6.1706596912162000",
        "MatMul_1",
        [(a, FLOAT, ND, None, None, a)],
        [(tiles, FLOAT16, FRACTAL_NZ, list(tiles.shape), [3, 20], weight)],
    )
    batched = rng.standard_normal((2, 3, 20)).astype(np.float16)
    stacked = np.stack([nz_tiles(m) for m in batched])
    write(
        "BatchMatMul.BatchMatMul_3.7.42.6.1706596912163000",
        "BatchMatMul_3",
        [],
        [(stacked, FLOAT16, FRACTAL_NZ, list(stacked.shape), [2, 3, 20], batched)],
    )
    write(
        "Cast.Cast_9.19.6.1706596911887829",
        "Cast_9",
        [(a, FLOAT, NCHW, [1, 1, 2, 3], None, a.reshape(1, 1, 2, 3))],
        [(a.astype(np.float16), FLOAT16, ND, None, None, a.astype(np.float16))],
        inline=True,
    )
    # float64 holds every value exactly (bfloat16 has no .npy form); the dtypes beside, by name
    wide = {k: np.asarray(v).astype(np.float64) for k, v in expected.items()}
    np.savez(OUT.parent / "ge_expected.npz", **wide)
    dtypes = {k: str(np.asarray(v).dtype) for k, v in expected.items()}
    (OUT.parent / "ge_expected_dtypes.json").write_text(json.dumps(dtypes, indent=1) + "\n", encoding="utf-8")
    for path in sorted(OUT.iterdir()):
        print(f"{path.relative_to(REPO)}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
