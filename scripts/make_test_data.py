"""Cut the compact reference set in tests/data/reference from the full reference dumps.

    python scripts/make_test_data.py [--source DIR] [--output DIR]

The source is ``--source``, else ``$TUI_ACC_REFERENCE``, else ``../shared/reference`` beside the
repository: the real msit and msprobe dumps described in its MANIFEST.md. The output (default
``tests/data/reference``) keeps the same case folders and layout with fewer tokens, so a bare clone
can run every conformance test:

* ``msit-torch-2layer``: tokens 0..3 (msit-torch-stats has 4 tokens and is checked against them);
* ``msit-torch-logits``, ``msit-torch-stats``: everything (both are tiny);
* ``msit-torch-12layer-vs-atb``: tokens 0 and 1 of every side; the ATB topology JSON unchanged;
* ``msprobe-L0`` (tensor and statistics): calls 0 and 1 (call index k of ``...forward.k`` is token k).

Rows of the tools' compare CSVs are kept byte for byte (header, quoting and line endings as the tool
wrote them) when their token is kept; JSON the tools wrote is filtered and re-serialised in the
tools' own layout, which is checked to reproduce the original byte for byte before anything is cut.
The output is deterministic (the same bytes on every run, files 0644), is built in a temporary folder
beside the target and replaces the old folder only once complete. It also writes MANIFEST.md there.
Running the script on its own output reproduces that output (the cut is a projection).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "tests" / "data" / "reference"
SIZE_LIMIT = 10_000_000  # bytes, summed over files; tests/conformance/test_compact_reference.py checks it

MSIT_2LAYER_TOKENS = (0, 1, 2, 3)
MSIT_12LAYER_TOKENS = (0, 1)
MSPROBE_CALLS = (0, 1)

FILE_MODE = 0o644
DIR_MODE = 0o755

_CALL = re.compile(r"\.(?:forward|backward)\.(\d+)(?=\.|$)")


MANIFEST_HEAD = """\
# Compact reference dumps for tui-acc's tests

A cut of the full reference set (`../shared/reference`, described by its own MANIFEST.md) made by
`scripts/make_test_data.py`; do not edit it by hand. Re-run the script (it reads `--source`, else
`$TUI_ACC_REFERENCE`, else `../shared/reference`) and commit the result.
`tests/conformance/test_compact_reference.py` checks that the script reproduces this folder byte
for byte from whichever reference set is present, and that it stays under {limit} MB (the sum of
its file sizes).

Every file is as the tools (or the reference's generator) wrote it, except as listed here:

- Token folders (msit) and records of other calls (msprobe) are left out; see each case below.
- The tools' compare CSVs keep only the rows of kept tokens. Each kept row, the header, the
  quoting and the line endings are byte-identical to the full set's.
- `*_run.json`: `generated` holds the ids of the kept tokens only.
- msprobe `dump.json`, `construct.json` and `stack.json` keep the kept records only (in
  `stack.json`, entry ids are unchanged and an entry whose records are all cut is left out); the
  other top-level fields of `dump.json` and the JSON layout (`indent=1`) are unchanged.
- Files are 0644 (the full set's are read-only).

Limits:

- Git keeps no empty folders: the msit torch dumps' empty `root/` and `root.model/` folders (one
  per token) are absent here; a reader must not need them.
- A git checkout stamps files with checkout times, as a copy does, so these msit torch dumps' file
  times say nothing about execution order (the reader then orders by `model_tree.json`); a test
  that needs a copy's times sets them itself rather than rely on the filesystem's granularity.
- Fewer tokens than the full set: tests derive their expectations (token lists, row counts) from
  the data present, and run on the full set as well where it exists (tests/conftest.py).

"""


class CutError(Exception):
    """The source is not the reference set this script knows how to cut."""


@dataclass
class CaseReport:
    """What was kept of one case, for MANIFEST.md."""

    name: str
    kept: str
    notes: list[str] = field(default_factory=list)


# --- writing ------------------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    """Write a file 0644 (the sources are read-only 0444), creating its folders 0755."""
    _mkdirs(path.parent)
    path.write_bytes(data)
    path.chmod(FILE_MODE)


def _mkdirs(folder: Path) -> None:
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir()
        made.chmod(DIR_MODE)


def _copy(src: Path, dst: Path) -> None:
    _write(dst, src.read_bytes())


def _files(root: Path) -> list[Path]:
    """Every regular file under root, sorted, so that the output is written in one fixed order."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            raise CutError(f"{path}: a symbolic link; the reference set holds none")
        if path.is_file():
            found.append(path)
    return found


# --- the tools' files ---------------------------------------------------------------------------


def _tool_json(path: Path) -> Any:
    """Read a JSON file the tools (or the reference's generator) wrote with ``json.dump(indent=1)``.

    The cut re-serialises filtered objects the same way; this checks first that doing so reproduces
    the untouched file byte for byte, so nothing but the filtering can change.
    """
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    if _dump_json(data) != text:
        raise CutError(f"{path}: not in the json.dump(indent=1) layout this script reproduces")
    return data


def _dump_json(data: Any) -> str:
    return json.dumps(data, indent=1)


def _csv_records(path: Path) -> tuple[str, list[tuple[list[str], str]]]:
    """The header's raw text and each row as (parsed fields, raw text including its line ending).

    Rows are cut from the raw text, never re-written by a CSV writer, so that their quoting, number
    formatting and line endings stay exactly as the tool wrote them (quoted fields may span lines).
    """
    text = path.read_bytes().decode("utf-8")
    consumed: list[str] = []

    def lines() -> Iterator[str]:
        for line in io.StringIO(text, newline="").readlines():
            consumed.append(line)
            yield line

    records = []
    for fields in csv.reader(lines()):
        records.append((fields, "".join(consumed)))
        consumed.clear()
    if consumed or "".join(raw for _, raw in records) != text:
        raise CutError(f"{path}: the CSV records do not add up to the file")
    if not records:
        raise CutError(f"{path}: an empty CSV")
    return records[0][1], [(fields, raw) for fields, raw in records[1:]]


def _filter_csv(src: Path, dst: Path, keep: Callable[[dict[str, str]], bool], column_check: str) -> int:
    """Copy the header and the rows ``keep`` accepts; returns how many rows were kept."""
    header_raw, rows = _csv_records(src)
    header = next(csv.reader([header_raw]))
    if column_check not in header:
        raise CutError(f"{src}: no {column_check!r} column")
    kept = [raw for fields, raw in rows if keep(dict(zip(header, fields, strict=True)))]
    _write(dst, (header_raw + "".join(kept)).encode("utf-8"))
    return len(kept)


def _run_json(src: Path, dst: Path, tokens: tuple[int, ...]) -> None:
    """A ``*_run.json`` with ``generated`` cut to the kept tokens (token k generated ``generated[k]``)."""
    data = _tool_json(src)
    generated = data["generated"]
    if max(tokens) >= len(generated):
        raise CutError(f"{src}: {len(generated)} generated ids; token {max(tokens)} is not there")
    data["generated"] = [generated[k] for k in tokens]
    _write(dst, _dump_json(data).encode("utf-8"))


# --- msit ---------------------------------------------------------------------------------------


def _msit_token(rel: Path) -> int | None:
    """The token of a file in an msit dump side, or None for files outside token folders.

    Torch: ``msit_dump_*/torch_tensors/{dev}/{token}/...``; ATB: ``msit_dump_*/tensors/{dev}/{token}/...``
    (its ``layer/`` and ``model/`` topology JSON belong to no token).
    """
    parts = rel.parts
    if len(parts) < 4 or not parts[0].startswith("msit_dump_"):
        raise CutError(f"{rel}: not inside an msit_dump_* folder")
    if parts[1] in ("torch_tensors", "tensors") and len(parts) > 4:
        if not parts[3].isdigit():
            raise CutError(f"{rel}: expected a token folder after {parts[2]}")
        return int(parts[3])
    if parts[1] in ("torch_tensors", "layer", "model") and len(parts) == 4:
        return None  # model_tree.json; ATB topology JSON
    raise CutError(f"{rel}: an msit dump file this script does not know")


def _msit_side(src: Path, dst: Path, tokens: tuple[int, ...] | None) -> None:
    """Copy one msit dump side, only the token folders kept (all of them if tokens is None)."""
    seen: set[int] = set()
    for path in _files(src):
        token = _msit_token(path.relative_to(src))
        if token is not None:
            seen.add(token)
        if token is None or tokens is None or token in tokens:
            _copy(path, dst / path.relative_to(src))
    if tokens is not None and not set(tokens) <= seen:
        raise CutError(f"{src}: tokens {sorted(set(tokens) - seen)} are missing")


def _msit_case(
    src: Path, dst: Path, sides: tuple[str, ...], tokens: tuple[int, ...] | None, report: CaseReport
) -> None:
    for side in sides:
        _msit_side(src / side, dst / side, tokens)
        report.notes.append(_side_note(dst, side))
    for run in sorted(src.glob("*_run.json")):
        if tokens is None:
            _copy(run, dst / run.name)
        else:
            _run_json(run, dst / run.name, tokens)
    wanted = None if tokens is None else {str(k) for k in tokens}

    def keep(row: dict[str, str]) -> bool:
        return wanted is None or row["token_id"] in wanted

    for table in sorted((src / "compare").glob("*.csv")) if (src / "compare").is_dir() else []:
        kept_rows = _filter_csv(table, dst / "compare" / table.name, keep, "token_id")
        report.notes.append(f"`compare/{table.name}`: {kept_rows} rows")
    expected = {*sides, "compare"} | {p.name for p in src.glob("*_run.json")}
    unknown = sorted(p.name for p in src.iterdir() if p.name not in expected)
    if unknown:
        raise CutError(f"{src}: unexpected entries {unknown}")


# --- msprobe ------------------------------------------------------------------------------------


def _record(name: str) -> tuple[str, int]:
    """(record, call index) of an msprobe name: ``Module.x.Linear.forward.3.input.0`` -> its record, 3."""
    match = _CALL.search(name)
    if not match:
        raise CutError(f"{name}: no .forward.N call index")
    return name[: match.end()], int(match.group(1))


def _msprobe_side(src: Path, dst: Path, calls: tuple[int, ...]) -> set[str]:
    """Cut one msprobe dump side (``step0/proc*/``); returns the records kept."""
    (proc,) = src.glob("step*/proc*")
    rel = proc.relative_to(src)
    dump = _tool_json(proc / "dump.json")
    records = dump["data"]
    kept = {name for name in records if _record(name)[1] in calls}
    if {_record(name)[1] for name in kept} != set(calls):
        raise CutError(f"{proc}/dump.json: calls {calls} are not all there")
    dump["data"] = {name: value for name, value in records.items() if name in kept}
    _write(dst / rel / "dump.json", _dump_json(dump).encode("utf-8"))

    construct = _tool_json(proc / "construct.json")
    if set(construct) != set(records):
        raise CutError(f"{proc}/construct.json: its records are not dump.json's")
    construct = {name: parent for name, parent in construct.items() if name in kept}
    if any(parent is not None and parent not in kept for parent in construct.values()):
        raise CutError(f"{proc}/construct.json: a kept record's parent is cut")
    _write(dst / rel / "construct.json", _dump_json(construct).encode("utf-8"))

    # stack.json: {"id": [[records sharing this stack], [frames]]}; ids are kept as written
    stack = _tool_json(proc / "stack.json")
    stacked: dict[str, Any] = {}
    for key, (names, frames) in stack.items():
        if not set(names) <= set(records):
            raise CutError(f"{proc}/stack.json: entry {key} names records dump.json lacks")
        names = [name for name in names if name in kept]
        if names:
            stacked[key] = [names, frames]
    _write(dst / rel / "stack.json", _dump_json(stacked).encode("utf-8"))

    data_dir = proc / "dump_tensor_data"
    wanted = {f"{name}." for name in kept}
    for path in _files(data_dir) if data_dir.is_dir() else []:
        record, _ = _record(path.name)
        if record not in records:
            raise CutError(f"{path}: a tensor file of no dump.json record")
        if f"{record}." in wanted:
            _copy(path, dst / rel / "dump_tensor_data" / path.name)
    others = sorted(p.name for p in proc.iterdir()) != sorted(
        ["construct.json", "dump.json", "stack.json", *(["dump_tensor_data"] if data_dir.is_dir() else [])]
    )
    if others:
        raise CutError(f"{proc}: unexpected entries")
    return kept


def _msprobe_case(src: Path, dst: Path, calls: tuple[int, ...], report: CaseReport) -> None:
    for task in ("tensor", "statistics"):
        task_src, task_dst = src / task, dst / task
        names: dict[str, set[str]] = {}
        for side in ("golden", "test"):
            names[side] = _msprobe_side(task_src / side, task_dst / side, calls)
            report.notes.append(f"{_side_note(task_dst, side)}, {len(names[side])} dump.json records")
            _copy(task_src / f"{side}_config.json", task_dst / f"{side}_config.json")
            _run_json(task_src / f"{side}_run.json", task_dst / f"{side}_run.json", calls)
        (table,) = sorted((task_src / "compare").glob("*.csv"))

        def keep(row: dict[str, str], names: dict[str, set[str]] = names) -> bool:
            npu, bench = _record(row["NPU Name"]), _record(row["Bench Name"])
            if (npu[0] in names["test"]) != (bench[0] in names["golden"]):
                raise CutError(f"{row['NPU Name']}: one side of the row is kept, the other cut")
            return npu[0] in names["test"]

        kept_rows = _filter_csv(table, task_dst / "compare" / table.name, keep, "NPU Name")
        report.notes.append(f"`{task}/compare/{table.name}`: {kept_rows} rows")


# --- the whole set ------------------------------------------------------------------------------


def _cut(source: Path, out: Path) -> list[CaseReport]:
    reports = []

    report = CaseReport("msit-torch-2layer", "tokens 0..3 of golden and test")
    _msit_case(source / report.name, out / report.name, ("golden", "test"), MSIT_2LAYER_TOKENS, report)
    reports.append(report)

    for name in ("msit-torch-logits", "msit-torch-stats"):
        report = CaseReport(name, "everything")
        _msit_case(source / name, out / name, ("golden", "test"), None, report)
        reports.append(report)

    report = CaseReport(
        "msit-torch-12layer-vs-atb",
        "tokens 0 and 1 of golden, test_torch_bf16 and test_atb; the ATB layer/ and model/ topology"
        " unchanged",
    )
    sides = ("golden", "test_torch_bf16", "test_atb")
    _msit_case(source / report.name, out / report.name, sides, MSIT_12LAYER_TOKENS, report)
    reports.append(report)

    report = CaseReport(
        "msprobe-L0",
        "calls 0 and 1 (`...forward.0`, `...forward.1`: tokens 0 and 1) of both tasks and both sides",
    )
    _msprobe_case(source / report.name, out / report.name, MSPROBE_CALLS, report)
    reports.append(report)

    return reports


def _side_note(case: Path, side: str) -> str:
    """One side's line in MANIFEST.md, from the output alone (so a re-cut of the output matches)."""
    files, size = _size(case / side)
    name = f"{case.name}/{side}" if case.name in ("tensor", "statistics") else side
    return f"`{name}/`: {files} files, {size:,} bytes"


def _size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _manifest(out: Path, reports: list[CaseReport]) -> str:
    lines = [
        *MANIFEST_HEAD.format(limit=SIZE_LIMIT // 1_000_000).splitlines(),
        "| case | kept | files | bytes |",
        "|---|---|---|---|",
    ]
    total_files = total_bytes = 0
    for report in reports:
        files, size = _size(out / report.name)
        total_files += files
        total_bytes += size
        lines.append(f"| `{report.name}/` | {report.kept} | {files} | {size:,} |")
    lines += [
        f"| **total** (without this file) | | {total_files} | {total_bytes:,} |",
        "",
    ]
    for report in reports:
        lines += [f"## `{report.name}/`", "", *[f"- {note}" for note in report.notes], ""]
    return "\n".join(lines)


def _default_source() -> Path:
    override = os.environ.get("TUI_ACC_REFERENCE")
    return Path(override) if override else REPO.parent / "shared" / "reference"


def make(source: Path, output: Path) -> int:
    """Build the compact set from source into output (replaced only when complete); returns its size."""
    source, output = source.resolve(), output.resolve()
    if not (source / "MANIFEST.md").is_file():
        raise CutError(f"{source}: no MANIFEST.md; not a reference set")
    if output == source or source in output.parents:
        raise CutError(f"{output}: the output may not be the source or lie inside it")
    _mkdirs(output.parent)
    build = Path(tempfile.mkdtemp(prefix=f".{output.name}.new-", dir=output.parent))
    try:
        build.chmod(DIR_MODE)
        reports = _cut(source, build)
        _write(build / "MANIFEST.md", _manifest(build, reports).encode("utf-8"))
        _, size = _size(build)
        if size > SIZE_LIMIT:
            raise CutError(f"the compact set is {size:,} bytes, over the {SIZE_LIMIT:,} limit")
        if output.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old-", dir=output.parent))
            output.rename(old / output.name)
            build.rename(output)
            shutil.rmtree(old)
        else:
            build.rename(output)
    finally:
        if build.exists():
            shutil.rmtree(build)
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="the full reference set (default: $TUI_ACC_REFERENCE, else ../shared/reference)",
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="where to write (default: tests/data/reference)"
    )
    args = parser.parse_args(argv)
    source = args.source if args.source is not None else _default_source()
    try:
        size = make(source, args.output)
    except (CutError, OSError, KeyError, ValueError) as exc:
        print(f"make_test_data: {exc}", file=sys.stderr)
        return 1
    print(f"{args.output}: {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
