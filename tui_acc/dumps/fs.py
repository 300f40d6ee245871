"""Directory listing for the readers: cheap (one scandir), and an unreadable folder is just empty."""

from __future__ import annotations

import os
from pathlib import Path


def subdirs(path: Path) -> list[Path]:
    """The folders directly in ``path`` (following symlinks, as dumps made with -symlink need)."""
    return [Path(p) for _, p in subdir_names(str(path))]


def subdir_names(path: str) -> list[tuple[str, str]]:
    """(name, path) of the folders in ``path``, as strings: cheap at 100,000 folders."""
    try:
        with os.scandir(path) as entries:
            return [(e.name, e.path) for e in entries if e.is_dir()]
    except OSError:
        return []
