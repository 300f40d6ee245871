"""SGLang's dumper files by their names: what each name says (step, rank, dump index, name, layer),
and the listing of one experiment folder, with the entries that cannot be read named.

See docs/formats.md §5.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tui_acc.dumps.fs import NOT_UTF8, file_kind, not_utf8, shown
from tui_acc.dumps.model import DumpError, Problem

# dumper.py:588-598: step, rank, dump_index, then the tags (name, recompute_status, the dump() call's
# kwargs, the context such as layer_id), joined by "___" (dumper.py:1298-1299), then ".pt". The
# numbers are f-string integers: "0345" is none of its names (a copy named so read as 345 silently)
_NUMBER = "(?:0|[1-9][0-9]*)"
_FILE = re.compile(
    rf"^step=(?P<step>{_NUMBER})___rank=(?P<rank>{_NUMBER})___dump_index=(?P<index>{_NUMBER})"
    r"___name=(?P<rest>.+)\.pt$"
)
_RECOMPUTE = "___recompute_status="


@dataclass(frozen=True)
class Record:
    """One file, as its name describes it."""

    path: str
    step: int
    rank: int
    index: int
    name: str
    layer: int | None


def parse_name(file_name: str, path: str) -> Record | None:
    """The record a file name describes, or None when it is not one of SGLang's dumper names."""
    found = _FILE.match(file_name)
    if found is None or _RECOMPUTE not in found["rest"]:
        return None
    name, _, after = found["rest"].partition(_RECOMPUTE)
    status, *tag_parts = after.split("___")
    if not name or not status.isalpha() or not all("=" in part for part in tag_parts):
        return None
    tags = dict(part.split("=", 1) for part in tag_parts)
    layer = tags.get("layer_id", "")
    return Record(
        path,
        int(found["step"]),
        int(found["rank"]),
        int(found["index"]),
        name,
        int(layer) if layer.lstrip("-").isdigit() else None,
    )


def records_in(folder: Path) -> tuple[list[Record], list[Problem]]:
    """The dumper's files in ``folder`` by their names, and those whose names do not parse."""
    records = []
    problems: list[Problem] = []
    try:
        with os.scandir(folder) as entries:
            files = sorted((e.name, e.path, e.is_file()) for e in entries if e.name.endswith(".pt"))
    except OSError as exc:
        raise DumpError(f"{folder}: cannot list it ({exc.strerror or exc})") from exc
    for name, file_path, regular in files:
        if not_utf8(name):  # its path would reach no frame, no JSON
            problems.append(Problem(shown(file_path), NOT_UTF8))
            continue
        record = parse_name(name, file_path)
        if not regular:  # a FIFO named like a dumper file, skipped silently, had its node paired by guesswork
            if record is not None:
                problems.append(Problem(file_path, f"not a regular file ({_kind(file_path)}); not compared"))
            continue
        if record is None:
            problems.append(
                Problem(
                    file_path,
                    "file name does not parse as SGLang's dumper names it "
                    "(step=S___rank=R___dump_index=I___name=N___recompute_status=C...pt); not compared",
                )
            )
            continue
        records.append(record)
    return records, problems


def _kind(path: str) -> str:
    try:
        return file_kind(Path(path).stat().st_mode)
    except OSError as exc:  # a link to nothing
        return f"cannot be opened: {exc.strerror or exc}"
