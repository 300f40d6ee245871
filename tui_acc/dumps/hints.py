"""What to tell a user whose path is not a dump: the dumps a folder holds one level down (the parent
of ``golden/`` and ``test/``, passed by mistake), or the path a mistyped one was meant to be.

Names only, as the readers' ``claims``: no file is opened, and a large folder is looked at in part.
"""

from __future__ import annotations

import difflib
import itertools
import shlex
from pathlib import Path

from tui_acc.dumps.fs import NOT_UTF8_PATH, not_utf8, shown
from tui_acc.dumps.model import DumpError
from tui_acc.dumps.registry import reader_for

_SUBFOLDERS = 64  # the subfolders asked whether they are dumps: a dump's parent holds a few
_NAMES = 2000  # the names a mistyped one is matched against
# which of two dumps is the golden, said first
_GOLDEN_FIRST = ("golden", "gold", "ref", "base", "fp32", "gpu")


def dumps_inside(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` that a reader claims, by name; none where it cannot be listed."""
    try:
        entries = sorted(p for p in itertools.islice(folder.iterdir(), _SUBFOLDERS) if p.is_dir())
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            claimed = reader_for(entry) is not None
        except DumpError:  # two layouts in one folder: a dump all the same
            claimed = True
        except OSError:
            claimed = False
        if claimed:
            found.append(entry)
    return sorted(found, key=lambda p: not any(word in p.name.lower() for word in _GOLDEN_FIRST))


def holds_dumps(root: Path) -> str | None:
    """What to say about a folder that is no dump but holds some one level down; None where it holds
    none."""
    found = dumps_inside(root)
    if not found:
        return None
    unnamed = [p for p in found if not_utf8(p.name)]
    found = [p for p in found if p not in unnamed]  # no use passing one: such a path is refused
    if not found:
        return f"{shown(str(unnamed[0]))}: a dump whose name is not UTF-8: {NOT_UTF8_PATH}"
    beside = f" ({shown(unnamed[0].name)}/ beside them is named in another encoding)" if unnamed else ""
    names = [f"{p.name}/" for p in found]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"
    if len(found) == 1:
        return f"{root}: not a dump itself; it holds one, {listed}: pass {found[0]}{beside}"
    command = shlex.join(["tui-acc", str(found[0]), str(found[1])])
    if len(found) == 2:
        return f"{root}: not a dump itself; it holds two, {listed}: compare them with {command}{beside}"
    return (
        f"{root}: not a dump itself; it holds {len(found)}, {listed}: pass two of them, golden first "
        f"({command}){beside}"
    )


def near_path(path: Path) -> Path | None:
    """The existing path ``path`` was likely meant to be: each part that does not exist replaced by
    the closest name in its folder (difflib's); None where a part has no close name."""
    try:
        if path.exists():
            return path
    except OSError:
        return None
    if path.parent == path:
        return None
    folder = near_path(path.parent)
    if folder is None or not folder.is_dir():
        return None
    try:
        names = [p.name for p in itertools.islice(folder.iterdir(), _NAMES)]
    except OSError:
        return None
    if path.name in names:
        return folder / path.name
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.5)  # 0.5: "tset" for "test"
    return folder / close[0] if close else None


def did_you_mean(path: Path) -> str:
    """``; did you mean X?`` for a path that does not exist, where a close one does; else ``""``."""
    near = near_path(path)
    return f"; did you mean {near}?" if near is not None and near != path else ""
