"""What dump.json records against what is on disk and in it.

A tensor file whose values are not those its own record gives (Max and Min): another tensor's file
under its name, bytes of another dtype or byte order. msprobe writes each tensor's Max and Min
beside its file name, from the tensor it saves (every file of our real msprobe dumps holds them
exactly); a file that does not is named and not compared, not judged as the record's tensor.

Records in another order than msprobe wrote them (its counters rise through the file): named, and
the order taken from the other side where that one's is msprobe's own.

The pairs are real msprobe dumps (tests/data/models, scripts/make_model_fixtures.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_bad_input import _errors, _msprobe_copy, _report
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.msprobe.record_order import first_disorder
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


def _reorder(rank: Path, first: str, last: str) -> None:
    """dump.json's records from ``first`` to ``last`` shuffled (seeded), as a tool re-sorting the
    file leaves them; the rest in place."""
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    items = list(dump["data"].items())
    names = [name for name, _ in items]
    start, end = names.index(first), names.index(last) + 1
    middle = items[start:end]
    random.Random(3).shuffle(middle)
    dump["data"] = dict(items[:start] + middle + items[end:])
    dump_json.write_text(json.dumps(dump))


def test_reordered_golden_records_are_named_and_the_tests_order_taken(
    model_case, tmp_path: Path, capsys
) -> None:
    """The golden's records of token 2 (decode step 1) shuffled: the file is named (an operator's
    later call before its earlier one), and the golden's calls are put in the order the test's
    records of the same names ran, which msprobe wrote."""
    golden, test, _ = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    case = json.loads((model_case("llama-msprobe-L1") / "case.json").read_text())
    (golden_rank,) = golden.glob("step0/*")
    _reorder(golden_rank, "Functional.linear.31.forward", case["fault_record"])
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{golden_rank / 'dump.json'}: ")]
    assert said and "not in the order msprobe writes them" in said[0], _errors(report)
    assert report["golden"]["order"] == "borrowed from the test's dump.json"
    assert report["first_failing_op"]["golden"] == case["fault_record"]
    comparison = open_comparison(golden, test, CompareOptions(cache=False))
    test_order = [n.name for n in comparison.test.tree.preorder()]
    paired = [p.test for p in comparison.pairing.node_pairs(case["fault_token"])]
    assert paired == sorted(paired, key=test_order.index)


def test_both_sides_reordered_say_the_order_is_unknown(model_case, tmp_path: Path, capsys) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    (golden_rank,) = golden.glob("step0/*")
    for folder in (golden_rank, rank):
        _reorder(folder, "Functional.linear.31.forward", "Functional.linear.43.forward")
    report = _report(golden, test, capsys)
    for folder in (golden_rank, rank):
        assert any(e.startswith(f"{folder / 'dump.json'}: its records are not in") for e in _errors(report))
    assert report["golden"]["order"] == "dump.json order, not the order the calls ran in"


@pytest.mark.parametrize("name", ["llama-msprobe-L1", "llama-msprobe-mix", "qwen2moe-msprobe-L0"])
def test_every_real_dump_json_is_in_counter_order(model_case, name: str) -> None:
    """msprobe's own files (L1, mix, L0 with experts): no record of an operator comes before an
    earlier call of it."""
    files = sorted(model_case(name).rglob("dump.json"))
    assert files
    for dump_json in files:
        assert first_disorder(list(json.loads(dump_json.read_text())["data"])) is None, dump_json


def test_extremes_recorded_at_float32_are_accepted_and_others_named_in_full() -> None:
    """Other msprobe releases take Max and Min after ``.float()``: an int64 beyond 2**24 recorded
    rounded to float32 is what the file holds; a value off by one where four digits cannot tell is
    named with every digit."""
    from tui_acc.dumps.loading import check_recorded
    from tui_acc.dumps.model import TensorRef
    from tui_acc.dumps.tensors import TensorLoadError

    big = 2**24 + 1  # float32 holds 2**24, not this
    ref = TensorRef("output.0", "output", "/x.pt", declared="int64", recorded=(float(np.float32(big)), 3.0))
    check_recorded(ref, float(big), 3.0)  # accepted
    exact = TensorRef("output.0", "output", "/x.pt", declared="float64", recorded=(16777217.0, 3.0))
    with pytest.raises(TensorLoadError, match=r"to 16777219\.0, but .* to 16777217\.0"):
        check_recorded(exact, 16777219.0, 3.0)


def test_backward_records_count_down_and_are_not_taken_for_a_reordered_file() -> None:
    """A backward call takes its forward call's number and they run in reverse: only the forward
    records' counters must rise."""
    names = [
        "Functional.linear.0.forward",
        "Functional.linear.1.forward",
        "Functional.linear.1.backward",
        "Functional.linear.0.backward",
    ]
    assert first_disorder(names) is None
    assert first_disorder(list(reversed(names[:2]))) == (
        "Functional.linear.1.forward",
        "Functional.linear.0.forward",
    )
