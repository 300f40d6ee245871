"""Files written whole or not at all: a temporary file beside the target, then a rename.

``tempfile.mkstemp`` creates its file readable by its owner only; a CSV or cache written that way
would not be readable by the colleagues the user's umask lets read their files. The temporary
file gets the mode a plain ``open()`` would have given it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it (Linux), else by the set-and-restore dance."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_beside(path: Path, suffix: str = ".tmp") -> tuple[int, Path]:
    """(open descriptor, path) of a new temporary file in ``path``'s folder, with the umask's mode."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd, Path(name)
