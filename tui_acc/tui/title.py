"""The title's pair of paths: as short as they say the same (the header fits them to its width,
``AccApp.format_title``, eliding each in the middle: the end of a path tells two dumps apart)."""

from __future__ import annotations

from pathlib import Path

SEPARATOR = "  vs  "  # between the two paths in ``sub_title``; the header names the sides instead


def shown_path(path: Path, cwd: Path) -> str:
    """A path as short as it says the same: relative where it is under the working folder."""
    try:
        return str(path.absolute().relative_to(cwd))
    except ValueError:
        return str(path)
