"""Writing frames to CSV: atomically, and never over a file the user already has."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import polars as pl

from tui_acc.atomic import temp_beside


class ExportError(Exception):
    """The CSV could not be written; the message names the file and the reason."""


def write_csv(frame: pl.DataFrame, path: Path, overwrite: bool = False) -> Path:
    """Write ``frame`` to ``path`` via a temporary file and a rename, so no half file is left."""
    path = path.expanduser()
    if path.exists() and not overwrite:
        raise ExportError(f"{path}: already exists; not overwritten")
    try:
        fd, tmp = temp_beside(path)
    except OSError as exc:
        raise ExportError(f"{path}: cannot write here ({exc.strerror or exc})") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            frame.write_csv(handle, float_precision=None)
        if not overwrite and path.exists():  # appeared while we wrote: keep theirs
            raise ExportError(f"{path}: already exists; not overwritten")
        tmp.replace(path)
    except OSError as exc:
        raise ExportError(f"{path}: write failed ({exc.strerror or exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path.resolve()


def fresh_path(directory: Path, stem: str, now: datetime | None = None) -> Path:
    """A file name in ``directory`` that does not exist yet: ``{stem}-{YYYYmmdd-HHMMSS}[-n].csv``."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = directory / f"{stem}-{stamp}.csv"
    n = 1
    while candidate.exists():
        candidate = directory / f"{stem}-{stamp}-{n}.csv"
        n += 1
    return candidate
