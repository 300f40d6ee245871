"""stdout held for the report alone while the comparison runs (``report``'s text, ``--json``'s object).

A replay plug-in from the user's config, a library, or a process either starts may write to standard
output by any road: ``print`` (``sys.stdout``), ``sys.__stdout__``, ``os.write(1, ...)``, a child
process inheriting descriptor 1. Redirecting ``sys.stdout`` catches only the first. Here descriptor 1
itself points at stderr until the report is written, and the report goes to a duplicate of the real
stdout made before: whatever else is written lands on stderr, and ``--json``'s stdout stays one
object a script can parse. A file the command line names that is the process's stdout (``--csv
/dev/stdout``) is written to that duplicate too (``ReportStdout.path``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tui_acc.reports.output import Report


@dataclass(frozen=True)
class ReportStdout:
    """Where the report goes: ``stream``; ``path``: a name for the real stdout that ``open`` takes
    (``/dev/fd/N``), or None where stdout was not redirected."""

    stream: TextIO
    path: str | None


def names_stdout(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` is the process's standard output (``/dev/stdout``, the pipe or terminal it
    leads to): asked before ``report_stdout`` points descriptor 1 elsewhere."""
    if path is None:
        return False
    try:
        named, out = Path(path).stat(), os.fstat(1)
    except (OSError, ValueError):
        return False
    return (named.st_dev, named.st_ino) == (out.st_dev, out.st_ino)


@contextlib.contextmanager
def report_stdout() -> Iterator[ReportStdout]:
    """Within: descriptor 1 and ``sys.stdout`` lead to stderr; yields where the report is written.
    Where stdout is not the process's descriptor 1 (a test's captured stream, a closed stdout), only
    ``sys.stdout`` is redirected and the report goes to the stdout that was."""
    real = sys.stdout
    saved = _duplicate_of_descriptor_1(real)
    if saved is None:
        with contextlib.redirect_stdout(sys.stderr):
            yield ReportStdout(real, None)
        return
    real.flush()
    sys.stderr.flush()
    os.dup2(sys.stderr.fileno(), 1)
    out = open(saved, "w", encoding=real.encoding, errors=real.errors, closefd=False)  # noqa: SIM115
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield ReportStdout(out, f"/dev/fd/{saved}")
    finally:
        try:
            with contextlib.suppress(BrokenPipeError):  # the reader left (``| head``): nothing to tell it
                out.flush()
        finally:
            for stream in {id(s): s for s in (real, sys.__stdout__) if s is not None}.values():
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()  # what a plug-in left in their buffers goes to stderr, before 1 is back
            os.dup2(saved, 1)
            os.close(saved)


def emit_report(report: Report, as_json: bool, out: TextIO, written_csv: object, named_csv: object) -> int:
    """``report`` printed to ``out`` (``output.emit``), the CSV it wrote said by the name the user gave
    (``named_csv``; ``written_csv``: where it went, the real stdout's ``/dev/fd/N`` for ``/dev/stdout``);
    the exit code. A reader that left (``| head``) took the report's start: its own exit code."""
    from dataclasses import replace

    from tui_acc.reports.output import emit

    if report.csv is not None and written_csv != named_csv:
        report = replace(report, csv=str(named_csv))
    try:
        return emit(report, as_json, out)
    except BrokenPipeError:
        return report.exit_code


def _duplicate_of_descriptor_1(stream: TextIO) -> int | None:
    """A new descriptor for the process's stdout where ``stream`` writes to descriptor 1, else None."""
    try:
        if stream.fileno() != 1:
            return None
        sys.stderr.fileno()
        return os.dup(1)
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return None
