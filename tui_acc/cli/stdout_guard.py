"""stdout held for the report alone while the comparison runs (``report``'s text, ``--json``'s object).

A replay plug-in from the user's config, a library, or a process either starts may write to standard
output by any road: ``print`` (``sys.stdout``), ``sys.__stdout__``, ``os.write(1, ...)``, a child
process inheriting descriptor 1. Redirecting ``sys.stdout`` catches only the first. Here descriptor 1
itself points at stderr until the report is written, and the report goes to a duplicate of the real
stdout made before: whatever else is written lands on stderr, and ``--json``'s stdout stays one
object a script can parse.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO


@contextlib.contextmanager
def report_stdout() -> Iterator[TextIO]:
    """Within: descriptor 1 and ``sys.stdout`` lead to stderr; yields where the report is written.
    Where stdout is not the process's descriptor 1 (a test's captured stream, a closed stdout), only
    ``sys.stdout`` is redirected and the report goes to the stdout that was."""
    real = sys.stdout
    saved = _duplicate_of_descriptor_1(real)
    if saved is None:
        with contextlib.redirect_stdout(sys.stderr):
            yield real
        return
    real.flush()
    sys.stderr.flush()
    os.dup2(sys.stderr.fileno(), 1)
    out = open(saved, "w", encoding=real.encoding, errors=real.errors, closefd=False)  # noqa: SIM115
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield out
    finally:
        out.flush()
        for stream in {id(s): s for s in (real, sys.__stdout__) if s is not None}.values():
            with contextlib.suppress(OSError, ValueError):
                stream.flush()  # what a plug-in left in their buffers goes to stderr, before 1 is back
        os.dup2(saved, 1)
        os.close(saved)


def _duplicate_of_descriptor_1(stream: TextIO) -> int | None:
    """A new descriptor for the process's stdout where ``stream`` writes to descriptor 1, else None."""
    try:
        if stream.fileno() != 1:
            return None
        sys.stderr.fileno()
        return os.dup(1)
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        return None
