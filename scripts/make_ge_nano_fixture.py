"""A "nano" GE dump file (the TLV header), checked by msprobe's own parser, for tests/data/torchair/nano/.

The layout is msprobe's (``msaccucmp/dump_parse/nano_dump_data.py``: its TLV tables; ``cmp_utils/
tlv_parse.py``): no NPU here writes one, so the file is written from those tables and read back by
``NanoDumpDataParser`` before it is kept; the values it must hold go beside it (``expected.npz``).

The op: ``Add.Add_1.2.6.1764374400000001`` with three inputs (bf16 [4, 16]; float32 [16], nano
DT_FLOAT 0; int32 [3], nano DT_INT32 3) and one output (bf16, shape [4, 16], original shape [4, 16],
its original name). Run in the tools venv (msprobe)::

    ~/tools-venv/bin/python scripts/make_ge_nano_fixture.py
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "torchair" / "nano"
NAME = "Add.Add_1.2.6.1764374400000001"
MAGIC = 0x5A5A5A5A
NANO_BF16, NANO_FLOAT, NANO_INT32 = 27, 0, 3
ND = 2


def tlnv(tag: int, values: list[int]) -> bytes:
    return struct.pack("<II", tag, 8 * len(values)) + struct.pack(f"<{len(values)}Q", *values)


def name_tlnv(tag: int, text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<II", tag, len(raw)) + raw


def input_desc(data_type: int, shape: list[int], size: int) -> bytes:
    listed = tlnv(0, shape) + tlnv(1, shape)
    return struct.pack("<iiiQQQI", data_type, ND, 0, 0, 0, size, len(listed)) + listed


def output_desc(data_type: int, shape: list[int], size: int, original: str) -> bytes:
    listed = tlnv(0, shape) + tlnv(1, shape) + name_tlnv(2, original)
    return struct.pack("<iiiiiiQQQI", data_type, ND, 0, 0, data_type, ND, 0, 0, size, len(listed)) + listed


def main() -> int:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 16)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(16).astype(np.float32)
    index = np.array([2, 0, 1], dtype=np.int32)
    out = (x.astype(np.float32) + bias).astype(ml_dtypes.bfloat16)
    inputs = [(NANO_BF16, x), (NANO_FLOAT, bias), (NANO_INT32, index)]
    body = struct.pack("<I", len(inputs)) + b"".join(
        input_desc(kind, list(value.shape), value.nbytes) for kind, value in inputs
    )
    outputs = struct.pack("<I", 1) + output_desc(NANO_BF16, list(out.shape), out.nbytes, "add_1")
    header = (
        struct.pack("<II", MAGIC, 1)
        + struct.pack("<II", 4, len(body))
        + body
        + struct.pack("<II", 5, len(outputs))
        + outputs
    )
    payload = b"".join(value.tobytes() for _, value in inputs) + out.tobytes()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / NAME
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)
    np.savez(OUT / "expected.npz", **{"input.0": x.view(np.uint16), "input.1": bias, "input.2": index,
                                      "output.0": out.view(np.uint16)})  # fmt: skip
    # msprobe's own reading of it
    import msprobe.msaccucmp as package

    sys.path.insert(0, str(Path(package.__file__).parent))
    from dump_parse.nano_dump_data import NanoDumpDataHandler, NanoDumpDataParser

    assert NanoDumpDataHandler(str(path)).check_is_nano_dump_format()
    parsed = NanoDumpDataParser(str(path)).parse()
    for (_, value), tensor in zip(inputs, parsed.inputs, strict=True):
        assert tensor.data == value.tobytes() and list(tensor.shape_dims) == list(value.shape)
    [output] = parsed.outputs
    assert output.data == out.tobytes() and output.origin_name == "add_1"
    print(f"{path.relative_to(REPO)}: {path.stat().st_size} bytes, read back by msprobe's NanoDumpDataParser")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
