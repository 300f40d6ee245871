"""The torch readers' bounds against hostile files, each at its edge: what a real file needs reads,
one step past it is refused with a message saying which bound; nothing is hashed, written out or
inflated past it.

The files are built byte by byte (tests/fuzz/attacks.py); the end-to-end cases, one process each,
are tests/fuzz/test_attacks.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.fuzz import attacks
from tests.mappings import GUARDED, is_mapped
from tui_acc.dumps import mapped
from tui_acc.dumps.fs import SETTLED_SECONDS
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.dumps.torchfile import crc, fallback, unpickler, views
from tui_acc.dumps.torchfile.fallback import FallbackRefused, check_torch_version, walk_pickles
from tui_acc.dumps.torchfile.pickle_bounds import MAX_DEPTH, MAX_KEYS, measure
from tui_acc.dumps.torchfile.reader import read_torch_file
from tui_acc.dumps.torchfile.refusals import TorchFileError, brief

REPO = Path(__file__).resolve().parents[2]


def _file(tmp_path: Path, pickled: bytes, storages: dict[str, bytes] | None = None) -> Path:
    path = tmp_path / "hostile.pt"
    path.write_bytes(attacks.zip_of(attacks.torch_records(pickled, storages or {})))
    return path


def _read(path: Path) -> object:
    return read_torch_file(path, mapped=False)


# --- depth ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrap", "around"),
    [(attacks.as_dict_key, 1), (attacks.as_set_member, 1), (attacks.pickle_of, 0)],
    ids=["key", "set", "value"],
)
def test_tuples_nest_at_most_max_depth(tmp_path: Path, wrap, around: int) -> None:  # type: ignore[no-untyped-def]
    """deep_tuple(n) is n + 1 tuples deep (the empty one too), inside ``around`` containers."""
    _read(_file(tmp_path, wrap(attacks.deep_tuple(MAX_DEPTH - 1 - around))))
    with pytest.raises(TorchFileError, match=f"nests tuples more than {MAX_DEPTH} deep"):
        _read(_file(tmp_path, wrap(attacks.deep_tuple(200_000))))


def test_lists_and_dicts_nest_at_most_max_depth(tmp_path: Path) -> None:
    """Lists are never hashed while unpickling: the object is measured once it is built, without
    recursion (a 200,000-deep list is refused, not handed on to whatever would walk it)."""
    loaded = _read(_file(tmp_path, attacks.pickle_of(attacks.deep_list(MAX_DEPTH - 1))))
    assert isinstance(loaded, list)
    for depth in (MAX_DEPTH, 200_000):
        with pytest.raises(TorchFileError, match=f"nests containers more than {MAX_DEPTH} deep"):
            _read(_file(tmp_path, attacks.pickle_of(attacks.deep_list(depth))))
    nested = attacks.PROTO + attacks.EMPTY_DICT + _nested_dicts(MAX_DEPTH + 1) + attacks.STOP
    with pytest.raises(TorchFileError, match="more than 100 deep"):
        _read(_file(tmp_path, nested))


def _nested_dicts(depth: int) -> bytes:
    """{"k": {"k": ... {}}} inside the dict below it on the stack: SETITEM on the way back up."""
    out = b""
    for _ in range(depth):
        out += attacks.text("k") + attacks.EMPTY_DICT
    return out + attacks.SETITEM * depth


# --- work ----------------------------------------------------------------------------------------


def test_a_tuple_dag_is_measured_not_walked(tmp_path: Path) -> None:
    """t(k+1) = (tk, tk): hashing t60 walks 2^61 tuples. Hashed small, it reads; hashed past the
    work bound, it is refused before Python's hash is called."""
    assert _read(_file(tmp_path, attacks.as_dict_key(attacks.tuple_dag(10)))) == {_dag(10): 1}
    for levels in (22, 60):  # 2^23 tuples written out: past MAX_WORK
        with pytest.raises(TorchFileError, match="hashes more than 4,194,304 elements"):
            _read(_file(tmp_path, attacks.as_dict_key(attacks.tuple_dag(levels))))
    with pytest.raises(TorchFileError, match="hashes more than 4,194,304 elements"):
        _read(_file(tmp_path, attacks.as_set_member(attacks.tuple_dag(60))))


def _dag(levels: int) -> tuple[object, ...]:
    value: tuple[object, ...] = ()
    for _ in range(levels):
        value = (value, value)
    return value


def test_keys_hashed_again_and_again_count_each_time(tmp_path: Path) -> None:
    """A small key, hashed many times through the memo (set([k, k, k, ...])): every hash counts."""
    key = attacks.tuple_dag(12) + attacks.put(200)  # 8,191 tuples written out
    members = attacks.MARK + attacks.get(200) * 600 + attacks.APPENDS  # ~4.9M elements hashed
    pickled = attacks.PROTO + attacks.named("__builtin__", "set") + attacks.EMPTY_LIST + key
    pickled += attacks.APPEND + members + attacks.TUPLE1 + attacks.REDUCE + attacks.STOP
    with pytest.raises(TorchFileError, match="hashes more than 4,194,304 elements"):
        _read(_file(tmp_path, pickled))


def test_a_dict_or_set_holds_at_most_max_keys(tmp_path: Path) -> None:
    """Keys sharing a hash (ints a multiple of 2^61 - 1 apart) make each insert probe all before it:
    a dict or set is refused past MAX_KEYS keys, before they are inserted."""
    loaded = _read(_file(tmp_path, attacks.colliding_keys(MAX_KEYS)))
    assert isinstance(loaded, dict) and len(loaded) == MAX_KEYS
    with pytest.raises(TorchFileError, match="more than 16,384 keys in one dict or set"):
        _read(_file(tmp_path, attacks.colliding_keys(MAX_KEYS + 1)))
    members = attacks.MARK + attacks.integer(1) * (MAX_KEYS + 1) + attacks.TUPLE
    as_set = attacks.PROTO + attacks.named("__builtin__", "set") + members + attacks.TUPLE1 + attacks.REDUCE
    with pytest.raises(TorchFileError, match="more than 16,384 keys"):
        _read(_file(tmp_path, as_set + attacks.STOP))


def test_the_object_written_out_is_bounded(tmp_path: Path) -> None:
    """Lists are not hashed, but whatever writes the object out (repr, json, a recursive walk) would
    visit 2^60 of them: refused once the object is built, each list measured once."""
    value = attacks.list_dag(60)
    with pytest.raises(TorchFileError, match="memo references are written out"):
        _read(_file(tmp_path, attacks.beside_a_tensor(value, (2,)), {"0": bytes(8)}))
    loaded = _read(_file(tmp_path, attacks.beside_a_tensor(attacks.list_dag(10), (2,)), {"0": bytes(8)}))
    assert isinstance(loaded, dict) and len(loaded["meta"]) == 11


def test_a_container_holding_itself_is_refused() -> None:
    cycle: list[object] = []
    cycle.append([cycle])
    with pytest.raises(TorchFileError, match="contains itself"):
        measure({"meta": cycle})
    shared = [1, 2]
    measure({"a": shared, "b": [shared, shared]})  # a DAG is not a cycle


def test_a_pickle_runs_at_most_max_pickle_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each opcode is a byte at least: bounding the bytes bounds the opcodes run (made small here:
    4 MiB of pushes take seconds of our interpreter)."""
    monkeypatch.setattr(unpickler, "MAX_PICKLE_BYTES", 1000)
    for appends, refused in ((332, False), (333, True)):  # PROTO 2, EMPTY_LIST 1, 3 an append, STOP 1
        pickled = attacks.PROTO + attacks.EMPTY_LIST + (attacks.integer(1) + attacks.APPEND) * appends
        if refused:
            with pytest.raises(TorchFileError, match="runs past 1,000 bytes: more than a tensor file's"):
                _read(_file(tmp_path, pickled + attacks.STOP))
        else:
            assert _read(_file(tmp_path, pickled + attacks.STOP)) == [1] * appends


def test_messages_show_pickled_values_briefly(tmp_path: Path) -> None:
    """A malformed call's argument in the message: a few levels and items, never its repr (a tuple
    DAG's repr is 2^50 tuples long)."""
    dag = attacks.tuple_dag(19)  # within the work bound: built, never hashed
    pickled = attacks.PROTO + attacks.named("torch", "Size") + dag + attacks.TUPLE1 + attacks.REDUCE
    with pytest.raises(TorchFileError, match=r"torch.Size of \(\(\(\(") as refused:
        _read(_file(tmp_path, pickled + attacks.STOP))
    assert len(str(refused.value)) < 300
    assert brief(_dag(50)).count("(") < 40


# --- views ---------------------------------------------------------------------------------------


def test_a_broadcast_view_may_repeat_its_storage_up_to_the_bound(tmp_path: Path) -> None:
    """A mask expanded over a batch reads (torch keeps expand's stride-0 view in the file); a view
    claiming more than MAX_REPEAT times its storage, and more than REPEAT_FLOOR elements, does not."""
    mask = torch.arange(64, dtype=torch.float32).reshape(1, 8, 8)
    expanded = mask.expand(32, 8, 8)
    path = tmp_path / "mask.pt"
    torch.save(expanded, path)
    assert np.array_equal(_read(path), expanded.numpy())
    scalar = torch.tensor([2.0]).expand(views.REPEAT_FLOOR)  # a scalar broadcast: the floor
    torch.save(scalar, path)
    assert _read(path).shape == (views.REPEAT_FLOOR,)
    storage = views.REPEAT_FLOOR // views.MAX_REPEAT  # MAX_REPEAT times it: the floor
    for rows, refused in ((views.MAX_REPEAT, False), (2 * views.MAX_REPEAT, True)):
        view = attacks.float_tensor(storage, 0, (rows, storage), (0, 1))  # each row the whole storage
        path = _file(tmp_path, attacks.pickle_of(view), {"0": bytes(4 * storage)})
        if refused:
            with pytest.raises(TorchFileError, match="more than 1024 times what the storage holds"):
                _read(path)
        else:
            assert _read(path).shape == (rows, storage)
    forged = attacks.pickle_of(attacks.float_tensor(128, 0, (1 << 40,), (0,)))
    with pytest.raises(TorchFileError, match="1,099,511,627,776 elements over a storage of 128"):
        _read(_file(tmp_path, forged, {"0": bytes(512)}))


# --- zip records ---------------------------------------------------------------------------------


def test_an_archive_naming_a_record_twice_is_refused(tmp_path: Path) -> None:
    pickled = attacks.pickle_of(attacks.float_tensor(1, 0, (1,), (1,)))
    records = attacks.torch_records(pickled, {"0": struct.pack("<f", 1.0)})
    path = tmp_path / "twice.pt"
    path.write_bytes(attacks.zip_of([*records, attacks.stored("archive/data/0", struct.pack("<f", -1000.0))]))
    assert torch.load(path, weights_only=True).tolist() == [1.0]  # torch reads the first copy
    for is_mapped_read in (True, False):
        with pytest.raises(TorchFileError, match="holds archive/data/0 twice"):
            read_torch_file(path, mapped=is_mapped_read)


def test_a_directory_entry_pointing_at_another_records_header_is_refused(tmp_path: Path) -> None:
    """data/0's directory entry names data.pkl's local header: read from there, the pickle's bytes
    would be the tensor's values. zipfile refuses it too."""
    pickled = attacks.pickle_of(attacks.float_tensor(1, 0, (1,), (1,)))
    records = attacks.torch_records(pickled, {"0": struct.pack("<f", 1.0)})
    path = tmp_path / "pointed.pt"
    path.write_bytes(attacks.zip_of(records, pointed={"archive/data/0": "archive/data.pkl"}))
    with zipfile.ZipFile(path) as archive, pytest.raises(zipfile.BadZipFile, match="differ"):
        archive.read("archive/data/0")
    for is_mapped_read in (True, False):
        with pytest.raises(TorchFileError, match="data/0: the directory points at another record's header"):
            read_torch_file(path, mapped=is_mapped_read)


@pytest.mark.parametrize("size", [4, 2 << 20], ids=["read", "mapped"])
def test_a_stored_storage_whose_bytes_miss_their_crc_is_named(tmp_path: Path, size: int) -> None:
    """One flipped bit in a copy: the CRC-32 the directory lists no longer matches. A storage of
    2 MiB is mapped where the file has settled, one of 4 bytes read: both are checked."""
    values = np.ones(size // 4, dtype=np.float32).tobytes()
    flipped = bytes([values[0] ^ 0x40]) + values[1:]
    pickled = attacks.pickle_of(attacks.float_tensor(size // 4, 0, (size // 4,), (1,)))
    records = attacks.torch_records(pickled, {})
    path = tmp_path / "flipped.pt"
    good = attacks.stored("archive/data/0", values)
    path.write_bytes(attacks.zip_of([*records, good]))
    good_copy = read_torch_file(path, mapped=True)
    assert isinstance(good_copy, np.ndarray) and float(good_copy[0]) == 1.0  # the good copy reads
    assert is_mapped(good_copy) == (GUARDED and size >= 1 << 20)  # the "mapped" case maps, where it can
    path.write_bytes(attacks.zip_of([*records, attacks.Record(good.name, flipped, size, good.crc)]))
    for is_mapped_read in (True, False):
        with pytest.raises(TorchFileError, match="data/0: its bytes do not match the CRC-32"):
            read_torch_file(path, mapped=is_mapped_read)
    with pytest.raises(TensorLoadError, match="CRC-32"):  # what a report says of it
        load_tensor(path, ANYWHERE)
    assert torch.load(path, weights_only=True)[0].item() != 1.0  # torch.load reads the flipped value


def test_a_settled_records_crc_is_checked_once_and_again_once_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay reads again what the comparison read: a settled file's record is checked once. The file
    rewritten in place (the same size, one bit flipped, its modification time set back to the very
    same) is another file to the check by its status-change time, which names the flipped bit. A file
    whose times are recent, or whose modification time alone was set back (``cp -p``), is checked at
    every read."""
    calls: list[int] = []
    real = crc._crc32

    def counted(data: memoryview) -> int:  # the storage's checks (the pickle is a record of its own)
        if len(data) > 4096:
            calls.append(len(data))
        return real(data)

    monkeypatch.setattr(crc, "_crc32", counted)
    # a status-change time cannot be set back: here every file counts as settled
    monkeypatch.setattr(crc, "SETTLED_SECONDS", -3600.0)
    values = np.arange(1 << 18, dtype=np.float32).tobytes()  # 1 MiB: mapped where mapping is guarded
    pickled = attacks.pickle_of(attacks.float_tensor(1 << 18, 0, (1 << 18,), (1,)))
    records = attacks.torch_records(pickled, {})
    good = attacks.stored("archive/data/0", values)
    path = tmp_path / "weight.pt"
    path.write_bytes(attacks.zip_of([*records, good]))
    first = path.stat()
    for is_mapped_read in (True, False, True):
        assert float(np.asarray(read_torch_file(path, mapped=is_mapped_read))[5]) == 5.0
    assert calls == [len(values)]
    flipped = values[:20] + bytes([values[20] ^ 0x40]) + values[21:]
    path.write_bytes(attacks.zip_of([*records, attacks.Record(good.name, flipped, len(values), good.crc)]))
    os.utime(path, ns=(first.st_atime_ns, first.st_mtime_ns))
    while path.stat().st_ctime_ns == first.st_ctime_ns:  # the clock's tick has not turned yet
        os.utime(path, ns=(first.st_atime_ns, first.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (first.st_size, first.st_mtime_ns)
    with pytest.raises(TorchFileError, match="its bytes do not match the CRC-32"):
        read_torch_file(path, mapped=True)
    monkeypatch.setattr(crc, "SETTLED_SECONDS", SETTLED_SECONDS)
    copied = tmp_path / "copied.pt"
    copied.write_bytes(attacks.zip_of([*records, good]))
    long_ago = time.time() - 3600
    os.utime(copied, (long_ago, long_ago))  # as cp -p leaves a copy made just now
    calls.clear()
    for _ in range(2):
        read_torch_file(copied, mapped=False)
    assert calls == [len(values), len(values)]


def test_a_crc_zeroed_in_the_directory_alone_is_still_checked(tmp_path: Path) -> None:
    """torch.save's own file, one bit of its storage flipped and the central directory's CRC-32 set to
    0 (what torch writes when told not to compute them): the local header, or the data descriptor
    after the data, still lists the real one, and it is checked."""
    path = tmp_path / "zeroed.pt"
    torch.save(torch.arange(1024, dtype=torch.float32), path)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        (info,) = [i for i in archive.infolist() if i.filename.endswith("/data/0")]
    name_length, extra_length = struct.unpack_from("<2H", raw, info.header_offset + 26)
    raw[info.header_offset + 30 + name_length + extra_length + 5] ^= 0x40  # a bit of element 1
    entry = raw.index(b"PK\x01\x02" + raw[info.header_offset + 4 : info.header_offset + 6])
    while raw[entry + 46 : entry + 46 + len(info.filename)] != info.filename.encode():
        entry = raw.index(b"PK\x01\x02", entry + 4)
    raw[entry + 16 : entry + 20] = bytes(4)  # the directory's CRC-32 field
    path.write_bytes(bytes(raw))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo(info.filename).CRC == 0
    assert torch.load(path, weights_only=True)[1].item() != 1.0  # torch.load reads the flipped value
    for is_mapped_read in (True, False):
        with pytest.raises(TorchFileError, match="its bytes do not match the CRC-32"):
            read_torch_file(path, mapped=is_mapped_read)


def test_a_storage_saved_without_a_crc_is_read(tmp_path: Path) -> None:
    """torch.serialization.set_crc32_options(False) writes 0 for every record: nothing to check."""
    values = struct.pack("<f", 2.0)
    pickled = attacks.pickle_of(attacks.float_tensor(1, 0, (1,), (1,)))
    records = [*attacks.torch_records(pickled, {}), attacks.Record("archive/data/0", values, 4, 0)]
    path = tmp_path / "nocrc.pt"
    path.write_bytes(attacks.zip_of(records))
    assert np.asarray(read_torch_file(path, mapped=False)).tolist() == [2.0]


def test_a_large_data_pkl_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "bomb.pt"
    bomb = attacks.deflated_zeros("archive/data.pkl", 128 << 20)
    path.write_bytes(attacks.zip_of([bomb, attacks.stored("archive/byteorder", b"little")]))
    tracemalloc.start()
    try:
        with pytest.raises(TorchFileError, match="134,217,728 bytes: more than a tensor file's pickle"):
            _read(path)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 4 << 20


def test_a_deflated_storage_is_inflated_as_far_as_its_views_reach(tmp_path: Path) -> None:
    """64 MiB of zeros deflated to 64 KB, under a 16-element view: 64 bytes kept, inflated straight
    into the array (the rest inflated a chunk at a time for the CRC, and dropped); a second view
    reaching further keeps that much; a record declaring less than it holds stops at what it
    declares (its CRC then fails)."""
    storage = attacks.deflated_zeros("archive/data/0", 64 << 20)
    view = attacks.pickle_of(attacks.float_tensor(16 << 20, 0, (16,), (1,)))
    path = tmp_path / "inflated.pt"
    path.write_bytes(attacks.zip_of([*attacks.torch_records(view, {}), storage]))
    tracemalloc.start()
    try:
        values = _read(path)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert isinstance(values, np.ndarray) and values.shape == (16,) and not values.any()
    assert peak < 4 << 20
    two = attacks.MARK + attacks.float_tensor(16 << 20, 0, (4,), (1,))
    two += attacks.float_tensor(16 << 20, (4 << 20) - 4, (4,), (1,)) + attacks.TUPLE
    path.write_bytes(attacks.zip_of([*attacks.torch_records(attacks.pickle_of(two), {}), storage]))
    first, last = _read(path)  # type: ignore[misc]
    assert first.shape == last.shape == (4,)
    short = attacks.Record(storage.name, storage.data, 1 << 20, storage.crc, 8)  # declares 1 MiB
    view = attacks.pickle_of(attacks.float_tensor(1 << 18, 0, (1 << 18,), (1,)))
    path.write_bytes(attacks.zip_of([*attacks.torch_records(view, {}), short]))
    with pytest.raises(TorchFileError, match="Bad CRC-32"):
        _read(path)


def test_a_small_view_of_a_deflated_storage_still_checks_its_crc(tmp_path: Path) -> None:
    """A deflated storage whose bytes differ from the CRC-32 listed for them (a bit flipped inside
    the part a 4-element view reads): refused, as a stored one is, though the view needs only its
    first 16 bytes; the same record with its own CRC reads."""
    values = np.arange(1 << 16, dtype="<f4")
    flipped = bytearray(values.tobytes())
    flipped[5] ^= 0x10
    honest = attacks.deflated("archive/data/0", values.tobytes())
    forged = dataclasses.replace(honest, data=attacks.deflated(honest.name, bytes(flipped)).data)
    view = attacks.pickle_of(attacks.float_tensor(1 << 16, 0, (4,), (1,)))
    path = tmp_path / "flipped.pt"
    path.write_bytes(attacks.zip_of([*attacks.torch_records(view, {}), honest]))
    assert np.asarray(_read(path)).tolist() == [0.0, 1.0, 2.0, 3.0]
    path.write_bytes(attacks.zip_of([*attacks.torch_records(view, {}), forged]))
    with pytest.raises(TorchFileError, match="Bad CRC-32"):
        _read(path)


# --- the torch fallback --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "safe"),
    [("2.13.0+cpu", True), ("2.10.0a0+git12", True), ("3.0.0", True), ("2.9.1", False), ("2.5.1+cpu", False)],
)
def test_the_fallback_needs_torch_2_10(version: str, safe: bool) -> None:
    if safe:
        check_torch_version(version)
        return
    expected = rf"torch {re.escape(version)} \(installed\).*install torch 2\.10 or later"
    with pytest.raises(FallbackRefused, match=expected):
        check_torch_version(version)


def test_an_old_torch_is_named_where_the_fallback_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.pth"
    torch.save(torch.ones(2), path, _use_new_zipfile_serialization=False)
    assert load_tensor(path, ANYWHERE).tolist() == [1.0, 1.0]
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    expected = r"old\.pth: reading torch's legacy \(non-zip\) format needs torch's own loader"
    with pytest.raises(TensorLoadError, match=expected):
        load_tensor(path, ANYWHERE)


def test_what_torch_is_handed_is_walked_first(tmp_path: Path) -> None:
    """The legacy format's five pickles, and a zip's data.pkl naming a global only torch knows: within
    the bounds they reach torch; past them, they are refused before torch.load is called."""
    legacy = tmp_path / "legacy.pth"
    torch.save({"x": torch.ones(2), "meta": {"k": (1, 2)}}, legacy, _use_new_zipfile_serialization=False)
    walk_pickles(legacy)
    legacy.write_bytes(attacks.legacy(attacks.as_dict_key(attacks.deep_tuple(200_000))))
    with pytest.raises(TorchFileError, match="nests tuples"):
        walk_pickles(legacy)
    unknown = attacks.PROTO + attacks.EMPTY_DICT + attacks.text("k") + attacks.named("torch", "SomethingNew")
    unknown += attacks.SETITEM + attacks.tuple_dag(40) + attacks.integer(1) + attacks.SETITEM + attacks.STOP
    with pytest.raises(TensorLoadError, match="hashes more than 4,194,304 elements"):
        load_tensor(_file(tmp_path, unknown), ANYWHERE)
    tar = tmp_path / "tar.pth"
    tar.write_bytes(bytes(257) + b"ustar" + bytes(250))
    with pytest.raises(TorchFileError, match="tar"):
        fallback.walk_pickles(tar)


# --- mapped files cut short ----------------------------------------------------------------------


_TRUNCATE = """
import os, sys
import numpy as np
from tui_acc.dumps.mapped import map_bytes
from tui_acc.dumps.mapped import _mapguard
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
first = map_bytes(fd, 0, 4096)  # the guard is installed either way
values = {reader}
os.close(fd)
assert values[:4].tolist() == [1, 1, 1, 1]
os.truncate(path, 3 * 4096)
total = int(values.sum())  # every page past the new end: SIGBUS, unless guarded
print(total, _mapguard.absorbed())
"""


@pytest.mark.skipif(not GUARDED, reason="the SIGBUS guard (a C extension) is not built")
@pytest.mark.parametrize("guarded", [True, False])
def test_a_mapped_file_cut_short_reads_zeros_past_its_end(tmp_path: Path, guarded: bool) -> None:
    """In a process of its own: a guarded mapping reads zeros past the new end and lives on; an
    unguarded one (numpy's memmap) still dies of SIGBUS: the guard takes only its own faults."""
    path = tmp_path / "cut.bin"
    path.write_bytes(bytes([1]) * (1 << 20))
    start = 4096 + 100
    unguarded = f"np.memmap(path, mode='c', offset={start}, shape=(1 << 19,))"
    script = _TRUNCATE.format(reader=f"map_bytes(fd, {start}, 1 << 19)" if guarded else unguarded)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", script, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    if guarded:
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [str(3 * 4096 - start), "1"]
    else:
        assert done.returncode == -7  # SIGBUS


def test_without_the_guard_settled_files_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped, "_guard", lambda: None)
    tensor = torch.arange(1 << 19, dtype=torch.float32)
    path = tmp_path / "big.pt"
    torch.save(tensor, path)
    values = read_torch_file(path, mapped=True)
    assert isinstance(values, np.ndarray) and not is_mapped(values)
    assert np.array_equal(values, tensor.numpy())


def test_settled_npy_files_are_mapped(tmp_path: Path) -> None:
    values = np.asfortranarray(np.arange(1 << 18, dtype=np.float32).reshape(512, 512))
    path = tmp_path / "x.npy"
    np.save(path, values)
    os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    loaded = load_tensor(path, ANYWHERE)
    assert is_mapped(loaded) is GUARDED
    assert np.array_equal(loaded, values) and loaded.flags.f_contiguous
