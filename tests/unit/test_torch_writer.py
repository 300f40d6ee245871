"""dumps/writers/torch_file.py: what it writes is what torch.save writes for the tensor, to both readers."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.dumps.torchfile.reader import read_torch_file
from tui_acc.dumps.writers.torch_file import write_torch_file

DTYPES = [
    np.float64, np.float32, np.float16, ml_dtypes.bfloat16, np.int64, np.int32, np.int16, np.int8,
    np.uint8, np.bool_, np.complex64, np.complex128,
]  # fmt: skip


def _bits(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_torch_and_our_reader_read_back_the_same_bits(tmp_path: Path, dtype: type) -> None:
    source = (np.arange(-12, 12).reshape(2, 3, 4) * 0.37).astype(dtype)[:, 1:, ::2]  # not contiguous
    path = write_torch_file(tmp_path / "t.pth", source)
    by_torch = torch.load(path, weights_only=True)
    assert tuple(by_torch.shape) == source.shape and by_torch.is_contiguous()
    assert _bits(from_torch(by_torch)) == _bits(source)
    ours = read_torch_file(path, mapped=True)
    assert isinstance(ours, np.ndarray) and ours.dtype == source.dtype and _bits(ours) == _bits(source)


def test_a_scalar_stays_a_scalar_and_big_endian_is_written_little(tmp_path: Path) -> None:
    assert torch.load(write_torch_file(tmp_path / "s.pth", np.float64(2.5)), weights_only=True).shape == ()
    swapped = np.arange(5, dtype=">f4")
    assert torch.load(write_torch_file(tmp_path / "b.pth", swapped), weights_only=True).tolist() == list(
        range(5)
    )


def test_records_are_aligned_and_the_file_depends_only_on_the_array(tmp_path: Path) -> None:
    """Storages start at 64-byte boundaries, as torch's (so they can be mapped as they are), and the
    same array gives the same bytes (no time, no random id): two runs of the demo are equal files."""
    values = np.linspace(0, 1, 100, dtype=np.float32)
    first = write_torch_file(tmp_path / "a.pth", values).read_bytes()
    assert write_torch_file(tmp_path / "b.pth", values).read_bytes() == first
    with zipfile.ZipFile(tmp_path / "a.pth") as archive:
        for info in archive.infolist():
            name_length, extra_length = struct.unpack(
                "<HH", first[info.header_offset + 26 : info.header_offset + 30]
            )
            assert (info.header_offset + 30 + name_length + extra_length) % 64 == 0, info.filename
            assert info.compress_type == zipfile.ZIP_STORED


def test_a_dtype_without_a_storage_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        write_torch_file(tmp_path / "f8.pth", np.zeros(3, ml_dtypes.float8_e4m3fn))
    assert not (tmp_path / "f8.pth").exists()
