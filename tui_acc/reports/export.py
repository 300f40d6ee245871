"""Writing a view's frame to a file: CSV, or Excel / parquet by the name's extension; atomically, and
never over a file the user already has (unless told to), never over what is not a file: a device or
a pipe is written in place, a link to nothing is neither followed nor replaced.

Where the rows came from (both dumps, the thresholds, the tui-acc version) goes into the rows
themselves as constant ``source_*`` columns, not into a header: a CSV reader that knows nothing of
comment lines still parses the file, a spreadsheet keeps them through sorting and filtering, and a
file handed on alone still says what it is. They come last, after what the screen shows.

The thresholds are a JSON object of some 600 characters: repeated in every row they buried the table.
They are written once, where each format keeps such things, and ``source_thresholds`` says where:
beside a CSV in ``NAME.thresholds.json`` (a device, a pipe or a link, ``/dev/stdout``, keeps them in
the column), in an Excel file's ``thresholds`` sheet, in a parquet file's metadata (``tui-acc:thresholds``).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import stat
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tui_acc import __version__
from tui_acc.atomic import temp_beside
from tui_acc.dumps.fs import file_kind
from tui_acc.errors import TuiAccError
from tui_acc.session import Comparison

if TYPE_CHECKING:  # polars is imported where a frame is made: the TUI's first frame comes before it
    import polars as pl

# an installable extra, not a dependency: only the .xlsx export needs it (polars writes through it)
XLSX_HINT = "pip install 'tui-acc[xlsx]'"

# provenance too long to repeat in every row: written once, where the format keeps it (module docstring)
ONCE = "source_thresholds"
SIDECAR_SUFFIX = ".thresholds.json"
PARQUET_KEY = "tui-acc:thresholds"
XLSX_SHEET = "thresholds"

# Verdict columns, and the values of them to colour in a spreadsheet (the same words as on screen).
_FAILED = {"verdict": ("fail", "error"), "label": ("local", "contains", "inherited")}
_PASSED = {"verdict": ("pass", "near-tie")}
_BOOLEAN_VERDICTS = ("inputs_passed", "inputs_effective", "outputs_passed")
_RED = {"bg_color": "#FFC7CE", "font_color": "#9C0006", "bold": True}
_GREEN = {"bg_color": "#C6EFCE", "font_color": "#006100"}


class ExportError(TuiAccError):
    """The file could not be written; the message names the file and the reason."""


def provenance(cmp: Comparison) -> dict[str, str]:
    """The constant columns every export carries: which dumps, which thresholds, which tui-acc."""
    return {
        # absolute: the file is read elsewhere, later, from another working directory
        "source_golden": str(cmp.golden.root.resolve()),
        "source_test": str(cmp.test.root.resolve()),
        "source_thresholds": json.dumps(cmp.engine.thresholds.as_dict(), sort_keys=True),
        "source_tui_acc": __version__,
    }


def with_provenance(frame: pl.DataFrame, cmp: Comparison) -> pl.DataFrame:
    """``frame`` with the comparison's ``provenance`` columns (resolves both dumps' roots)."""
    return stamped(frame, provenance(cmp))


def stamped(frame: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """``frame`` with a constant string column per entry of ``columns`` (the source_* columns)."""
    import polars as pl

    return frame.with_columns(pl.lit(value, dtype=pl.String).alias(key) for key, value in columns.items())


def write_export(frame: pl.DataFrame, path: Path, overwrite: bool = False) -> Path:
    """Write ``frame`` to ``path`` as its extension says: ``.csv`` (or none) CSV, ``.xlsx`` Excel
    (verdict cells coloured), ``.parquet`` parquet; any other extension is refused, not written as
    CSV under a name that says otherwise. The thresholds are written once (module docstring)."""
    suffix = path.suffix.lower()
    once = _constant(frame, ONCE)
    if suffix == ".xlsx":
        if importlib.util.find_spec("xlsxwriter") is None:
            raise ExportError(f"{path}: writing .xlsx needs xlsxwriter: {XLSX_HINT}")
        if once is not None:
            frame = _pointing(frame, f"sheet {XLSX_SHEET}")
        return write_atomically(path, overwrite, lambda handle: _write_xlsx(frame, handle, once))
    if suffix == ".parquet":
        if once is None:
            return write_atomically(path, overwrite, frame.write_parquet)
        frame = _pointing(frame, f"parquet metadata {PARQUET_KEY}")
        return write_atomically(
            path, overwrite, lambda h: frame.write_parquet(h, metadata={PARQUET_KEY: once})
        )
    if suffix not in ("", ".csv"):
        raise ExportError(
            f"{path}: tui-acc does not write {suffix} files; name it .csv, .xlsx or .parquet"
            + (" (report --json prints JSON)" if suffix == ".json" else "")
        )
    if once is None or _written_in_place(expanded(path)):
        return write_csv(frame, path, overwrite)
    return _write_csv_and_sidecar(frame, expanded(path), overwrite, once)


def sidecar_of(path: Path) -> Path:
    """Where a CSV's thresholds go, beside it: ``ops.csv`` -> ``ops.thresholds.json``."""
    return path.with_name(path.stem + SIDECAR_SUFFIX)


def _constant(frame: pl.DataFrame, column: str) -> str | None:
    """The one value of a constant string ``column`` (a source_* column); None where it is not one."""
    if column not in frame.columns or frame.height == 0:
        return None
    values = frame[column].unique().to_list()
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


def _pointing(frame: pl.DataFrame, where: str) -> pl.DataFrame:
    """``frame`` whose ``source_thresholds`` says where the thresholds are, in place of them."""
    import polars as pl

    return frame.with_columns(pl.lit(where, dtype=pl.String).alias(ONCE))


def _written_in_place(path: Path) -> bool:
    """Whether ``path`` is a device, a pipe or a link (``/dev/stdout`` is one, into /proc, even where
    the shell sent it to a file): nothing is put beside it."""
    try:
        return not stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _write_csv_and_sidecar(frame: pl.DataFrame, path: Path, overwrite: bool, thresholds: str) -> Path:
    """The CSV, its ``source_thresholds`` naming the sidecar that holds them: neither file is written
    where either is there already, unless ``overwrite``; the sidecar goes again if the CSV fails."""
    sidecar = sidecar_of(path)
    if existing_target(path) and not overwrite:
        raise ExportError(f"{path}: already exists; not overwritten")
    had_sidecar = existing_target(sidecar)
    if had_sidecar and not overwrite:
        raise ExportError(f"{sidecar}: already exists (where {path.name}'s thresholds go); not overwritten")
    pretty = json.dumps(json.loads(thresholds), indent=2, sort_keys=True) + "\n"
    write_atomically(sidecar, overwrite, lambda handle: handle.write(pretty.encode()))
    try:
        return write_csv(_pointing(frame, sidecar.name), path, overwrite)
    except ExportError:
        if not had_sidecar:
            sidecar.unlink(missing_ok=True)
        raise


def write_csv(frame: pl.DataFrame, path: Path, overwrite: bool = False) -> Path:
    """Write ``frame`` to ``path`` via a temporary file and a rename, so no half file is left."""
    return write_atomically(path, overwrite, lambda handle: frame.write_csv(handle, float_precision=None))


def expanded(path: Path) -> Path:
    """``path`` with ``~`` expanded; as typed where ``~user`` names no user (``Path.expanduser``
    raises RuntimeError there: the file is then looked for as named, and not found)."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def existing_target(path: Path) -> bool:
    """Whether something is at ``path`` that an export may replace, given the user's consent: a
    file (or a link to one), or a device or pipe (written in place: ``/dev/stdout``, ``/dev/null``).
    ExportError for what is never written: a folder, a socket, a block device, a link to nothing
    (it is neither followed nor replaced), a name the file system refuses (over 255 bytes)."""
    try:
        path.lstat()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ExportError(f"{path}: cannot write here ({exc.strerror or exc})") from exc
    try:
        mode = path.stat().st_mode
    except OSError as exc:  # a dangling link, a loop of links
        raise ExportError(
            f"{path}: a symbolic link that leads nowhere ({exc.strerror or exc}); not followed, not replaced"
        ) from exc
    if stat.S_ISDIR(mode):
        raise ExportError(f"{path}: is a folder; add a file name")
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise ExportError(f"{path}: is {file_kind(mode)}; not written")
    return True


def write_atomically(path: Path, overwrite: bool, write: Callable[[IO[bytes]], Any]) -> Path:
    """Have ``write`` fill a temporary file beside ``path``, then rename it there: never a half file,
    never over a file that is there unless ``overwrite`` (ExportError names the file and why). A
    regular file is replaced by the rename (a link to one: the file it names); a device or a pipe is
    written in place: a rename would replace the device node itself."""
    path = expanded(path)
    if existing_target(path):
        if not overwrite:
            raise ExportError(f"{path}: already exists; not overwritten")
        if not stat.S_ISREG(path.stat().st_mode):
            return _write_in_place(path, write)
        path = Path(os.path.realpath(path))  # a link stays a link; the file it names is replaced
    try:
        fd, tmp = temp_beside(path)
    except OSError as exc:
        raise ExportError(f"{path}: cannot write here ({exc.strerror or exc})") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            _run(path, write, handle)
        if not overwrite and os.path.lexists(path):  # appeared while we wrote: keep theirs
            raise ExportError(f"{path}: already exists; not overwritten")
        tmp.replace(path)
    except OSError as exc:
        raise ExportError(f"{path}: write failed ({exc.strerror or exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path.resolve()


def _write_in_place(path: Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write to a character device or a FIFO as it is, never creating or replacing anything. Opened
    non-blocking, so a pipe nobody reads is an error rather than a wait without end."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = "no process reads the pipe" if exc.errno == errno.ENXIO else exc.strerror or exc
        raise ExportError(f"{path}: cannot write ({reason})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped for something else since
            raise ExportError(f"{path}: changed while being opened; not written")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            _run(path, write, handle)
    except OSError as exc:
        raise ExportError(f"{path}: write failed ({exc.strerror or exc})") from exc
    return path


def _run(path: Path, write: Callable[[IO[bytes]], Any], handle: IO[bytes]) -> None:
    """``write(handle)``; what the writer raises besides OSError (polars on a stream it cannot
    seek) is an ExportError naming the file, so the TUI stays up and says why."""
    from polars.exceptions import PolarsError

    try:
        write(handle)
    except (PolarsError, ValueError) as exc:
        raise ExportError(f"{path}: write failed ({exc})") from exc


def _write_xlsx(frame: pl.DataFrame, handle: IO[bytes], thresholds: str | None = None) -> None:
    """The view's sheet, verdict cells coloured; the thresholds, one bound a row, in a sheet of their own."""
    import polars as pl
    import xlsxwriter

    formats: dict[str, list[dict[str, object]]] = {}
    for index, column in enumerate(frame.columns):
        rules: list[dict[str, object]] = [
            {"type": "cell", "criteria": "==", "value": f'"{word}"', "format": style}
            for words, style in ((_FAILED.get(column, ()), _RED), (_PASSED.get(column, ()), _GREEN))
            for word in words
        ]
        if column in _BOOLEAN_VERDICTS:
            # "equal to FALSE" would colour the empty cells of rows not judged (Excel: blank = FALSE)
            cell = f"{_column_letters(index)}2"  # the first data row, relative: each row tests its own
            rules = [
                {"type": "formula", "criteria": f"=AND(ISLOGICAL({cell}),NOT({cell}))", "format": _RED},
                {"type": "formula", "criteria": f"=AND(ISLOGICAL({cell}),{cell})", "format": _GREEN},
            ]
        if rules:
            formats[column] = rules
    with xlsxwriter.Workbook(handle) as book:  # polars writes into it and leaves it open
        frame.write_excel(
            book,
            worksheet="tui-acc",
            conditional_formats=formats,  # type: ignore[arg-type]
            # every digit the CSV has: the cell holds the full double, "General" shows what fits
            dtype_formats={pl.Float64: "General", pl.Float32: "General"},
            autofit=True,
            freeze_panes="A2",
        )
        if thresholds is not None:
            bounds = dict(_flattened(json.loads(thresholds)))
            table = pl.DataFrame({"threshold": list(bounds), "value": list(bounds.values())})
            table.write_excel(book, worksheet=XLSX_SHEET, autofit=True)


def _flattened(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """A JSON value as (dotted path, its leaf as JSON text): ``ops.bfloat16.cosine``, ``0.99``."""
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in _flattened(item, f"{prefix}{key}.")]
    if isinstance(value, list):
        return [pair for i, item in enumerate(value) for pair in _flattened(item, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), json.dumps(value))]


def _column_letters(index: int) -> str:
    """A spreadsheet's name of the column at 0-based ``index``: A, ..., Z, AA, ..."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def fresh_path(directory: Path, stem: str, now: datetime | None = None) -> Path:
    """A file name in ``directory`` that does not exist yet: ``{stem}-{YYYYmmdd-HHMMSS}[-n].csv``."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = directory / f"{stem}-{stamp}.csv"
    n = 1
    while os.path.lexists(candidate) or os.path.lexists(sidecar_of(candidate)):
        candidate = directory / f"{stem}-{stamp}-{n}.csv"
        n += 1
    return candidate
