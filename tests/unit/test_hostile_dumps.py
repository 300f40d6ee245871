"""Hostile dumps: FIFOs, JSON nested past the parser, forged .bin offsets, malformed records.

Each case is a copy of a generated (or committed) dump pair with one file replaced by something a
damaged copy, a prank or an attack leaves there. The report must end (a subprocess under a wall
bound where a read could block), without a traceback, naming the file and what is wrong with it,
and compare the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import device_dir
from tests.unit.test_bad_input import _atb_copy, _copy, _errors, _msprobe_copy, _report
from tui_acc import CompareOptions, open_comparison

FAULT_OP = "root.model.layers.2.mlp.down_proj"
DEEP = "[" * 100_000  # far past what Python's JSON parser follows


def _report_process(golden: Path, test: Path) -> tuple[int, dict | None, str]:
    """``report --json`` in its own process, under a wall bound: a reader blocked on a FIFO would
    otherwise hang the test run. (exit code, the report or None, stderr)."""
    result = subprocess.run(
        [sys.executable, "-m", "tui_acc", "report", str(golden), str(test), "--json", "--no-cache"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr


def _fifo(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


def _last_layer_bin(device: Path, token: int = 3) -> Path:
    layers = sorted((device / str(token)).glob("*_LlamaLayer"), key=lambda d: int(d.name.split("_")[0]))
    return next(layers[-1].glob("*_Attention/after/outtensor0.bin"))  # after the fault


# --- FIFOs ----------------------------------------------------------------------------------------


def test_a_fifo_model_tree_is_named_and_the_tree_rebuilt(demo_pair, tmp_path: Path) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    tree = _fifo(device / "model_tree.json")
    code, report, _ = _report_process(golden, test)
    assert code == 1 and report is not None
    assert (
        f"{tree}: unreadable module tree (not a regular file (a FIFO)); tree rebuilt from folder names"
        in (_errors(report))
    )
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_fifo_tensor_and_topology_files_of_an_atb_dump_are_named(atb_pair, tmp_path: Path) -> None:
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    tensor = _fifo(_last_layer_bin(device))
    (topology,) = test.glob("model/*/*.json")
    _fifo(topology)
    code, report, _ = _report_process(golden, test)
    assert code == 1 and report is not None
    errors = _errors(report)
    assert any(e.endswith(f"{tensor}: not a regular file (a FIFO)") for e in errors), errors
    assert f"{topology}: unreadable model topology (not a regular file (a FIFO))" in errors
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_fifo_construct_json_is_named_and_the_calls_compared(model_case, tmp_path: Path) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    construct = _fifo(rank / "construct.json")
    code, report, _ = _report_process(golden, test)
    assert report is not None and code == 1
    assert f"{construct}: unreadable call tree (not a regular file (a FIFO)); calls are shown flat" in (
        _errors(report)
    )
    assert report["first_failing_token"] == 2  # the rest is compared as before


def test_a_fifo_dump_json_is_named_not_nothing_pairs(model_case, tmp_path: Path) -> None:
    """Without its dump.json a rank has nothing to compare: the error says which file, and why."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = _fifo(rank / "dump.json")
    code, _, stderr = _report_process(golden, test)
    assert code == 2
    assert f"{dump_json}: unreadable msprobe dump.json (not a regular file (a FIFO))" in stderr
    assert "nothing pairs" not in stderr


def test_a_token_folder_named_with_250_digits_is_named_and_the_rest_compared(
    demo_pair, tmp_path: Path, capsys
) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    odd = []
    for side in (golden, test):
        (token_dir,) = [p for p in device_dir(side).iterdir() if p.name == "0"]
        odd.append(token_dir.rename(token_dir.with_name("9" * 250)))
    report = _report(golden, test, capsys, "--token", "3")
    assert all(
        any(e.startswith(f"{folder}: a folder named with 250 digits") for e in _errors(report))
        for folder in odd
    )
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_module_folder_named_in_another_encoding_is_named_and_the_rest_compared(
    demo_pair, tmp_path: Path, capsys
) -> None:
    """A module folder whose name is not UTF-8 (Latin-1 bytes), on both sides: named (shown with
    U+FFFD for the bytes), skipped, the report made and the fault still found."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    for side in (golden, test):
        token = device_dir(side) / "3"
        module = next(p for p in sorted(token.iterdir()) if p.name.endswith("lm_head"))
        os.rename(os.fsencode(module), os.fsencode(module) + b"_caf\xe9")  # noqa: PTH104 (a bytes name)
    report = _report(golden, test, capsys, "--token", "3")
    assert any("lm_head_caf\ufffd: its name is not UTF-8" in e for e in _errors(report)), _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


# --- JSON nested past the parser ------------------------------------------------------------------


def _assert_tree_rebuilt(golden: Path, test: Path, device: Path, said: str) -> None:
    """The report, in its own process (bounded: a loop would never end), names the test's
    model_tree.json as unreadable for ``said`` and still finds the fault in the rebuilt tree."""
    _, report, _ = _report_process(golden, test)
    assert report is not None
    named = [
        e for e in _errors(report) if e.startswith(f"{device / 'model_tree.json'}: unreadable module tree")
    ]
    assert named and said in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_deep_model_tree_is_named_and_rebuilt(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    (device / "model_tree.json").write_text(DEEP)
    _assert_tree_rebuilt(golden, test, device, "nested")


def test_a_deep_topology_is_named(atb_pair, tmp_path: Path, capsys) -> None:
    golden, test, _ = _atb_copy(atb_pair, tmp_path)
    (topology,) = test.glob("model/*/*.json")
    topology.write_text(DEEP)
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{topology}: unreadable model topology")]
    assert named and "nested" in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


@pytest.mark.parametrize("nodes", [5, {"opName": "x_0"}, "abc"])
def test_a_topology_whose_nodes_are_no_list_is_named(atb_pair, tmp_path: Path, capsys, nodes) -> None:
    golden, test, _ = _atb_copy(atb_pair, tmp_path)
    (topology,) = test.glob("model/*/*.json")
    raw = json.loads(topology.read_text())
    raw["nodes"] = nodes
    topology.write_text(json.dumps(raw))
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{topology}: unreadable model topology")]
    assert named and "not a list" in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_operations_nested_past_the_recursion_limit_are_walked(atb_pair, tmp_path: Path, capsys) -> None:
    """1,100 operation folders each inside the last (made through directory descriptors: their path
    outgrows PATH_MAX): no RecursionError, the fault still found."""
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    token = min((p for p in device.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    (first,) = sorted(p for p in token.iterdir() if p.is_dir())[:1]
    fd = os.open(first, os.O_RDONLY)
    try:
        for _ in range(1_100):
            os.mkdir("0_N", dir_fd=fd)
            inner = os.open("0_N", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    try:
        report = _report(golden, test, capsys)
    finally:  # unnested a level at a time: pytest's recursive cleanup would stop at the recursion limit
        top = first / "0_N"
        while top.exists():
            inner = top / "0_N"
            if inner.exists():
                inner.rename(first / "0_N.next")
            top.rmdir()
            if (first / "0_N.next").exists():
                (first / "0_N.next").rename(top)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_deep_construct_json_is_named_and_the_calls_compared(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (rank / "construct.json").write_text(DEEP)
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{rank / 'construct.json'}: unreadable call tree")]
    assert named and "nested" in named[0], _errors(report)
    assert report["first_failing_token"] == 2


def test_a_deep_dump_json_is_named(model_case, tmp_path: Path, capsys) -> None:
    from tui_acc.cli.main import main

    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (rank / "dump.json").write_text(DEEP)
    code = main(["report", str(golden), str(test), "--json", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and f"{rank / 'dump.json'}: unreadable msprobe dump.json (nested" in err, err


# --- msprobe records that are not what msprobe writes ---------------------------------------------


def test_a_construct_json_that_is_not_an_object_is_named(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (rank / "construct.json").write_text("[1, 2]")
    report = _report(golden, test, capsys)
    problem = "holds a JSON array, not an object of call -> parent; calls are shown flat"
    assert f"{rank / 'construct.json'}: {problem}" in _errors(report)
    assert report["first_failing_token"] == 2


MALFORMED_RECORDS = {
    "input_args a string": ("input_args", "abc", "input_args is str"),
    "input_args a number": ("input_args", 5, "input_args is int"),
    "input_kwargs a list": ("input_kwargs", [1], "input_kwargs is list"),
    "output a number": ("output", 7, "output is int"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_RECORDS))
def test_a_malformed_dump_json_record_is_named_and_the_rest_compared(
    model_case, tmp_path: Path, capsys, case: str
) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    name = "Functional.linear.0.forward"  # token 0: before the fault
    field, value, problem = MALFORMED_RECORDS[case]
    dump["data"][name][field] = value
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{dump_json}: {name}: ")]
    assert named and problem in named[0] and "skipped" in named[0], _errors(report)
    assert report["first_failing_token"] == 2


def test_a_bare_value_where_msprobe_writes_an_object_is_named(model_case, tmp_path: Path, capsys) -> None:
    """msprobe writes every argument as an object ({"type": "int", "value": 5}) and None as null: an
    output list holding a bare number lost the record's output without a word."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    dump["data"]["Functional.linear.0.forward"]["output"] = [5]
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    expected = (
        f"{dump_json}: Functional.linear.0.forward: output.0: a bare int, not what msprobe writes; skipped"
    )
    assert expected in _errors(report), _errors(report)
    assert report["first_failing_token"] == 2


def test_a_file_holding_another_dtype_than_its_record_says_is_named(
    model_case, tmp_path: Path, capsys
) -> None:
    """gate_proj's output (correct) saved again as float64 while dump.json still says float16: judged
    at float64's rounding, it was named the culprit (its replay off by 1.7e-4, float64 "explaining"
    3e-15). The file is named and not compared; the fault is still the one named."""
    import torch

    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    target = rank / "dump_tensor_data" / "Functional.linear.41.forward.output.0.pt"
    torch.save(torch.load(target).to(torch.float64), target)
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{target}: ")]
    assert said and "holds float64, but the dump's own record says float16" in said[0], _errors(report)
    assert report["first_failing_op"]["golden"] == case["fault_record"]


def test_a_tensor_shape_that_is_not_integers_is_named(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    dump["data"]["Functional.linear.0.forward"]["output"][0]["shape"] = ["x", 2]
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    record = f"{dump_json}: Functional.linear.0.forward"
    said = f"{record}: output.0: shape ['x', 2] is not a list of integers; skipped"
    assert said in _errors(report)
    assert report["first_failing_token"] == 2


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("Functional.linear.0.forward.output.0\u0000.pt", "NUL byte"),
        ("Functional.linear.0.forward.output.0\ud800.pt", "unpaired surrogate"),
        # the golden's own file, which exists: a path is no name msprobe writes, and is not followed
        ("../../../../golden/{golden_file}", "is a path"),
        ("{golden}/{golden_file}", "is a path"),
    ],
    ids=["NUL", "surrogate", "relative path", "absolute path"],
)
def test_a_data_name_no_file_can_have_is_named_and_its_statistics_compared(
    model_case, tmp_path: Path, capsys, name: str, said: str
) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (golden_file,) = golden.glob("*/*/dump_tensor_data/Functional.linear.0.forward.output.0.pt")
    assert test in rank.parents and len(rank.relative_to(test).parts) == 2  # step0/proc*
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    output = dump["data"]["Functional.linear.0.forward"]["output"][0]
    output["data_name"] = name.format(golden=golden, golden_file=golden_file.relative_to(golden))
    dump_json.write_text(json.dumps(dump))  # json escapes both: the file holds them as \\u escapes
    report = _report(golden, test, capsys)
    assert report["exit"] == 1  # the fault's verdict, not a traceback's exit
    named = [
        e
        for e in _errors(report)
        if e.startswith(f"{dump_json}: Functional.linear.0.forward: output.0: data_name ")
    ]
    assert named and said in named[0], _errors(report)
    assert report["first_failing_token"] == 2


def test_a_record_or_field_given_twice_in_dump_json_is_named(model_case, tmp_path: Path, capsys) -> None:
    """JSON keeps the last copy of a key, at the first one's place, without a word: a record pasted
    in twice (here a later one's values under an earlier call's name) and a statistic given twice are
    named; the fault is still found."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    records = [f"{json.dumps(name)}: {json.dumps(record)}" for name, record in dump["data"].items()]
    later = json.dumps(dump["data"]["Functional.linear.1.forward"])
    records.append(f'"Functional.linear.0.forward": {later}')
    head = {key: value for key, value in dump.items() if key != "data"}
    text = json.dumps(head)[:-1] + ', "data": {' + ", ".join(records) + "}}"
    dump_json.write_text(text.replace('"Max": ', '"Max": 0, "Max": ', 1))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{dump_json}: ")]
    assert any("names 1 records twice (e.g. Functional.linear.0.forward)" in e for e in said), said
    assert any("gives 1 fields twice in one object (e.g. 'Max')" in e for e in said), said
    assert report["first_failing_token"] == 2 and report["first_failing_op"]["label"] == "local"


def test_keyword_arguments_nested_past_the_recursion_limit_are_not_read(
    model_case, tmp_path: Path, capsys
) -> None:
    """Every linear record of the test given a keyword argument of lists 900 deep (JSON reads it;
    a recursive walk of it would not): the culprit is still replayed and named."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    deep: list = []
    for _ in range(900):
        deep = [deep]
    for name, record in dump["data"].items():
        if name.startswith("Functional.linear."):
            record["input_kwargs"] = {"deep": deep}
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    assert report["exit"] == 1 and report["first_failing_token"] == 2
    assert report["first_failing_op"]["label"] == "local"


# --- .bin headers and .npy headers ----------------------------------------------------------------


def _header_with(target: Path, replace: dict[str, str]) -> None:
    """Rewrite header lines of a .bin in place (``name`` -> new ``name=value`` line, or added)."""
    raw = target.read_bytes()
    end = raw.index(b"$End=1\n")
    lines = raw[:end].decode().splitlines()
    kept = [line for line in lines if line.partition("=")[0] not in replace]
    added = [f"{key}={value}" for key, value in replace.items()]
    target.write_bytes(("\n".join([*kept, *added, "$End=1"]) + "\n").encode() + raw[end + len(b"$End=1\n") :])


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"$Object.data": "-104,{length}"}, "has a negative offset or length"),
        ({"$Object.data": "0,-4"}, "has a negative offset or length"),
        ({"$Object.data": "1000000,{length}"}, "past the end of"),
        ({"max": "abc"}, "header max='abc' is not a number"),
    ],
    ids=["negative offset", "negative length", "offset past the end", "max not a number"],
)
def test_a_forged_bin_header_is_refused_by_name(
    atb_pair, tmp_path: Path, capsys, fields: dict[str, str], problem: str
) -> None:
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    target = _last_layer_bin(device)
    length = target.stat().st_size - target.read_bytes().index(b"$End=1\n") - len(b"$End=1\n")
    _header_with(target, {key: value.format(length=length) for key, value in fields.items()})
    report = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(report) if str(target) in e]
    assert named and problem in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_negative_offset_never_decodes_the_header_as_values(tmp_path: Path) -> None:
    """The header's own text read as float32 values: what the forged offset asked for."""

    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import TensorLoadError, load_tensor
    from tui_acc.dumps.writers.atb_bin import write_bin

    target = write_bin(tmp_path / "outtensor0.bin", np.arange(32, dtype=np.float32))
    _header_with(target, {"$Object.data": "-104,128"})
    with pytest.raises(TensorLoadError, match="negative offset"):
        load_tensor(target, ANYWHERE)


def test_a_deep_npy_header_is_not_called_pickled_objects(tmp_path: Path) -> None:
    import struct

    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import TensorLoadError, load_tensor

    descr = "'<f4'"
    for _ in range(5000):  # a structured dtype nested 5000 deep: a header numpy will not parse
        descr = f"[('a', {descr})]"
    header = ("{'descr': " + descr + ", 'fortran_order': False, 'shape': (1,), }").encode("latin1")
    header += b" " * (63 - (12 + len(header)) % 64) + b"\n"
    path = tmp_path / "deep.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header)) + header + bytes(64))
    with pytest.raises(TensorLoadError) as caught:
        load_tensor(path, ANYWHERE)
    assert str(caught.value).startswith(f"{path}: unreadable .npy file (")
    assert "pickled" not in str(caught.value)


# --- folders that cannot be listed ----------------------------------------------------------------

# As root the report is run without the two capabilities that let root read any file (dropped from
# the bounding set before the interpreter is started again): chmod 000 then binds it as it binds a user.
_WITHOUT_OVERRIDE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        sys.exit(77)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


@pytest.fixture(scope="module")
def bound_python(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of a Python that file permissions bind; skipped where none can be had."""
    argv = [sys.executable, "-c", _WITHOUT_OVERRIDE] if os.geteuid() == 0 else [sys.executable]
    closed = tmp_path_factory.mktemp("closed") / "folder"
    closed.mkdir(mode=0)
    try:
        probe = subprocess.run([*argv, "-c", f"import os; os.listdir({str(closed)!r})"], capture_output=True)
    finally:
        closed.chmod(0o755)
    if probe.returncode == 0:
        pytest.skip("file permissions do not bind this process (no capability could be dropped)")
    return argv


def _report_bound(argv: list[str], golden: Path, test: Path, *closed: Path) -> tuple[int, dict | None, str]:
    """``report --json`` by a process that ``closed`` (chmod 000 meanwhile) cannot read."""
    for folder in closed:
        folder.chmod(0)
    try:
        result = subprocess.run(
            [*argv, "-m", "tui_acc", "report", str(golden), str(test), "--json", "--no-cache"],
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        for folder in closed:
            folder.chmod(0o755)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else None, result.stderr


def test_a_module_folder_that_cannot_be_listed_is_named(bound_python, demo_pair, tmp_path: Path) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    closed = device / "3" / "root.model.layers.3.mlp.up_proj"
    code, report, _ = _report_bound(bound_python, golden, test, closed)
    assert code == 1 and report is not None
    assert f"{closed}: cannot list the folder (Permission denied); not compared" in _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_token_folder_that_cannot_be_listed_is_named_not_empty(
    bound_python, demo_pair, tmp_path: Path
) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    closed = device / "5"
    code, report, _ = _report_bound(bound_python, golden, test, closed)
    assert code == 1 and report is not None
    assert f"{closed}: cannot list the folder (Permission denied); token 5 is not compared" in _errors(report)
    assert ("token", "golden", 5) in {(u["kind"], u["side"], u["token"]) for u in report["unmatched"]}
    assert not any("no output on both sides" in str(t.get("error")) for t in report["tokens"])
    assert report["first_failing_token"] == 3


def test_a_rank_folder_that_cannot_be_listed_is_named(bound_python, demo_pair, tmp_path: Path) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    code, _, stderr = _report_bound(bound_python, golden, test, device)
    assert code == 2 and f"{device}: cannot list the folder (Permission denied)" in stderr


def test_atb_folders_that_cannot_be_listed_are_named(bound_python, atb_pair, tmp_path: Path) -> None:
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    token = device / "5"
    operation = _last_layer_bin(device).parent.parent  # an Attention folder at token 3, after the fault
    code, report, _ = _report_bound(bound_python, golden, test, token, operation)
    assert code == 1 and report is not None
    errors = _errors(report)
    assert (
        f"{token}: cannot list the folder (Permission denied); folder 5's tokens are not compared" in errors
    )
    assert any(e.startswith(f"{operation}: cannot list the folder (Permission denied)") for e in errors), (
        errors
    )
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_msprobe_folders_that_cannot_be_listed_are_named(bound_python, model_case, tmp_path: Path) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    tensors = rank / "dump_tensor_data"
    code, report, _ = _report_bound(bound_python, golden, test, tensors)
    assert code == 1 and report is not None
    problem = (
        "cannot list the folder (Permission denied); its tensors are compared by their dump.json statistics"
    )
    assert f"{tensors}: {problem}" in _errors(report)
    assert report["first_failing_token"] == 2
    code, _, stderr = _report_bound(bound_python, golden, test, rank)
    assert code == 2 and f"{rank}: cannot list the folder (Permission denied)" in stderr


# --- module folders model_tree.json does not list -------------------------------------------------

EXTRA = "root.model.norm.extra_call"  # an API-mode call's folder: in no model_tree.json


def _add_extra_module(root: Path, token: int) -> None:
    device = next(root.glob("msit_dump_*/torch_tensors/*_*"))
    shutil.copytree(device / str(token) / "root.model.norm", device / str(token) / EXTRA)


@pytest.mark.parametrize("sides", [("golden",), ("golden", "test"), ("test",)])
def test_an_unlisted_module_of_a_later_token_is_compared_or_listed(
    demo_pair, tmp_path: Path, capsys, sides: tuple[str, ...]
) -> None:
    """Only the first token's folders used to join the tree: a later token's unlisted folder was
    neither compared nor listed on the golden side, and taken for the test's alone on both."""
    golden, test, _ = _copy(demo_pair, tmp_path)
    for side in sides:
        _add_extra_module(golden if side == "golden" else test, 3)
    report = _report(golden, test, capsys, "--all-tokens")
    unmatched = {(u["kind"], u["side"], u["token"], u["name"]) for u in report["unmatched"]}
    if len(sides) == 2:
        assert not any(EXTRA in name for *_, name in unmatched)
        cmp = open_comparison(golden, test, CompareOptions(cache=False))
        assert EXTRA in {row["golden_node"] for row in cmp.verdicts.token(3).rows}  # compared
    else:
        assert ("node", sides[0], 3, EXTRA) in unmatched
    assert report["first_failing_op"]["golden"] == FAULT_OP


@pytest.mark.parametrize("how", ["a child named like its parent", "a subtree listed twice"])
def test_a_model_tree_naming_a_module_twice_is_named_and_rebuilt(demo_pair, tmp_path: Path, how: str) -> None:
    """A module named twice in model_tree.json (as its own child: a loop a walk never leaves; or one
    subtree under two parents) is named, the tree rebuilt from the folders, the fault still found."""
    golden, test, device = _copy(demo_pair, tmp_path)
    tree = json.loads((device / "model_tree.json").read_text())
    module = tree["children"][0]
    if how == "a child named like its parent":
        module.setdefault("children", []).append({"name": module["name"], "type": "Loop", "children": []})
    else:
        tree["children"].append(json.loads(json.dumps(module)))
    (device / "model_tree.json").write_text(json.dumps(tree))
    _assert_tree_rebuilt(golden, test, device, "listed twice")
