"""A tensor file whose values are not those its own dump.json record gives (Max and Min): another
tensor's file under its name, bytes of another dtype or byte order. msprobe writes each tensor's
Max and Min beside its file name, from the tensor it saves (every file of our real msprobe dumps
holds them exactly); a file that does not is named and not compared, not judged as the record's
tensor. The pairs are real msprobe dumps (tests/data/models, scripts/make_model_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_bad_input import _errors, _msprobe_copy, _report
from tui_acc.numbers import number

# token 2 of llama-msprobe-L1: layer 0's gate_proj and up_proj (Functional.linear 34 and 35), same
# shape and dtype, before the fault (Functional.linear.43, layer 1's down_proj)
GATE, UP = "Functional.linear.34.forward.output.0.pt", "Functional.linear.35.forward.output.0.pt"


def _record(rank: Path, name: str) -> dict:
    dump = json.loads((rank / "dump.json").read_text())
    return dump["data"][name.removesuffix(".output.0.pt")]["output"][0]


def test_two_files_swapped_are_named_and_the_fault_still_found(model_case, tmp_path: Path, capsys) -> None:
    """gate_proj's and up_proj's outputs swapped at token 2: each was judged as the other, gate_proj
    named the culprit (its inputs right, its "output" up_proj's). Each file is named with the
    values it holds and those its record gives; the fault is still the one named."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    case = json.loads((model_case("llama-msprobe-L1") / "case.json").read_text())
    data = rank / "dump_tensor_data"
    gate, up = (data / GATE).read_bytes(), (data / UP).read_bytes()
    (data / GATE).write_bytes(up)
    (data / UP).write_bytes(gate)
    report = _report(golden, test, capsys)
    for name in (GATE, UP):
        said = [e for e in _errors(report) if e.startswith(f"{data / name}: ")]
        record = _record(rank, name)
        assert said and "but the dump's own record says" in said[0], _errors(report)
        assert f"record says {number(record['Min'])} to {number(record['Max'])}" in said[0], said
    assert report["first_failing_op"]["golden"] == case["fault_record"]


@pytest.mark.parametrize("how", ["big-endian", "a stray value"])
def test_a_file_with_values_its_record_does_not_give_is_named(
    model_case, tmp_path: Path, capsys, how: str
) -> None:
    """The file rewritten as torch saves it, its values changed: byte-swapped (a big-endian
    writer's), or one value set past the record's Max. Named, not compared."""
    import torch

    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    target = rank / "dump_tensor_data" / GATE
    tensor = torch.load(target)
    if how == "big-endian":
        raw = tensor.view(torch.int16).numpy().byteswap()
        tensor = torch.from_numpy(np.ascontiguousarray(raw)).view(torch.bfloat16)
    else:
        tensor = tensor.clone()
        tensor.view(-1)[0] = _record(rank, GATE)["Max"] * 2
    torch.save(tensor, target)
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{target}: ")]
    assert said and "but the dump's own record says" in said[0], _errors(report)


def test_an_untouched_dump_names_no_file(model_case, tmp_path: Path, capsys) -> None:
    """Every file of the real dump holds its record's Max and Min: none is named."""
    golden, test, _ = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    report = _report(golden, test, capsys)
    assert not [e for e in _errors(report) if "own record says" in e], _errors(report)
