"""GE dump files (TorchAir graph mode) read by tui-acc's wire-format reader, checked against files the
protobuf library encoded from dump_data.proto (tests/data/torchair, scripts/make_ge_dump_fixtures.py):
the big layout (header, then inputs', outputs', buffers' and workspaces' bytes), the old inline one,
FRACTAL_NZ tiles back to ND, and damaged files refused by name."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.torchair.ge_file import GeDumpError, load, read_header

DATA = Path(__file__).resolve().parents[1] / "data" / "torchair"
FILES = sorted((DATA / "ge_files").iterdir())


@pytest.fixture(scope="module")
def expected() -> tuple[dict[str, np.ndarray], dict[str, str]]:
    with np.load(DATA / "ge_expected.npz") as stored:
        values = {key: stored[key] for key in stored.files}
    return values, json.loads((DATA / "ge_expected_dtypes.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[1])
def test_every_tensor_reads_back_as_written(path: Path, expected) -> None:
    values, dtypes = expected
    content = path.read_bytes()
    dump = read_header(path, content)
    assert dump.op_name == path.name.split(".")[1]
    keys = sorted(k for k in values if k.startswith(path.name + "."))
    found = {f"{path.name}.{t.role}.{t.index}": t for t in dump.tensors if t.role in ("input", "output")}
    assert sorted(found) == keys
    for key in keys:
        array = load(dump, found[key], content)
        assert dtype_name(array) == dtypes[key], key
        assert array.shape == values[key].shape, key
        np.testing.assert_array_equal(array.astype(np.float64), values[key], err_msg=key)


def test_buffers_and_workspaces_are_stepped_over() -> None:
    path = next(p for p in FILES if p.name.startswith("Add."))
    dump = read_header(path, path.read_bytes())
    assert [t.size for t in dump.of("buffer")] == [4] and [t.size for t in dump.of("space")] == [4]


def test_a_file_cut_short_or_not_a_dump_is_refused_by_name(tmp_path: Path) -> None:
    path = next(p for p in FILES if p.name.startswith("MatMulV2."))
    content = path.read_bytes()
    cut = tmp_path / path.name
    cut.write_bytes(content[:-100])
    with pytest.raises(GeDumpError, match=r"MatMul_1.*the file holds"):
        read_header(cut, content[:-100])
    junk = tmp_path / "Add.Add_1.1.1.1"
    for body in (b"", b"\x00" * 3, struct.pack("<Q", 2**63) + b"abc", bytes(range(256))):
        with pytest.raises(GeDumpError, match=r"Add\.Add_1.*not a GE dump"):
            read_header(junk, body)


NANO = DATA / "nano"


def test_a_nano_dump_reads_back_as_msprobes_parser_read_it(tmp_path: Path) -> None:
    """The TLV header (scripts/make_ge_nano_fixture.py wrote it from msprobe's tables; msprobe's
    NanoDumpDataParser read it back): nano's own data type numbers (float 0, int32 3) mapped, every
    tensor's bytes after the header in order; through the file reader too."""
    from tui_acc.dumps.policy import LoadPolicy
    from tui_acc.dumps.torchair.ge_file import load_member, read_file_header

    [path] = [p for p in NANO.iterdir() if p.name.startswith("Add.")]
    with np.load(NANO / "expected.npz") as stored:
        wanted = {key: stored[key] for key in stored.files}
    content = path.read_bytes()
    dump = read_header(path, content)
    assert read_file_header(path, LoadPolicy(NANO)).tensors == dump.tensors
    found = {f"{t.role}.{t.index}": load(dump, t, content) for t in dump.tensors}
    assert sorted(found) == sorted(wanted)
    assert [dtype_name(found[k]) for k in sorted(found)] == ["bfloat16", "float32", "int32", "bfloat16"]
    for key, values in wanted.items():
        ours = found[key].view(np.uint16) if found[key].dtype.itemsize == 2 else found[key]
        np.testing.assert_array_equal(ours, values, err_msg=key)
        np.testing.assert_array_equal(load_member(path, key, LoadPolicy(NANO)), found[key])
    cut = tmp_path / path.name
    for body in (content[:-1], content[:40]):
        with pytest.raises(GeDumpError, match=r"Add_1.*nano"):
            read_header(cut, body)


def test_dims_one_varint_per_field_read_like_packed_ones(tmp_path: Path) -> None:
    """Shape.dim written unpacked (field 1, wire type 0, once per dim): proto3 parsers accept both."""
    shape = bytes([0x08, 2, 0x08, 3])  # dim: 2, dim: 3
    tensor = bytes([0x08, 1, 0x10, 2, 0x1A, len(shape)]) + shape + bytes([0x28, 24])  # float, ND, size 24
    header = bytes([0x22, len(tensor)]) + tensor  # DumpData.input
    values = np.arange(6, dtype=np.float32)
    content = struct.pack("<Q", len(header)) + header + values.tobytes()
    dump = read_header(tmp_path / "X.x.1.1.1", content)
    np.testing.assert_array_equal(load(dump, dump.tensors[0], content), values.reshape(2, 3))


def test_a_forged_nano_header_is_named_quickly(tmp_path: Path) -> None:
    """A nano header claiming two billion inputs, or a header length past any header's: named, not
    parsed for minutes or read into memory."""
    path = tmp_path / "Add.Add_1.1.1.1"
    header = struct.pack("<IIIII", 0x5A5A5A5A, 1, 4, 8, 2**31)
    with pytest.raises(GeDumpError, match=r"Add_1.*nano.*2147483648 inputs"):
        read_header(path, struct.pack("<Q", len(header)) + header)
    with pytest.raises(GeDumpError, match=r"Add_1.*nano.*header length"):
        read_header(path, struct.pack("<QI", 1 << 40, 0x5A5A5A5A) + b"\x00" * 16)
