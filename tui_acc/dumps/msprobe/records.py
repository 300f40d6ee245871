"""Single records of an msprobe dump.json, decoded where they stand: a replay asks for one call's
scalar arguments, the rank alignment (dumps/rank_alignment.py) for a few calls' records, and neither
should parse a file of hundreds of megabytes for it."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections import OrderedDict
from json.decoder import scanstring  # type: ignore[attr-defined]  # public in json, absent from its stubs
from pathlib import Path
from typing import Any

from tui_acc.dumps.model import TensorRef
from tui_acc.dumps.policy import LoadPolicy


def dump_json_of(refs: list[TensorRef]) -> Path | None:
    """msprobe: dump.json beside the dump_tensor_data/ its files are in (or a statistics entry's own)."""
    for ref in refs:
        path = ref.path
        if path.name == "dump.json":
            return path
        if path.parent.name == "dump_tensor_data" and (path.parent.parent / "dump.json").is_file():
            return path.parent.parent / "dump.json"
    return None


def record_of(dump_json: Path, name: str, policy: LoadPolicy) -> dict[str, Any] | None:
    """``name``'s record of an msprobe dump.json, decoded alone from where its key stands."""
    indexed = _records(dump_json, policy)
    if indexed is None:
        return None
    text, starts = indexed
    start = starts.get(name)
    if start is None:
        return None
    try:
        record, _ = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):  # damaged, or nested past what the parser follows
        return None
    return record if isinstance(record, dict) else None


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace
_DECODER = json.JSONDecoder()
_RECORDS: OrderedDict[tuple[str, int, int], tuple[str, dict[str, int]]] = OrderedDict()
_RECORDS_KEPT = 4  # the dump.json of each side, and a re-dump's
_records_lock = threading.Lock()


def _records(dump_json: Path, policy: LoadPolicy) -> tuple[str, dict[str, int]] | None:
    """A dump.json's text and where each record starts, read and scanned once per version of the
    file (a replay asks for one record per operator: reading the file each time made replays cost
    the square of its size)."""
    try:
        state = dump_json.stat()
    except OSError:
        return None
    key = (str(dump_json), state.st_size, state.st_mtime_ns)
    with _records_lock:
        if key in _RECORDS:
            _RECORDS.move_to_end(key)
            return _RECORDS[key]
    try:
        text = policy.read_text(dump_json)
    except (OSError, ValueError):
        return None
    starts = _record_starts(text)
    with _records_lock:
        _RECORDS[key] = (text, starts)
        while len(_RECORDS) > _RECORDS_KEPT:
            _RECORDS.popitem(last=False)
    return text, starts


def _record_starts(text: str) -> dict[str, int]:
    """Where each record of the top-level ``data`` object starts, found by walking the file's
    structure: each key read by json's string scanner, each value passed over by its decoder (C, one
    value at a time: nothing kept). A scan for key-shaped text instead restarts inside strings: a
    100 MB string value took seconds, one full of escaped quotes minutes. Damaged JSON ends the walk
    with the records found before it (the reader names the file)."""
    starts: dict[str, int] = {}
    with contextlib.suppress(ValueError, IndexError, RecursionError):
        _walk_object(text, _at(text, 0), starts)
    return starts


def _walk_object(text: str, pos: int, starts: dict[str, int], records: bool = False) -> int:
    """The object at ``pos`` passed over, its ``data`` member's keys noted (``records``: this is that
    member); returns where it ends."""
    if text[pos] != "{":
        raise ValueError("not an object")
    pos = _at(text, pos + 1)
    while text[pos] == '"':
        key, pos = scanstring(text, pos + 1)
        pos = _at(text, pos)
        if text[pos] != ":":
            raise ValueError("no colon")
        pos = _at(text, pos + 1)
        if records:  # a name given twice: the last, as json.load (the reader) keeps the last
            starts[key] = pos
        if not records and key == "data" and text[pos] == "{":
            starts.clear()  # so is a second "data"
            pos = _walk_object(text, pos, starts, records=True)
        else:
            _, pos = _DECODER.raw_decode(text, pos)
        pos = _at(text, pos)
        if text[pos] == ",":
            pos = _at(text, pos + 1)
    if text[pos] != "}":
        raise ValueError("object not closed")
    return pos + 1


def _at(text: str, pos: int) -> int:
    """``pos`` past any whitespace."""
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string too
