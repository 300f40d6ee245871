"""Dump readers: discover what a root holds and index it without loading tensor data."""

from __future__ import annotations

from pathlib import Path

from tui_acc.dumps import msit_atb, msit_torch
from tui_acc.dumps.model import DumpError, DumpIndex, Node, NodeTree, Problem, TensorRef
from tui_acc.dumps.tensors import TensorLoadError, load_tensor

__all__ = [
    "DumpError",
    "DumpIndex",
    "Node",
    "NodeTree",
    "Problem",
    "TensorLoadError",
    "TensorRef",
    "load_tensor",
    "open_dump",
]

_READERS = (msit_torch, msit_atb)


def open_dump(path: str | Path) -> DumpIndex:
    """Detect the format of ``path`` and index it; raises DumpError saying what was expected."""
    root = Path(path).expanduser()
    for reader in _READERS:
        if reader.looks_like(root):
            return reader.read(root)
    # Let the reader explain what it expected; with one format this is the whole story.
    return msit_torch.read(root)
