"""torch's zip files read without torch: every dtype bit for bit against torch.load, views, shared
storages, containers; the legacy format and unknown records left to torch; code in the pickle refused
by name and never run; forged sizes refused before anything is read or allocated."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import warnings
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.mappings import GUARDED, is_mapped
from tests.unit.torch_samples import DTYPES, random_bits
from tui_acc.dumps.torchfile import reader
from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.dumps.torchfile.reader import NeedsTorch, RefusedGlobal, TorchFileError, read_torch_file

GEN = torch.Generator().manual_seed(16)
REPO = Path(__file__).resolve().parents[2]


def _random_bits(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    return random_bits(dtype, *shape, generator=GEN)


def _torch_bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy()


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).reshape(-1).view(np.uint8)


def _saved(tmp_path: Path, obj: object, name: str = "t.pt", **options: object) -> Path:
    path = tmp_path / name
    torch.save(obj, path, **options)
    return path


def _same(array: object, tensor: torch.Tensor) -> None:
    assert isinstance(array, np.ndarray)
    assert array.shape == tuple(tensor.shape)
    assert str(array.dtype) == str(tensor.dtype).removeprefix("torch.")
    assert np.array_equal(_bits(array), _torch_bits(tensor))


# --- every dtype, bit for bit ------------------------------------------------------------------


@pytest.mark.parametrize("mapped", [True, False])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_dtype_reads_bit_for_bit(
    tmp_path: Path, dtype: torch.dtype, mapped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader, "_MAPPED_FROM", 0)  # mapped: even this small storage
    tensor = _random_bits(dtype, 3, 5)
    path = _saved(tmp_path, tensor)
    array = read_torch_file(path, mapped=mapped)
    _same(array, torch.load(path, weights_only=True))
    assert isinstance(array, np.ndarray) and is_mapped(array) is (mapped and GUARDED)


@pytest.mark.parametrize("mapped", [True, False])
def test_mapped_storages_are_not_read(tmp_path: Path, mapped: bool) -> None:
    """From 1 MiB a storage is mapped, not read, when asked; a smaller one is read (cheaper)."""
    large = _random_bits(torch.bfloat16, 1024, 513)[:, 1:]
    small = _random_bits(torch.bfloat16, 1024, 511)
    path = _saved(tmp_path, {"large": large, "small": small})
    arrays = read_torch_file(path, mapped=mapped)
    assert isinstance(arrays, dict)
    _same(arrays["large"], large)
    _same(arrays["small"], small)
    assert is_mapped(arrays["large"]) is (mapped and GUARDED)
    assert not is_mapped(arrays["small"])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_torch_fallback_gives_the_same_array(tmp_path: Path, dtype: torch.dtype) -> None:
    path = _saved(tmp_path, _random_bits(dtype, 2, 7)[:, 1:])
    ours = read_torch_file(path, mapped=True)
    theirs = from_torch(torch.load(path, weights_only=True))
    assert isinstance(ours, np.ndarray)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.array_equal(_bits(ours), _bits(theirs))


def test_complex32_is_widened_exactly_to_complex64(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "ComplexHalf support is experimental"
        tensor = torch.complex(torch.randn(4, 3, generator=GEN), torch.randn(4, 3, generator=GEN)).to(
            torch.complex32
        )
        path = _saved(tmp_path, tensor.t())
        expected = torch.load(path, weights_only=True).to(torch.complex64)
    for mapped in (True, False):
        array = read_torch_file(path, mapped=mapped)
        _same(array, expected)


# --- views, shared storages, containers --------------------------------------------------------


@pytest.mark.parametrize("mapped", [True, False])
def test_views_read_as_torch_reads_them(tmp_path: Path, mapped: bool) -> None:
    base = _random_bits(torch.bfloat16, 6, 8)
    views = {
        "transpose": base.t(),
        "slice with an offset": base[2:, 3:7],
        "every other column": base[:, ::2],
        "expand (stride 0)": base[1].expand(5, 8),
        "0-d": base[3, 4],
        "empty": base[:0],
        "empty in the middle": base[:, :0].reshape(6, 0, 1),
        "unsqueeze (a size-1 dim)": base[1:3].unsqueeze(1),
    }
    for name, view in views.items():
        path = _saved(tmp_path, view, f"{len(name)}.pt")
        array = read_torch_file(path, mapped=mapped)
        loaded = torch.load(path, weights_only=True)
        assert loaded.stride() == view.stride(), name  # the file keeps the view, not a copy
        _same(array, loaded)


@pytest.mark.parametrize("mapped", [True, False])
def test_tensors_sharing_a_storage_share_memory(tmp_path: Path, mapped: bool) -> None:
    base = _random_bits(torch.float32, 4, 4)
    path = _saved(tmp_path, [base, base[1:], base.t()])
    arrays = read_torch_file(path, mapped=mapped)
    assert isinstance(arrays, list) and len(arrays) == 3
    for array, tensor in zip(arrays, [base, base[1:], base.t()], strict=True):
        _same(array, tensor)
    assert np.shares_memory(arrays[0], arrays[1]) and np.shares_memory(arrays[0], arrays[2])


def test_containers_parameters_and_sglang_meta(tmp_path: Path) -> None:
    weight = _random_bits(torch.float16, 3, 2)
    bias = _random_bits(torch.float32, 2)
    parameter = torch.nn.Parameter(_random_bits(torch.float32, 5))
    parameter.note = "with a Python attribute"  # saved as _rebuild_parameter_with_state
    state = OrderedDict([("weight", weight), ("bias", torch.nn.Parameter(bias, requires_grad=False))])
    sglang = {
        "value": _random_bits(torch.bfloat16, 2, 3),
        "meta": {
            "dtype": torch.bfloat16,
            "shape": torch.Size([2, 3]),
            "name": "x",
            "device": torch.device("cuda", 0),
        },
    }
    obj = {
        "state": state,
        "list": [1, 2.5, None, True, "s", b"bytes"],
        "tuple": (parameter, {1, 2}),
        "sglang": sglang,
    }
    loaded = read_torch_file(_saved(tmp_path, obj), mapped=True)
    assert isinstance(loaded, dict)
    assert isinstance(loaded["state"], OrderedDict) and list(loaded["state"]) == ["weight", "bias"]
    _same(loaded["state"]["weight"], weight)
    _same(loaded["state"]["bias"], bias)
    assert loaded["list"] == [1, 2.5, None, True, "s", b"bytes"]
    _same(loaded["tuple"][0], parameter)
    assert loaded["tuple"][1] == {1, 2}
    _same(loaded["sglang"]["value"], sglang["value"])
    assert loaded["sglang"]["meta"] == {"dtype": "bfloat16", "shape": (2, 3), "name": "x", "device": "cuda:0"}


def test_every_dtype_torch_lets_a_pickle_name_is_its_name(tmp_path: Path) -> None:
    from torch._weights_only_unpickler import _get_allowed_globals

    dtypes = [value for value in _get_allowed_globals().values() if isinstance(value, torch.dtype)]
    assert len(dtypes) > 30
    loaded = read_torch_file(_saved(tmp_path, dtypes), mapped=True)
    assert loaded == [str(dtype).removeprefix("torch.") for dtype in dtypes]


def test_lazy_conjugate_and_negative_views_are_applied(tmp_path: Path) -> None:
    values = torch.complex(torch.randn(5, generator=GEN), torch.randn(5, generator=GEN))
    for view in (values.conj(), torch._neg_view(values), torch._neg_view(torch.randn(3, generator=GEN))):
        array = read_torch_file(_saved(tmp_path, view), mapped=True)
        _same(array, view.resolve_conj().resolve_neg())


def test_compressed_records_and_another_folder_read(tmp_path: Path) -> None:
    """torch.save never compresses and names its folder 'archive'; a re-zipped file still reads."""
    tensor = _random_bits(torch.float32, 3, 3)
    original = _saved(tmp_path, tensor)
    path = tmp_path / "rezipped.pt"
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename.replace("archive/", "renamed/", 1), source.read(info))
    for mapped in (True, False):
        _same(read_torch_file(path, mapped=mapped), tensor)


def test_reading_never_imports_torch(tmp_path: Path) -> None:
    path = _saved(tmp_path, {"value": _random_bits(torch.bfloat16, 4), "meta": {"dtype": torch.bfloat16}})
    script = (
        "import sys; from pathlib import Path; from tui_acc.dumps.torchfile.reader import read_torch_file\n"
        f"value = read_torch_file(Path({str(path)!r}), mapped=True)['value']; value.sum()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)


# --- left to torch -----------------------------------------------------------------------------


def _rewritten(source: Path, target: Path, changes: dict[str, bytes | None]) -> Path:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            name = info.filename.split("/", 1)[1]
            data = changes.get(name, old.read(info))
            if data is not None:
                new.writestr(info.filename, data)
    return target


def test_legacy_format_is_left_to_torch(tmp_path: Path) -> None:
    path = _saved(tmp_path, torch.ones(3), _use_new_zipfile_serialization=False)
    with pytest.raises(NeedsTorch, match="legacy"):
        read_torch_file(path, mapped=True)


def test_byte_order(tmp_path: Path) -> None:
    tensor = _random_bits(torch.int32, 4)
    original = _saved(tmp_path, tensor)
    absent = _rewritten(original, tmp_path / "absent.pt", {"byteorder": None})
    _same(read_torch_file(absent, mapped=True), tensor)  # files from before torch wrote it: little-endian
    big = _rewritten(original, tmp_path / "big.pt", {"byteorder": b"big"})
    with pytest.raises(NeedsTorch, match="big-endian"):
        read_torch_file(big, mapped=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
        lambda: torch.ones(2, 2).to_sparse(),
        lambda: torch.empty(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
        lambda: torch.nn.Linear(2, 2),
    ],
    ids=["quantized", "sparse", "float4_e2m1fn_x2", "a module"],
)
def test_what_only_torch_knows_is_left_to_torch(tmp_path: Path, make: object) -> None:
    assert callable(make)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: quantized tensors are deprecated
        path = _saved(tmp_path, make())
    with pytest.raises(NeedsTorch):
        read_torch_file(path, mapped=True)


# --- hostile files -----------------------------------------------------------------------------


class _Call:
    """Pickles as a call of ``function`` (a real global, as a forger would name it)."""

    def __init__(self, function: object, *args: object) -> None:
        self.function = function
        self.args = args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.function, self.args


class _StorageId:
    def __init__(self, storage_type: object, key: str, numel: int) -> None:
        self.id = ("storage", storage_type, key, "cpu", numel)


class _Forger(pickle.Pickler):
    def persistent_id(self, obj: object) -> object:
        return obj.id if isinstance(obj, _StorageId) else None


def _forged(tmp_path: Path, obj: object, records: dict[str, bytes], name: str = "forged.pt") -> Path:
    buffer = io.BytesIO()
    _Forger(buffer, protocol=2).dump(obj)
    return _archive(tmp_path / name, buffer.getvalue(), records)


def _archive(path: Path, pickled: bytes, records: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3")  # torch.load insists on it
        for key, data in records.items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def _tensor(numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> _Call:
    storage = _StorageId(torch.FloatStorage, "0", numel)
    return _Call(torch._utils._rebuild_tensor_v2, storage, offset, size, stride, False, OrderedDict())


def test_a_forger_reads_like_torch(tmp_path: Path) -> None:
    """The forging helpers write what torch reads: the refusals below are of the forged fields only."""
    data = np.arange(6, dtype=np.float32)
    path = _forged(tmp_path, _tensor(6, 1, (2, 2), (3, 1)), {"0": data.tobytes()})
    _same(read_torch_file(path, mapped=True), torch.load(path, weights_only=True))


@pytest.mark.parametrize("mapped", [True, False])
def test_code_in_the_pickle_is_refused_by_name_and_never_run(tmp_path: Path, mapped: bool) -> None:
    canary = tmp_path / "canary"
    obj = {"value": _tensor(1, 0, (1,), (1,)), "payload": _Call(os.system, f"touch {canary}")}
    path = _forged(tmp_path, obj, {"0": bytes(4)})
    with pytest.raises(RefusedGlobal) as refused:
        read_torch_file(path, mapped=mapped)
    assert refused.value.name == f"{os.system.__module__}.system"  # posix.system
    assert refused.value.name in str(refused.value)
    assert not canary.exists()
    with pytest.raises(pickle.UnpicklingError, match="system"):  # what torch itself says
        torch.load(path, weights_only=True)


@pytest.mark.parametrize(
    ("tensor", "record", "problem"),
    [
        (_tensor(10, 0, (10,), (1,)), bytes(32), "holds 32 bytes, 10 float32 need 40"),
        (_tensor(4, 0, (5,), (1,)), bytes(16), "reaches element 4 of a storage of 4"),
        (_tensor(4, 3, (2,), (1,)), bytes(16), "reaches element 4"),
        (_tensor(4, 0, (2, 2), (3, 1)), bytes(16), "reaches element 4"),
        (_tensor(4, 0, (2,), (-1,)), bytes(16), "not a tuple of non-negative integers"),
        (_tensor(4, -1, (2,), (1,)), bytes(16), "malformed"),
        (_tensor(4, 0, (2,), (1, 1)), bytes(16), "malformed"),
        (_tensor(1 << 60, 0, (1,), (1,)), bytes(16), "holds 16 bytes"),
        (_tensor(4, 0, (1 << 40, 1 << 40), (0, 0)), bytes(16), "more than numpy can index"),
    ],
    ids=[
        "short storage",
        "view past the end",
        "offset past the end",
        "stride past the end",
        "negative stride",
        "negative offset",
        "ranks differ",
        "forged numel",
        "forged expand",
    ],
)
def test_views_outside_their_storage_are_refused(
    tmp_path: Path, tensor: _Call, record: bytes, problem: str
) -> None:
    path = _forged(tmp_path, tensor, {"0": record})
    for mapped in (True, False):
        with pytest.raises(TorchFileError, match=problem):
            read_torch_file(path, mapped=mapped)


@pytest.mark.parametrize(
    ("pickled", "problem"),
    [
        (b"\x80\x02X\xff\xff\xff\xff", "forged length"),  # BINUNICODE of 4 GB
        (b"\x80\x02\x8a\xff", "forged length"),  # LONG1 past the end
        (b"\x80\x05\x96" + (1 << 40).to_bytes(8, "little"), "opcode 0x96"),  # BYTEARRAY8: not torch's
        (b"\x80\x02h\x07.", "memo 7"),
        (b"\x80\x02K\x01]a.", "appends to a int"),
        (b"\x80\x02].", None),
        (b"\x80\x02}K\x01b.", "BUILD"),
    ],
)
def test_forged_pickles_fail_cheaply(tmp_path: Path, pickled: bytes, problem: str | None) -> None:
    path = _archive(tmp_path / "p.pt", pickled, {})
    if problem is None:
        assert read_torch_file(path, mapped=True) == []
        return
    with pytest.raises((TorchFileError, NeedsTorch), match=problem):
        read_torch_file(path, mapped=True)


def _good_file() -> bytes:
    buffer = io.BytesIO()
    torch.save(torch.arange(256, dtype=torch.float32), buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: b"", "empty file"),
        (lambda: b"hello, not a tensor", "not a torch file"),
        (lambda: _good_file()[: len(_good_file()) // 2], "damaged zip archive"),
        (lambda: _zip_bytes({"archive/byteorder": b"little"}), "no archive/data.pkl"),
        (lambda: _zip_bytes({"data.pkl": b"\x80\x02]."}), "not in a folder"),
        (
            lambda: _zip_bytes({"archive/data.pkl": b"\x80\x02].", "archive/byteorder": b"middle"}),
            "byte order",
        ),
    ],
    ids=["empty", "garbage", "truncated", "no data.pkl", "no folder", "unknown byte order"],
)
def test_damaged_archives(tmp_path: Path, make: object, problem: str) -> None:
    assert callable(make)
    path = tmp_path / "damaged.pt"
    path.write_bytes(make())
    for mapped in (True, False):
        with pytest.raises(TorchFileError, match=problem):
            read_torch_file(path, mapped=mapped)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "named_like_a_tensor.pth"
    os.mkfifo(fifo)
    with pytest.raises(TorchFileError, match="not a regular file"):
        read_torch_file(fifo, mapped=True)


def _zip_bytes(records: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_storage_record_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    """The directory says the record is larger than the bytes left in the file: never mapped."""
    path = _saved(tmp_path, _random_bits(torch.float32, 1024))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:  # torch names the folder after the file
        name = next(name for name in archive.namelist() if name.endswith("/data/0")).encode()
    entry = data.find(b"PK\x01\x02")  # the central directory's entries: signature, ..., name at 46
    while data[entry + 46 : entry + 46 + len(name)] != name:
        entry = data.find(b"PK\x01\x02", entry + 4)
        assert entry > 0
    for field in (20, 24):  # compressed and uncompressed sizes
        data[entry + field : entry + field + 4] = (1 << 30).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    for mapped in (True, False):
        with pytest.raises(TorchFileError, match="past the end"):
            read_torch_file(path, mapped=mapped)
