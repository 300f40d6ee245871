"""msprobe dump.json records reduced to their form: a record's arguments and its tensors' dtypes and
shapes, not their statistics nor their files. Two ranks made the same call where the forms agree (a
tensor-parallel shard, or one rank's wrong copy of replicated work, differs in values only;
``chosen == 2`` is not ``chosen == 0``). Each dump.json is parsed once, whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tui_acc.dumps.model import DumpIndex
from tui_acc.dumps.msprobe.records import dump_json_of

_STATISTICS = frozenset({"data_name", "Max", "Min", "Mean", "Norm", "md5", "requires_grad"})


class RecordForms:
    """Each dump.json's records' forms (hashed) and first integer arguments, parsed once per file."""

    def __init__(self) -> None:
        self._files: dict[Path, dict[str, tuple[int, int | None]]] = {}

    def of(self, index: DumpIndex, token: int, name: str) -> int | None:
        found = self._entry(index, token, name)
        return found[0] if found is not None else None

    def first_int(self, index: DumpIndex, token: int, name: str) -> int | None:
        """The record's first integer argument (``chosen == 3``: 3), or None."""
        found = self._entry(index, token, name)
        return found[1] if found is not None else None

    def _entry(self, index: DumpIndex, token: int, name: str) -> tuple[int, int | None] | None:
        dump_json = dump_json_of(index.tensors(token, name))
        if dump_json is None:
            return None
        if dump_json not in self._files:
            self._files[dump_json] = self._read(index, dump_json)
        return self._files[dump_json].get(name)

    @staticmethod
    def _read(index: DumpIndex, dump_json: Path) -> dict[str, tuple[int, int | None]]:
        try:
            data = index.load_policy.read_json(dump_json)
        except (OSError, ValueError, RecursionError):
            return {}
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            return {}
        return {
            str(name): (hash(_text(_stripped(entry, _STATISTICS))), _first_int(entry))
            for name, entry in entries.items()
        }


def _first_int(entry: Any) -> int | None:
    arguments = entry.get("input_args") if isinstance(entry, dict) else None
    for argument in arguments if isinstance(arguments, list) else []:
        if isinstance(argument, dict) and argument.get("type") == "int":
            value = argument.get("value")
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _stripped(value: Any, keys: frozenset[str] | set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _stripped(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_stripped(v, keys) for v in value]
    return value
