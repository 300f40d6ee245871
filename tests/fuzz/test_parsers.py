"""Fuzzing the parsers of untrusted files: a .bin header, topology JSON, dump.json, mapping files,
model_tree.json, torch's zip files (read without torch), their pickles nested deep and shared through
the memo. Whatever the bytes, each either reads or fails with its own error naming the file; nothing
else escapes (no crash, no hang, no IndexError from deep inside), and a torch file never costs more
memory than its few KB warrant.

CI runs a fixed budget (``TUI_ACC_FUZZ_EXAMPLES``, default 60 per parser);
``python scripts/fuzz.py`` runs a longer campaign.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import tempfile
import tracemalloc
import zipfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import attacks
from tui_acc.config import ConfigError, load_config
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.policy import ANYWHERE, LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.pairing import MappingError, load_mapping, load_msprobe_mapping

BUDGET = settings(
    max_examples=int(os.environ.get("TUI_ACC_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=os.environ.get("TUI_ACC_FUZZ_SEED") is None,  # CI: the same cases every run
)

# JSON-like text: real JSON of random shape, JSON with NaN/Infinity, and plain garbage
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
json_texts = st.one_of(
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=300),
    st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
)


@pytest.fixture(scope="module")
def scratch() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="tui-acc-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# --- .bin ---------------------------------------------------------------------------------------

header_lines = st.lists(
    st.one_of(
        st.sampled_from(["$Version=1.0", "$Object.Count=1", "$End=1", "format=2", "dtype=1", "dtype=27"]),
        st.builds(
            lambda k, v: f"{k}={v}",
            st.sampled_from(["dtype", "format", "dims", "$Object.Length", "$Object.data", "data", "max"]),
            st.text(alphabet="0123456789,-x. /", max_size=12),
        ),
        st.text(max_size=20),
    ),
    max_size=10,
)


@BUDGET
@given(lines=header_lines, payload=st.binary(max_size=256))
def test_bin_files(scratch: Path, lines: list[str], payload: bytes) -> None:
    path = scratch / "bin" / "outtensor0.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("\n".join(lines).encode("utf-8", "replace") + b"\n" + payload)
    try:
        tensor = load_tensor(path, LoadPolicy.inside(scratch))
    except TensorLoadError as exc:
        assert str(path) in str(exc)
    else:
        assert tensor.size >= 0


@BUDGET
@given(data=st.binary(max_size=512))
def test_bin_files_of_random_bytes(scratch: Path, data: bytes) -> None:
    path = scratch / "raw" / "intensor0.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    try:
        load_tensor(path, LoadPolicy.inside(scratch))
    except TensorLoadError as exc:
        assert str(path) in str(exc)


# --- ATB topology, msit model_tree.json, msprobe dump.json --------------------------------------


def _atb_dump(root: Path, topology: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    node = root / "tensors" / "0_1" / "0" / "0_LinearOperation" / "after"
    node.mkdir(parents=True)
    (node / "outtensor0.bin").write_bytes(b"format=2\ndtype=0\ndims=1\n$End=1\n\x00\x00\x80\x3f")
    (root / "model" / "1").mkdir(parents=True)
    (root / "model" / "1" / "model.json").write_text(topology, encoding="utf-8", errors="replace")


@BUDGET
@given(text=json_texts)
def test_atb_topology(scratch: Path, text: str) -> None:
    root = scratch / "atb"
    _atb_dump(root, text)
    index = open_dump(root)  # a bad topology is a problem of that file; the folders still read
    assert list(index.tokens) == [0]
    assert all(p.path.endswith("model.json") for p in index.problems)


def _probe_dump(root: Path, text: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    node = root / "atb_dump_data" / "data" / "0_1" / "0" / "0_LinearOperation"
    (node / "after").mkdir(parents=True)
    (node / "after" / "outtensor0.bin").write_bytes(b"format=2\ndtype=0\ndims=1\n$End=1\n\x00\x00\x80\x3f")
    (node / "op_param.json").write_text(text, encoding="utf-8", errors="replace")
    for kind, name in (("model", "Model_Prefill.json"), ("layer", "LinearOperation_0.json")):
        folder = root / "atb_dump_data" / "info" / kind / "0_1"
        folder.mkdir(parents=True)
        (folder / name).write_text(text, encoding="utf-8", errors="replace")


@BUDGET
@given(text=json_texts)
def test_atb_probe_topology_and_parameters(scratch: Path, text: str) -> None:
    root = scratch / "probe"
    _probe_dump(root, text)
    index = open_dump(root)  # msprobe's ATB probe: info/*.json and op_param.json are problems at worst
    assert index.tokens[0]["0_LinearOperation"]
    assert all(p.path.endswith(".json") for p in index.problems)


@BUDGET
@given(text=json_texts)
def test_msit_model_tree(scratch: Path, text: str) -> None:
    import torch

    root = scratch / "msit" / "msit_dump_20250101_000000" / "torch_tensors" / "cpu_1"
    shutil.rmtree(scratch / "msit", ignore_errors=True)
    (root / "0" / "root.lm_head").mkdir(parents=True)
    torch.save(torch.ones(2), root / "0" / "root.lm_head" / "output.pth")
    (root / "model_tree.json").write_text(text, encoding="utf-8", errors="replace")
    index = open_dump(scratch / "msit")
    assert "root.lm_head" in index.tokens[0]


@BUDGET
@given(text=json_texts)
def test_msprobe_dump_json(scratch: Path, text: str) -> None:
    root = scratch / "msprobe"
    shutil.rmtree(root, ignore_errors=True)
    (root / "step0" / "proc1").mkdir(parents=True)
    dump_json = root / "step0" / "proc1" / "dump.json"
    dump_json.write_text(text, encoding="utf-8", errors="replace")
    try:
        index = open_dump(root)
    except DumpError as exc:
        assert str(root) in str(exc)
    else:
        for token in index.tokens:
            index.tokens[token]  # listing a token must not fail either


_record_names = st.one_of(
    st.builds("Module.m{}.L.forward.{}".format, st.integers(0, 3), st.integers(0, 3)),
    st.builds("Functional.{}.{}.forward".format, st.sampled_from(["embedding", "linear"]), st.integers(0, 5)),
    st.builds("Tensor.__add__.{}.forward".format, st.integers(0, 5)),
)
_outputs = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("torch.Tensor"), "shape": st.lists(st.integers(0, 300), max_size=3)}
    ),
    max_size=2,
)


@BUDGET
@given(
    records=st.lists(st.tuples(_record_names, _outputs, _outputs), max_size=12, unique_by=lambda r: r[0]),
    parents=st.dictionaries(_record_names, st.one_of(st.none(), _record_names), max_size=12),
    level=st.sampled_from(["L0", "L1", "mix", "L2", ""]),
)
def test_msprobe_call_streams(
    scratch: Path, records: list[tuple[str, list, list]], parents: dict, level: str
) -> None:
    """Any stream of records and any construct.json (cycles, API parents, strangers) is read:
    every record lands in exactly one token or between them, and nothing hangs."""
    rank = scratch / "stream" / "step0" / "proc1"
    shutil.rmtree(scratch / "stream", ignore_errors=True)
    rank.mkdir(parents=True)
    data = {name: {"input_args": inputs, "output": outputs} for name, inputs, outputs in records}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": level, "data": data}))
    (rank / "construct.json").write_text(json.dumps(parents))
    index = open_dump(scratch / "stream")
    placed = [name for nodes in index.tokens.values() for name in nodes if name in data]
    assert sorted(placed + index.between_tokens) == sorted(data)
    assert all(str(rank) in p.path for p in index.problems)


# --- mapping files and tui-acc.toml -------------------------------------------------------------

toml_texts = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.sampled_from(
            [
                "[nodes]",
                "[types]",
                "[tensors]",
                '"a" = "b"',
                "x = 1",
                "[thresholds.ops]",
                'cosine = "x"',
                "cosine = 0.5",
                "[[rules]]",
                'pattern = "*"',
                "[redump.test]",
                'dumper = "msit"',
                "exec = 1",
                'shell = "yes"',
                'command = ["a", 1]',
                "[redump]",
                "out_dir = 3",
                "nan = nan",
                "inf = -inf",
            ]
        ),
        max_size=8,
    ).map("\n".join),
)


@BUDGET
@given(text=st.one_of(json_texts, toml_texts), suffix=st.sampled_from([".json", ".toml"]))
def test_mapping_files(scratch: Path, text: str, suffix: str) -> None:
    path = scratch / f"mapping{suffix}"
    path.write_text(text, encoding="utf-8", errors="replace")
    try:
        load_mapping(path)
    except MappingError as exc:
        assert str(path) in str(exc)


# msprobe's -dm / -lm YAML: JSON is YAML too, plus mapping-shaped YAML and YAML's own syntax
yaml_texts = st.one_of(
    json_texts,
    st.dictionaries(
        st.text(max_size=12),
        st.one_of(st.text(max_size=12), st.dictionaries(st.text(max_size=8), json_values, max_size=3)),
        max_size=4,
    ).map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    st.lists(
        st.sampled_from(
            ["Cell:", "  a.b: c(d)", "  0: 1", "x: N/A", "- y", "&a [*a]", "!!python/object:os.system", "? z"]
        ),
        max_size=6,
    ).map("\n".join),
)


@BUDGET
@given(text=yaml_texts, which=st.sampled_from(["data_mapping", "layer_mapping"]))
def test_msprobe_mapping_files(scratch: Path, text: str, which: str) -> None:
    path = scratch / f"{which}.yaml"
    path.write_text(text, encoding="utf-8", errors="replace")
    try:
        load_msprobe_mapping(**{which: path})
    except MappingError as exc:
        assert str(path) in str(exc)


@BUDGET
@given(text=toml_texts)
def test_config_files(scratch: Path, text: str) -> None:
    from tui_acc.redump import load_settings
    from tui_acc.redump.settings import SettingsError

    path = scratch / "tui-acc.toml"
    path.write_text(text, encoding="utf-8", errors="replace")
    try:
        config = load_config(path)
        load_settings(config.sections.get("redump"), str(path))
    except (ConfigError, SettingsError) as exc:
        assert str(path) in str(exc)


# --- SGLang's dumper ----------------------------------------------------------------------------

_sglang_names = st.one_of(
    st.builds(
        "step={}___rank={}___dump_index={}___name={}___recompute_status={}{}.pt".format,
        st.integers(0, 3),
        st.integers(0, 2),
        st.integers(1, 40),
        st.one_of(
            st.sampled_from(
                ["input_ids", "non_intrusive__model.layers.0.mlp.output", "non_intrusive__output"]
            ),
            st.text(alphabet="abc_.=#0", min_size=1, max_size=12),
        ),
        st.sampled_from(["disabled", "original", ""]),
        st.sampled_from(["", "___layer_id=0", "___layer_id=x", "___tp_rank=1___pp_rank=0", "___junk"]),
    ),
    st.text(alphabet="step=_rank0123.pt", max_size=40).map(lambda t: "step=" + t + ".pt"),
)


@BUDGET
@given(names=st.lists(_sglang_names, min_size=1, max_size=8, unique=True), dims=st.text(max_size=30))
def test_sglang_dumper_folders(scratch: Path, names: list[str], dims: str) -> None:
    import torch

    from tui_acc.dumps.sglang.dump import merge_of_dims

    root = scratch / "sglang"
    shutil.rmtree(root, ignore_errors=True)
    (root / "exp").mkdir(parents=True)
    for number, name in enumerate(names):
        if "/" in name or name in (".", ".."):
            continue
        value = {"value": torch.ones(2), "meta": {"dims": dims}} if number % 2 else {"meta": {"dims": dims}}
        torch.save(value, root / "exp" / name)
    merge, problem = merge_of_dims(dims)
    assert isinstance(merge, str) and isinstance(problem, str)
    try:
        index = open_dump(root)
    except DumpError as exc:
        assert str(root) in str(exc)
    else:
        for refs in (r for nodes in index.tokens.values() for r in nodes.values()):
            for ref in refs:
                try:
                    load_tensor(ref.path, ANYWHERE)
                except TensorLoadError as exc:
                    assert str(ref.path) in str(exc)


# --- torch's zip files, read without torch ------------------------------------------------------


@functools.cache
def _torch_sample() -> tuple[bytes, bytes, dict[str, bytes]]:
    """A small real torch.save file (views, shared storages, a parameter, SGLang's meta), its data.pkl
    and its storage records: small, so that mutations land in the pickle and the directory too."""
    import torch

    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    sample = {
        "value": base.to(torch.bfloat16)[1:, ::2],
        "meta": {"dtype": torch.bfloat16, "shape": torch.Size([2, 2]), "device": torch.device("cpu")},
        "shared": [base, base.t(), base[2].expand(3, 4)],
        "weight": torch.nn.Parameter(torch.ones(2, dtype=torch.float8_e4m3fn), requires_grad=False),
        "flags": torch.tensor([True, False]),
    }
    buffer = io.BytesIO()
    torch.save(sample, buffer)
    with zipfile.ZipFile(buffer) as archive:
        pickled = archive.read("archive/data.pkl")
        records = {name: archive.read(name) for name in archive.namelist() if "/data/" in name}
    return buffer.getvalue(), pickled, records


def _read_torch_file_safely(path: Path) -> None:
    """Whatever the bytes: an object whose arrays can all be touched, or one of the reader's errors;
    and never an allocation sized by a forged count (the file is a few KB: a few MB is plenty)."""
    from tui_acc.dumps.torchfile import reader
    from tui_acc.dumps.torchfile.reader import NeedsTorch, RefusedGlobal, TorchFileError, read_torch_file

    for mapped in (True, False):
        tracemalloc.start()  # numpy reports its buffers to tracemalloc too
        try:
            with mock.patch.object(reader, "_MAPPED_FROM", 0):  # mapped: the sample's small storages too
                loaded = read_torch_file(path, mapped=mapped)
        except (NeedsTorch, RefusedGlobal, TorchFileError):
            continue
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < 8 << 20, f"{peak} bytes allocated reading a {path.stat().st_size}-byte file"
        pending = [loaded]
        while pending:  # every array read whole: a view outside its storage would fault here
            item = pending.pop()
            if isinstance(item, np.ndarray):
                np.ascontiguousarray(item).view(np.uint8).sum()
            elif isinstance(item, dict):
                pending.extend(item.values())
            elif isinstance(item, (list, tuple)):
                pending.extend(item)


_mutations = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=8)


@BUDGET
@given(mutations=_mutations, cut=st.one_of(st.none(), st.integers(0, 1 << 20)))
def test_torch_zip_of_mutated_bytes(scratch: Path, mutations: list[tuple[int, int]], cut: int | None) -> None:
    data = bytearray(_torch_sample()[0])
    for position, value in mutations:
        data[position % len(data)] = value
    if cut is not None:
        del data[cut % (len(data) + 1) :]
    path = scratch / "mutated.pt"
    path.write_bytes(bytes(data))
    _read_torch_file_safely(path)


@BUDGET
@given(
    splices=st.lists(
        st.tuples(st.integers(0, 1 << 16), st.integers(0, 4), st.binary(max_size=6)), min_size=1, max_size=6
    )
)
def test_torch_zip_of_mutated_pickle(scratch: Path, splices: list[tuple[int, int, bytes]]) -> None:
    """A valid archive around a damaged data.pkl: opcodes, counts, ids and views all forged."""
    _, pickled, records = _torch_sample()
    data = bytearray(pickled)
    for position, removed, inserted in splices:
        at = position % (len(data) + 1)
        data[at : at + removed] = inserted
    path = scratch / "pickle.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", bytes(data))
        archive.writestr("archive/byteorder", "little")
        for name, record in records.items():
            archive.writestr(name, record)
    _read_torch_file_safely(path)


# pickles of nested and shared containers: deep tuples and lists, tuple and list DAGs through the memo,
# used as values, dict keys and set members, in any order (most programs underflow: a damaged pickle)
_memo_slots = st.integers(0, 7)
_pickle_steps = st.one_of(
    st.sampled_from([attacks.integer(7), attacks.text("k"), b"N", attacks.EMPTY_TUPLE, attacks.EMPTY_LIST]),
    st.sampled_from([attacks.EMPTY_DICT, attacks.MARK, attacks.TUPLE, attacks.TUPLE1, attacks.TUPLE2]),
    st.sampled_from([attacks.APPEND, attacks.APPENDS, attacks.SETITEM, b"u"]),
    _memo_slots.map(attacks.put),
    _memo_slots.map(attacks.get),
    st.integers(0, 400).map(attacks.deep_tuple),
    st.integers(0, 400).map(attacks.deep_list),
    st.integers(0, 64).map(attacks.tuple_dag),
    st.integers(0, 64).map(attacks.list_dag),
    # set([memo[i]]) and {memo[i]: 1}: the memo's object hashed
    _memo_slots.map(
        lambda i: (
            attacks.named("__builtin__", "set")
            + attacks.EMPTY_LIST
            + attacks.get(i)
            + attacks.APPEND
            + attacks.TUPLE1
            + attacks.REDUCE
        )
    ),
    _memo_slots.map(lambda i: attacks.EMPTY_DICT + attacks.get(i) + attacks.integer(1) + attacks.SETITEM),
)


@BUDGET
@given(steps=st.lists(_pickle_steps, min_size=1, max_size=40))
def test_torch_zip_of_nested_and_shared_pickles(scratch: Path, steps: list[bytes]) -> None:
    """Depth and work bounds: whatever nests or shares, the pickle is read (its object measured
    within the bounds) or refused, in bounded memory and time; nothing recurses or hashes past them."""
    from tui_acc.dumps.torchfile.pickle_bounds import measure
    from tui_acc.dumps.torchfile.reader import TorchFileError, read_torch_file

    path = scratch / "nested.pt"
    pickled = attacks.PROTO + b"".join(steps) + attacks.STOP
    path.write_bytes(attacks.zip_of(attacks.torch_records(pickled, {})))
    _read_torch_file_safely(path)
    try:
        loaded = read_torch_file(path, mapped=False)
    except TorchFileError:
        return
    measure(loaded)  # what was handed on is within the bounds
