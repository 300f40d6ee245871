"""The ``data=`` aliases msprobe's ATB probe writes instead of a tensor it already saved.

With ``save_child`` and ``filter_level`` 1 or 2, a tensor that is the same graph tensor as one
written earlier in its layer holds no payload, only ``data={ids}_{intensor|outtensor}{j}.bin``
(msprobe ccsrc/atb_probe/atb_probe.cpp:763-768 builds the key, :1621-1624 writes it): the ids
of the operation that saved it, joined by ``_``, and that operation's file name. The key names a
``.bin`` *with its own header* below the same execution folder, not a raw payload file.
With ``filter_level`` 2 a kernel's tensor holds ``data={its own file name}`` (:1612-1615):
the probe did not save it at all.

See docs/formats.md §2.9.
"""

from __future__ import annotations

import re
from pathlib import Path

_KEY = re.compile(r"^(\d+(?:_\d+)*)_(intensor|outtensor)(\d+)\.bin$")
_NODE_DIR = re.compile(r"^(\d+)_")
_WHERE = {"intensor": "before", "outtensor": "after"}  # atb_probe.cpp:1570-1575


def is_self_reference(bin_path: Path, key: str) -> bool:
    """A kernel tensor the probe left out (``filter_level`` 2): ``data=`` names the file itself."""
    return key == bin_path.name


def resolve(bin_path: Path, key: str) -> Path | None:
    """The ``.bin`` an alias key names, or None when ``key`` is not a probe alias or is not there."""
    match = _KEY.match(key)
    if match is None:
        return None
    execution = _execution_folder(bin_path)
    if execution is None:
        return None
    folder = execution
    for op_id in match.group(1).split("_"):
        try:
            found = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(f"{op_id}_"))
        except OSError:
            return None
        if not found:
            return None
        folder = found[0]
    kind, index = match.group(2), match.group(3)
    side = folder / _WHERE[kind]
    exact = side / f"{kind}{index}.bin"
    if exact.is_file():
        return exact
    named = sorted(side.glob(f"{kind}{index}_*.bin"))  # CANN versions that add the parameter name
    return named[0] if named else None


def _execution_folder(bin_path: Path) -> Path | None:
    """``.../{dev}_{pid}/{exec}``: above ``before|after`` and the ``{id}_{name}`` folders."""
    folder = bin_path.parent.parent  # the operation's folder
    while _NODE_DIR.match(folder.name) and not folder.name.isdigit():
        folder = folder.parent
    return folder if folder.name.isdigit() else None
