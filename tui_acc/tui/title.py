"""The title line's pair of paths, fitted to the terminal: elided in the middle, never cut at the end
(the end of a path, e.g. a re-dump's new folder, is what tells two dumps apart)."""

from __future__ import annotations

from pathlib import Path

ELLIPSIS = "…"
SEPARATOR = "  vs  "
# What the header leaves the pair: Textual's header docks its icon (8 columns) and clock space (10)
# on either side, and the title "tui-acc — " comes first.
HEADER_MARGIN = 28


def elide_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its start and (three quarters) its end."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1) // 4
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + text[len(text) - tail :]


def shown_path(path: Path, cwd: Path) -> str:
    """A path as short as it says the same: relative where it is under the working folder."""
    try:
        return str(path.absolute().relative_to(cwd))
    except ValueError:
        return str(path)


def pair_title(golden: str, test: str, width: int) -> str:
    """``golden  vs  test`` in ``width`` characters; a short path leaves its room to the other."""
    room = max(width - len(SEPARATOR), 2)
    half = room // 2
    if len(golden) <= half:
        test_room = room - len(golden)
    elif len(test) <= room - half:
        test_room = len(test)
    else:
        test_room = room - half
    return (
        f"{elide_middle(golden, room - min(len(test), test_room))}{SEPARATOR}{elide_middle(test, test_room)}"
    )
