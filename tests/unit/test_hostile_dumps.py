"""Hostile dumps: FIFOs, JSON nested past the parser, forged .bin offsets, malformed records.

Each case is a copy of a generated (or committed) dump pair with one file replaced by something a
damaged copy, a prank or an attack leaves there. The report must end (a subprocess under a wall
bound where a read could block), without a traceback, naming the file and what is wrong with it,
and compare the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_bad_input import _atb_copy, _copy, _errors, _msprobe_copy, _report

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


# --- JSON nested past the parser ------------------------------------------------------------------


def test_a_deep_model_tree_is_named_and_rebuilt(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    (device / "model_tree.json").write_text(DEEP)
    report = _report(golden, test, capsys, "--token", "3")
    named = [
        e for e in _errors(report) if e.startswith(f"{device / 'model_tree.json'}: unreadable module tree")
    ]
    assert named and "nested" in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_deep_topology_is_named(atb_pair, tmp_path: Path, capsys) -> None:
    golden, test, _ = _atb_copy(atb_pair, tmp_path)
    (topology,) = test.glob("model/*/*.json")
    topology.write_text(DEEP)
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{topology}: unreadable model topology")]
    assert named and "nested" in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_deep_construct_json_is_named_and_the_calls_compared(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (rank / "construct.json").write_text(DEEP)
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if e.startswith(f"{rank / 'construct.json'}: unreadable call tree")]
    assert named and "nested" in named[0], _errors(report)
    assert report["first_failing_token"] == 2


def test_a_deep_dump_json_is_named(model_case, tmp_path: Path, capsys) -> None:
    from tui_acc.cli import main

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


def test_a_tensor_shape_that_is_not_integers_is_named(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    dump["data"]["Functional.linear.0.forward"]["output"][0]["shape"] = ["x", 2]
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    assert f"{dump_json}: output.0: shape ['x', 2] is not a list of integers; skipped" in _errors(report)
    assert report["first_failing_token"] == 2


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

    from tui_acc.dumps.atb_writer import write_bin
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import TensorLoadError, load_tensor

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
