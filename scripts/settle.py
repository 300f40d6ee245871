"""Benchmarks measure dumps that have settled: tui-acc reads (does not memory-map) a file changed in
the last few seconds (tui_acc/dumps/fs.py, SETTLED_SECONDS), so freshly generated files are
dated back first, as a dump a user opens minutes after the run would be."""

from __future__ import annotations

import os
from pathlib import Path

AGE_SECONDS = 3600


def settle(root: Path) -> None:
    """Date every file below ``root`` an hour back."""
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, (stat.st_atime - AGE_SECONDS, stat.st_mtime - AGE_SECONDS))
