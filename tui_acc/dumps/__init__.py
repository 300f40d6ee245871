"""Dump readers: discover what a root holds and index it without loading tensor data.

``open_dump`` detects the format from names alone, asking the readers each tool's package registers
(``registry``), and hands the root to the one that claims it, which raises DumpError with a message
naming the path and what it expected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

# each tool's package imports its readers, and each reader registers itself (registry.py)
from tui_acc.dumps import msit, msprobe, sglang, single, torchair  # noqa: F401
from tui_acc.dumps.fs import NOT_UTF8_PATH, folder_problem, not_utf8, shown
from tui_acc.dumps.hints import did_you_mean, holds_dumps
from tui_acc.dumps.model import (
    ATB_FORMATS,
    MSPROBE_FORMATS,
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    TensorRef,
)
from tui_acc.dumps.registry import ReadOptions, expected, fallback_for, reader_for

if TYPE_CHECKING:
    from tui_acc.dumps.tensors import TensorLoadError, load_tensor

__all__ = [
    "ATB_FORMATS",
    "MSPROBE_FORMATS",
    "DumpError",
    "DumpIndex",
    "Format",
    "Node",
    "NodeTree",
    "Problem",
    "TensorLoadError",
    "TensorRef",
    "load_tensor",
    "open_dump",
]


def __getattr__(name: str) -> object:
    """``load_tensor`` and ``TensorLoadError``, imported when first asked for: indexing reads no
    tensor, and the tensor readers import numpy (0.1 s before the TUI's first frame)."""
    if name in ("load_tensor", "TensorLoadError"):
        from tui_acc.dumps import tensors

        return getattr(tensors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_dump(
    path: str | Path, token_offset: int | None = None, rank: int | None = None, follow_links: bool = False
) -> DumpIndex:
    """Detect the format of ``path`` and index it.

    Args:
        path: whatever folder (or file) the user passed.
        token_offset: ATB only: token = folder - offset, overriding MindIE's automatic alignment.
        rank: which rank folder to read when the dump holds several (default: the first, noted).
        follow_links: whether its files may lead out of it (symlinks, ATB ``data=``); the index's
            ``load_policy`` says so to every later read.
    """
    root = Path(path).expanduser()
    # every path below it would carry those bytes into frames and the terminal: the path as given, and
    # where it leads (a link named in UTF-8, a relative path from a folder that is not)
    for spelled in (str(root), os.path.realpath(root)):
        if not_utf8(spelled):
            raise DumpError(f"{shown(spelled)}: {NOT_UTF8_PATH}")
    if not root.exists():
        raise DumpError(f"{root}: no such file or directory{did_you_mean(root)}")
    blocked = folder_problem(root, "not read") if root.is_dir() else None
    if blocked:  # every reader's marks would be unseen in it: say why, not "not a dump"
        raise DumpError(f"{root}: {blocked}")
    if root.is_dir() and next(root.iterdir(), None) is None:  # not a list of every format it is not
        raise DumpError(f"{root}: this folder is empty: give the folder a dumper wrote its files into")
    options = ReadOptions(token_offset=token_offset, rank=rank, follow_links=follow_links)
    reader = reader_for(root) or fallback_for(root)
    if reader is None:  # the parent of golden/ and test/, say: name them rather than every format
        raise DumpError(holds_dumps(root) or f"{root}: not a dump tui-acc can read; expected {expected()}")
    return reader.read(root, options)
