"""Single records of an msprobe dump.json, decoded where they stand: a replay asks for one call's
scalar arguments, the rank alignment (dumps/rank_alignment.py) for a few calls' records, and neither
should parse a file of hundreds of megabytes for it."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
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


# "Name": { ... : where each object-valued key's value starts (a record, or a kwargs table); the
# string unrolled (runs of plain characters, then one escape): a 10 MB string value is passed over
# 3.5 times faster than by an alternation tried character by character
_OBJECT_KEY = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*(?=\{)')
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
    starts: dict[str, int] = {}
    for match in _OBJECT_KEY.finditer(text):
        name = match.group(1)
        starts.setdefault(json.loads(f'"{name}"') if "\\" in name else name, match.end())
    with _records_lock:
        _RECORDS[key] = (text, starts)
        while len(_RECORDS) > _RECORDS_KEPT:
            _RECORDS.popitem(last=False)
    return text, starts
