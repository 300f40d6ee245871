"""Tensor files are loaded without ever executing pickled code."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.mappings import GUARDED, is_mapped
from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.dumps.torchfile.arrays import from_torch


class _Exploit:
    def __reduce__(self):  # pragma: no cover - must never run
        return (Path.touch, (Path("/tmp/tui-acc-pwned"),))


def test_loads_bf16_as_bf16(tmp_path: Path) -> None:
    t = torch.tensor([1.5, -2.25], dtype=torch.bfloat16)
    torch.save(t, tmp_path / "x.pth")
    loaded = load_tensor(tmp_path / "x.pth", ANYWHERE)
    assert dtype_name(loaded) == "bfloat16" and loaded.astype(np.float32).tolist() == [1.5, -2.25]


def test_views_are_loaded_as_views(tmp_path: Path) -> None:
    base = torch.arange(12.0).reshape(1, 6, 2)
    torch.save(base[:, -1:, :], tmp_path / "view.pth")  # torch.save keeps the whole storage
    assert load_tensor(tmp_path / "view.pth", ANYWHERE).tolist() == [[[10.0, 11.0]]]


def test_pickled_code_is_refused(tmp_path: Path) -> None:
    marker = Path("/tmp/tui-acc-pwned")
    marker.unlink(missing_ok=True)
    path = tmp_path / "evil.pth"
    torch.save({"x": _Exploit()}, path, pickle_module=pickle)
    with pytest.raises(TensorLoadError, match=r"evil\.pth: refused"):
        load_tensor(path, ANYWHERE)
    assert not marker.exists()


def test_garbage_and_non_tensors_are_named(tmp_path: Path) -> None:
    (tmp_path / "junk.pth").write_bytes(b"\x00\x01 not a zip")
    with pytest.raises(TensorLoadError, match=r"junk\.pth: unreadable torch file"):
        load_tensor(tmp_path / "junk.pth", ANYWHERE)
    torch.save({"a": torch.zeros(1)}, tmp_path / "dict.pth")
    with pytest.raises(TensorLoadError, match=r"dict\.pth: holds a dict, not a tensor"):
        load_tensor(tmp_path / "dict.pth", ANYWHERE)
    with pytest.raises(TensorLoadError, match="file not found"):
        load_tensor(tmp_path / "missing.pth", ANYWHERE)


def _age(path: Path, seconds: float = 60.0) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def test_zip_files_are_memory_mapped_and_legacy_files_still_load(tmp_path: Path) -> None:
    t = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB: smaller storages are read, not mapped
    torch.save(t, tmp_path / "new.pth")
    _age(tmp_path / "new.pth")
    loaded = load_tensor(tmp_path / "new.pth", ANYWHERE)
    assert (str(tmp_path / "new.pth") in Path("/proc/self/maps").read_text()) is GUARDED
    assert is_mapped(loaded) is GUARDED
    np.testing.assert_array_equal(loaded, from_torch(t))
    torch.save(t[:4], tmp_path / "old.pth", _use_new_zipfile_serialization=False)
    assert load_tensor(tmp_path / "old.pth", ANYWHERE).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_file_changed_moments_ago_is_read_not_mapped(tmp_path: Path) -> None:
    """It may still be being written: a mapped page the writer truncates away is SIGBUS."""
    from tui_acc.dumps.atb.bin import _map

    t = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB: it would be mapped once settled
    torch.save(t, tmp_path / "fresh.pth")
    loaded = load_tensor(tmp_path / "fresh.pth", ANYWHERE)
    assert str(tmp_path / "fresh.pth") not in Path("/proc/self/maps").read_text()
    np.testing.assert_array_equal(loaded, from_torch(t))
    raw = tmp_path / "payload"
    raw.write_bytes(bytes(range(256)) * 4)
    fresh = _map(raw, 16, 32)
    assert not is_mapped(fresh) and fresh.tolist() == list(range(16, 48))
    _age(raw)
    settled = _map(raw, 16, 32)
    assert is_mapped(settled) is GUARDED and settled.tolist() == list(range(16, 48))


def test_npy_files_are_read_by_numpy_and_object_arrays_refused(tmp_path: Path) -> None:
    """msprobe's MindSpore dumps save .npy; one holding pickled objects is refused, never unpickled."""
    values = np.arange(12, dtype=np.float16).reshape(3, 4)
    np.save(tmp_path / "x.npy", values)
    np.testing.assert_array_equal(load_tensor(tmp_path / "x.npy", ANYWHERE), values)
    np.save(tmp_path / "objects.npy", np.array([_Exploit()], dtype=object), allow_pickle=True)
    with pytest.raises(TensorLoadError, match=r"objects\.npy: refused: a \.npy of pickled objects"):
        load_tensor(tmp_path / "objects.npy", ANYWHERE)
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(TensorLoadError, match=r"bad\.npy: unreadable \.npy file"):
        load_tensor(tmp_path / "bad.npy", ANYWHERE)


def test_odd_npy_files_are_named_not_misread(tmp_path: Path) -> None:
    """A FIFO must not block the reader; random bytes are not 'pickled objects'; strings and dates
    are not numbers; big-endian floats are read as the floats they are."""
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    with pytest.raises(TensorLoadError, match=r"pipe\.npy: not a regular file"):
        load_tensor(fifo, ANYWHERE)
    (tmp_path / "noise.npy").write_bytes(os.urandom(64))
    with pytest.raises(TensorLoadError, match=r"noise\.npy: unreadable \.npy file \(no NUMPY header"):
        load_tensor(tmp_path / "noise.npy", ANYWHERE)
    np.save(tmp_path / "words.npy", np.array(["a", "b"]))
    with pytest.raises(TensorLoadError, match=r"words\.npy: holds <U1 values, not numbers"):
        load_tensor(tmp_path / "words.npy", ANYWHERE)
    np.save(tmp_path / "big.npy", np.arange(4, dtype=">f4"))
    loaded = load_tensor(tmp_path / "big.npy", ANYWHERE)
    assert dtype_name(loaded) == "float32" and loaded.dtype.isnative and loaded.tolist() == [0, 1, 2, 3]
