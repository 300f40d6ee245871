"""One record of an msprobe dump.json decoded where it stands (what a replay asks for its scalar
arguments), checked against the json module reading the whole file: the same record, whatever the
strings around it hold."""

from __future__ import annotations

import json
from pathlib import Path

from tui_acc.dumps.msprobe.records import record_of
from tui_acc.dumps.policy import ANYWHERE


def _dump_json(tmp_path: Path, data: dict, indent: int | None = 1) -> Path:
    path = tmp_path / "dump.json"
    document = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    path.write_text(json.dumps(document, indent=indent), encoding="utf-8")
    return path


def _whole(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["data"]


def test_every_record_is_the_one_the_whole_file_holds(tmp_path: Path) -> None:
    """Keys and strings that look like records inside records, escapes in names and values, kwargs
    tables (objects inside a record), records that are not objects: each name's record as json.load
    reads it, or None where it is not an object."""
    data = {
        "Functional.linear.0.forward": {
            "input_args": [{"type": "str", "value": '"Functional.linear.1.forward": {"forged": true}'}],
            "input_kwargs": {"Functional.linear.1.forward": {"type": "int", "value": 7}},
            "output": [],
        },
        'Tensor.__getitem__.0.forward "quoted" \\ name': {
            "input_args": [{"type": "slice", "value": [0, 2, None]}]
        },
        "Functional.linear.1.forward": {"input_args": [{"type": "float", "value": 0.5}], "output": []},
        "Distributed.all_reduce.0.forward": [],
        "Torch.cat.0.forward": {"input_args": [{"type": "str", "value": "é" * 3 + "\u2028\n\t"}]},
    }
    for indent in (None, 1, 4):
        path = _dump_json(tmp_path, data, indent)
        whole = _whole(path)
        for name, record in whole.items():
            expected = record if isinstance(record, dict) else None
            assert record_of(path, name, ANYWHERE) == expected, (indent, name)
        assert record_of(path, "Functional.linear.9.forward", ANYWHERE) is None


def test_strings_of_escaped_quotes_are_passed_over_once(tmp_path: Path) -> None:
    """A value of a million escaped quotes before the record asked for: a scan for key-shaped text
    restarted at each of them and took minutes; the file's structure is walked instead."""
    noise = 'x": {"y' * 1_000_000
    data = {
        "Functional.linear.0.forward": {"input_args": [{"type": "str", "value": noise}]},
        "Functional.linear.1.forward": {"input_args": [{"type": "int", "value": 3}]},
    }
    path = _dump_json(tmp_path, data, None)
    assert record_of(path, "Functional.linear.1.forward", ANYWHERE) == data["Functional.linear.1.forward"]
    assert record_of(path, "x", ANYWHERE) is None


def test_damaged_json_yields_the_records_before_the_damage(tmp_path: Path) -> None:
    data = {f"Functional.linear.{i}.forward": {"input_args": [{"type": "int", "value": i}]} for i in range(3)}
    path = _dump_json(tmp_path, data, None)
    text = path.read_text(encoding="utf-8")
    cut = text.index('"Functional.linear.2.forward"') + 10
    path.write_text(text[:cut], encoding="utf-8")  # a dump cut short while it was written
    assert record_of(path, "Functional.linear.0.forward", ANYWHERE) == data["Functional.linear.0.forward"]
    assert record_of(path, "Functional.linear.2.forward", ANYWHERE) is None


def test_a_name_or_data_given_twice_reads_as_json_load_reads_it(tmp_path: Path) -> None:
    """json.load (the reader) keeps the last of a repeated key: so does the index."""
    path = tmp_path / "dump.json"
    path.write_text('{"data": {"A": {"x": 1}, "A": {"x": 2}}, "data": {"A": {"x": 3}, "B": {"y": 0}}}')
    assert record_of(path, "A", ANYWHERE) == _whole(path)["A"] == {"x": 3}
    path.write_text('{"data": {"A": {"x": 1}, "B": {"y": 0}, "A": {"x": 2}}}')
    assert record_of(path, "A", ANYWHERE) == _whole(path)["A"] == {"x": 2}
    assert record_of(path, "B", ANYWHERE) == {"y": 0}
