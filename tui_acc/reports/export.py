"""Writing a view's frame to a file: CSV, or Excel / parquet by the name's extension; atomically, and
never over a file the user already has (unless told to), never over what is not a file: a device or
a pipe is written in place, a link to nothing is neither followed nor replaced.

Where the rows came from (both dumps, the thresholds, the tui-acc version) goes into the rows
themselves as constant ``source_*`` columns, not into a header or a sidecar: a CSV reader that knows
nothing of comment lines still parses the file, a spreadsheet keeps them through sorting and filtering,
and a file handed on alone still says what it is. They come last, after what the screen shows.
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
    CSV under a name that says otherwise."""
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        if importlib.util.find_spec("xlsxwriter") is None:
            raise ExportError(f"{path}: writing .xlsx needs xlsxwriter: {XLSX_HINT}")
        return write_atomically(path, overwrite, lambda handle: _write_xlsx(frame, handle))
    if suffix == ".parquet":
        return write_atomically(path, overwrite, frame.write_parquet)
    if suffix not in ("", ".csv"):
        raise ExportError(
            f"{path}: tui-acc does not write {suffix} files; name it .csv, .xlsx or .parquet"
            + (" (report --json prints JSON)" if suffix == ".json" else "")
        )
    return write_csv(frame, path, overwrite)


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


def _write_xlsx(frame: pl.DataFrame, handle: IO[bytes]) -> None:
    import polars as pl

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
    frame.write_excel(
        handle,
        worksheet="tui-acc",
        conditional_formats=formats,  # type: ignore[arg-type]
        # every digit the CSV has: the cell holds the full double, "General" shows what fits
        dtype_formats={pl.Float64: "General", pl.Float32: "General"},
        autofit=True,
        freeze_panes="A2",
    )


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
    while os.path.lexists(candidate):
        candidate = directory / f"{stem}-{stamp}-{n}.csv"
        n += 1
    return candidate
