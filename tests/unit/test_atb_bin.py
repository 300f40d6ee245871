"""The .bin reader: every dtype code decoded exactly or refused by name; formats; damaged files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tui_acc.dumps.atb.bin import ACL_DTYPES, REFUSED_DTYPES, TILED_FORMATS, read_header
from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.dumps.writers.atb_bin import write_bin

GEN = torch.Generator().manual_seed(11)

BYTE_ALIGNED = {
    0: torch.float32,
    1: torch.float16,
    2: torch.int8,
    3: torch.int32,
    4: torch.uint8,
    6: torch.int16,
    7: torch.uint16,
    8: torch.uint32,
    9: torch.int64,
    10: torch.uint64,
    11: torch.float64,
    12: torch.bool,
    16: torch.complex64,
    17: torch.complex128,
    27: torch.bfloat16,
    35: torch.float8_e5m2,
    36: torch.float8_e4m3fn,
    37: torch.float8_e8m0fnu,
}


def _sample(dtype: torch.dtype) -> torch.Tensor:
    base = torch.randn(2, 3, 5, generator=GEN) * 4
    if dtype == torch.bool:
        return base > 0
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        return base.abs().to(torch.int64).to(dtype)
    if dtype == torch.float8_e8m0fnu:
        return base.abs().clamp_min(0.01).to(dtype)
    return base.to(dtype)


def test_every_code_is_decoded_or_refused() -> None:
    every_code = {-1, 0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 27, 29, 30, 33}
    every_code |= {34, 35, 36, 37, 38, 39, 40, 41, 42}  # docs/formats.md §2.3, HIFLOAT4 included
    assert set(ACL_DTYPES) | set(REFUSED_DTYPES) == every_code
    assert not set(ACL_DTYPES) & set(REFUSED_DTYPES)


@pytest.mark.parametrize("code", sorted(BYTE_ALIGNED))
def test_byte_aligned_codes_round_trip_bit_exactly(tmp_path: Path, code: int) -> None:
    tensor = _sample(BYTE_ALIGNED[code])
    path = write_bin(tmp_path / "t.bin", tensor, dtype_code=code)
    loaded = load_tensor(path, ANYWHERE)
    assert dtype_name(loaded) == str(tensor.dtype).removeprefix("torch.") and loaded.shape == tensor.shape
    assert loaded.tobytes() == tensor.contiguous().view(torch.uint8).numpy().tobytes()


def test_complex32_is_widened_exactly(tmp_path: Path) -> None:
    halves = torch.tensor([1.5, -2.0, 0.25, 65504.0], dtype=torch.float16)
    path = write_bin(
        tmp_path / "c32.bin",
        torch.zeros(2, dtype=torch.float32),
        dtype_code=33,
        payload=halves.numpy().tobytes(),
    )
    loaded = load_tensor(path, ANYWHERE)
    assert loaded.dtype == np.complex64
    assert loaded.tolist() == [complex(1.5, -2.0), complex(0.25, 65504.0)]


def test_bf16_is_the_upper_half_of_fp32(tmp_path: Path) -> None:
    words = np.array([0x3F80, 0xC040, 0x0000, 0x7F80], dtype="<u2")  # 1.0, -3.0, 0.0, +inf
    path = write_bin(tmp_path / "b.bin", torch.zeros(4, dtype=torch.bfloat16), payload=words.tobytes())
    assert load_tensor(path, ANYWHERE).astype(np.float32).tolist() == [1.0, -3.0, 0.0, float("inf")]


def test_int4_is_two_per_byte_low_nibble_first(tmp_path: Path) -> None:
    values = [1, -2, 7, -8, 0]
    nibbles = [v & 0xF for v in values] + [0]
    packed = bytes(nibbles[i] | (nibbles[i + 1] << 4) for i in range(0, 6, 2))
    path = write_bin(tmp_path / "i4.bin", torch.zeros(5, dtype=torch.int8), dtype_code=29, payload=packed)
    assert load_tensor(path, ANYWHERE).tolist() == values


def test_an_int4_bin_whose_dims_overflow_any_float_is_refused_by_name(tmp_path: Path) -> None:
    """dims=10^400 on a packed 4-bit type: its size is counted in integers (a float overflows) and
    found not to be the file's."""
    path = write_bin(tmp_path / "i4.bin", torch.zeros(5, dtype=torch.int8), dtype_code=29, payload=bytes(3))
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"dims=5\n", b"dims=1" + b"0" * 400 + b"\n", 1))
    with pytest.raises(TensorLoadError, match=r"i4\.bin"):
        load_tensor(path, ANYWHERE)


def test_fp4_e2m1_decodes_the_ocp_table(tmp_path: Path) -> None:
    codes = [0b0001, 0b1011, 0b0111, 0b1000]  # 0.5, -1.5, 6.0, -0.0
    packed = bytes([codes[0] | codes[1] << 4, codes[2] | codes[3] << 4])
    path = write_bin(tmp_path / "f4.bin", torch.zeros(2, 2), dtype_code=40, payload=packed)
    assert load_tensor(path, ANYWHERE).tolist() == [[0.5, -1.5], [6.0, -0.0]]


@pytest.mark.parametrize("code", sorted(REFUSED_DTYPES))
def test_unverifiable_codes_are_refused_by_name(tmp_path: Path, code: int) -> None:
    path = write_bin(tmp_path / "r.bin", torch.zeros(4, dtype=torch.uint8), dtype_code=code)
    with pytest.raises(
        TensorLoadError, match=r"r\.bin: dtype .* cannot be decoded exactly; refused rather than misread"
    ):
        load_tensor(path, ANYWHERE)


def test_unknown_code_is_refused(tmp_path: Path) -> None:
    path = write_bin(tmp_path / "u.bin", torch.zeros(4, dtype=torch.uint8), dtype_code=99)
    with pytest.raises(TensorLoadError, match="dtype code 99 cannot be decoded"):
        load_tensor(path, ANYWHERE)


@pytest.mark.parametrize("code", sorted(TILED_FORMATS))
def test_tiled_formats_are_refused(tmp_path: Path, code: int) -> None:
    path = write_bin(tmp_path / "nz.bin", torch.zeros(2, 16), format_code=code)
    with pytest.raises(TensorLoadError, match=rf"format {TILED_FORMATS[code]} \({code}\) is a tiled layout"):
        load_tensor(path, ANYWHERE)


def _tiles_by_hand(matrix: np.ndarray, width: int) -> np.ndarray:
    """FRACTAL_NZ as ATB's transdata kernel documents it, element by element: ``(h, w)`` of an
    ``[H, W]`` matrix at ``[w // W0, h, w % W0]``, H padded to 16 and W to W0 with zeros."""
    rows, cols = matrix.shape
    tiles = np.zeros((-(-cols // width), -(-rows // 16) * 16, width), dtype=matrix.dtype)
    for h in range(rows):
        for w in range(cols):
            tiles[w // width, h, w % width] = matrix[h, w]
    return tiles


def test_nz_with_logical_dims_is_untiled_and_cut(tmp_path: Path) -> None:
    """Two dims are the logical shape (an int8 weight: 32-wide tiles, rows padded to 16)."""
    weight = (np.arange(3 * 40) % 251 - 125).astype(np.int8).reshape(3, 40)
    tiles = _tiles_by_hand(weight, 32)
    assert tiles.shape == (2, 16, 32)
    path = write_bin(tmp_path / "w.bin", weight, format_code=29, payload=tiles.tobytes())
    np.testing.assert_array_equal(load_tensor(path, ANYWHERE), weight)
    half = np.arange(20 * 10, dtype=np.float16).reshape(20, 10)  # 16-wide tiles for 2-byte types
    path = write_bin(tmp_path / "h.bin", half, format_code=29, payload=_tiles_by_hand(half, 16).tobytes())
    np.testing.assert_array_equal(load_tensor(path, ANYWHERE), half)


def test_nz_with_storage_dims_reads_rows_by_columns(tmp_path: Path) -> None:
    """Four dims are the tiles themselves, ``[N, W1, H, W0]``, read back as ``[N, H, W1 * W0]``."""
    matrix = np.arange(16 * 32, dtype=np.float16).reshape(16, 32)
    tiles = _tiles_by_hand(matrix, 16)[None]  # [1, 2, 16, 16]
    loaded = load_tensor(write_bin(tmp_path / "s.bin", tiles, format_code=29), ANYWHERE)
    np.testing.assert_array_equal(loaded, matrix[None])
    by_code = load_tensor(write_bin(tmp_path / "c.bin", tiles, format_code=50), ANYWHERE)
    np.testing.assert_array_equal(by_code, matrix[None])


def test_a_padded_int8_weight_in_four_dims_is_read_with_its_padding(tmp_path: Path) -> None:
    """``[1, 2, 32, 32]``: an int8 ``[20, 40]`` weight, rows padded to 32, columns to 64 (zeros)."""
    weight = (np.arange(20 * 40) % 200 - 100).astype(np.int8).reshape(20, 40)
    tiles = _tiles_by_hand(weight, 32)[None]
    assert tiles.shape == (1, 2, 32, 32)
    loaded = load_tensor(write_bin(tmp_path / "w.bin", tiles, format_code=29), ANYWHERE)
    assert loaded.shape == (1, 32, 64)
    np.testing.assert_array_equal(loaded[0, :20, :40], weight)
    assert not loaded[0, 20:].any() and not loaded[0, :, 40:].any()


@pytest.mark.parametrize(
    ("dims", "dtype", "code"),
    [((1, 8, 7, 128), np.float16, 29), ((1, 2, 16, 32), np.float16, 29), ((1, 2, 16, 16), np.float16, 51)],
    ids=["rows not padded, no tile width", "fp16 in int8's width", "C0_32 holding 16"],
)
def test_four_dims_that_are_no_tiles_are_refused(tmp_path: Path, dims, dtype, code: int) -> None:
    path = write_bin(tmp_path / "x.bin", np.zeros(dims, dtype=dtype), format_code=code)
    with pytest.raises(TensorLoadError, match=r"x\.bin: FRACTAL_NZ with dims .* refused rather than misread"):
        load_tensor(path, ANYWHERE)


def test_nz_that_cannot_be_read_exactly_is_refused(tmp_path: Path) -> None:
    weight = np.ones((3, 40), dtype=np.int8)
    short = write_bin(tmp_path / "short.bin", weight, format_code=29)  # ND bytes, not padded tiles
    with pytest.raises(TensorLoadError, match=r"short\.bin: .*need 1024"):
        load_tensor(short, ANYWHERE)
    wide = write_bin(tmp_path / "f32.bin", np.ones((16, 16), dtype=np.float32), format_code=29)
    with pytest.raises(TensorLoadError, match=r"f32\.bin: FRACTAL_NZ .* 4-byte elements"):
        load_tensor(wide, ANYWHERE)


def test_nc1hwc0_reads_its_channels_back_in_order(tmp_path: Path) -> None:
    """NC1HWC0 ``[N, C1, H, W, C0]``: channel c of ``[N, C, H, W]`` at ``[c // C0, ..., c % C0]``
    (CANN's TransDataTo5HD: C0 16 for 2-byte types); four dims cannot say it and are refused."""
    feature = np.arange(2 * 32 * 3 * 5, dtype=np.float16).reshape(2, 32, 3, 5)
    tiles = np.zeros((2, 2, 3, 5, 16), dtype=np.float16)
    for c in range(32):
        tiles[:, c // 16, :, :, c % 16] = feature[:, c]
    loaded = load_tensor(write_bin(tmp_path / "5hd.bin", tiles, format_code=3), ANYWHERE)
    np.testing.assert_array_equal(loaded, feature)
    with pytest.raises(TensorLoadError, match=r"4hd\.bin: NC1HWC0 with dims \[2, 32, 3, 5\]"):
        load_tensor(write_bin(tmp_path / "4hd.bin", feature, format_code=3), ANYWHERE)


def test_plain_formats_read_as_dims(tmp_path: Path) -> None:
    tensor = torch.arange(24.0).reshape(1, 2, 3, 4)
    for code in (0, 1, 2, -1):
        loaded = load_tensor(write_bin(tmp_path / f"p{code}.bin", tensor, format_code=code), ANYWHERE)
        np.testing.assert_array_equal(loaded, from_torch(tensor))


def test_external_data_attribute(tmp_path: Path) -> None:
    tensor = torch.arange(6.0).reshape(2, 3)
    path = write_bin(tmp_path / "ext.bin", tensor, external="ext.data")
    header = read_header(path)
    assert header.external == "ext.data" and header.header_bytes == path.stat().st_size
    np.testing.assert_array_equal(load_tensor(path, ANYWHERE), from_torch(tensor))
    (tmp_path / "ext.data").unlink()
    with pytest.raises(TensorLoadError, match=r"its data= file .*ext\.data does not exist"):
        load_tensor(path, ANYWHERE)


def test_data_offset_is_honoured(tmp_path: Path) -> None:
    tensor = torch.tensor([1.0, 2.0, 3.0])
    raw = b"\xde\xad\xbe\xef" + tensor.numpy().tobytes()
    text = "$Version=1.0\n$Object.Count=1\n$Object.Length=16\nformat=2\ndtype=0\ndims=3\n"
    text += "$Object.data=4,12\n$End=1\n"
    path = tmp_path / "off.bin"
    path.write_bytes(text.encode() + raw)
    assert load_tensor(path, ANYWHERE).tolist() == [1.0, 2.0, 3.0]


def test_damaged_files_are_named(tmp_path: Path) -> None:
    path = write_bin(tmp_path / "trunc.bin", torch.zeros(10))
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(
        TensorLoadError, match=r"trunc\.bin: truncated: 32 payload bytes, dims \[10\] x float32 need 40"
    ):
        load_tensor(path, ANYWHERE)
    (tmp_path / "noend.bin").write_bytes(b"dtype=0\ndims=2\n")
    with pytest.raises(TensorLoadError, match="no '\\$End=1' line"):
        load_tensor(tmp_path / "noend.bin", ANYWHERE)
    (tmp_path / "bad.bin").write_bytes(b"dtype=0\ndims=2\nx=1=2\n$End=1\n")
    with pytest.raises(TensorLoadError, match="malformed header line 'x=1=2'"):
        load_tensor(tmp_path / "bad.bin", ANYWHERE)
    (tmp_path / "stats.bin").write_bytes(
        b"format=2\ndtype=0\ndims=2\nmax=1\nmin=0\nmean=0.5\nl2norm=1\n$End=1\n"
    )
    with pytest.raises(TensorLoadError, match="statistics-only tensor"):
        load_tensor(tmp_path / "stats.bin", ANYWHERE)


def test_payload_is_memory_mapped_not_read(tmp_path: Path) -> None:
    path = write_bin(tmp_path / "big.bin", torch.zeros(1 << 16))
    stat = (
        path.stat()
    )  # a file that has settled (one written moments ago is read: tests/unit/test_tensors.py)
    os.utime(path, (stat.st_atime - 60, stat.st_mtime - 60))
    loaded = load_tensor(path, ANYWHERE)
    maps = Path("/proc/self/maps").read_text()
    assert str(path) in maps  # the tensor is backed by a mapping of the file, not a copy
    assert loaded.shape == (1 << 16,)
