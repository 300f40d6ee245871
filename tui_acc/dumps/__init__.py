"""Dump readers: discover what a root holds and index it without loading tensor data.

``open_dump`` detects the format from names alone and hands the root to that reader, which
raises DumpError with a message naming the path and what it expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tui_acc.dumps import single
from tui_acc.dumps.fs import folder_problem
from tui_acc.dumps.model import DumpError, DumpIndex, Node, NodeTree, Problem, TensorRef
from tui_acc.dumps.msit import atb_dump as msit_atb
from tui_acc.dumps.msit import torch_dump as msit_torch
from tui_acc.dumps.msprobe import atb_csv as msprobe_atb
from tui_acc.dumps.msprobe import atb_probe as msprobe_atb_probe
from tui_acc.dumps.msprobe import debug as msprobe_debug
from tui_acc.dumps.msprobe import dump as msprobe
from tui_acc.dumps.msprobe import graph as msprobe_graph

if TYPE_CHECKING:
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


def __getattr__(name: str) -> object:
    """``load_tensor`` and ``TensorLoadError``, imported when first asked for: indexing reads no
    tensor, and the tensor readers import numpy (0.1 s before the TUI's first frame)."""
    if name in ("load_tensor", "TensorLoadError"):
        from tui_acc.dumps import tensors

        return getattr(tensors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EXPECTED = (
    "an msit torch dump (model_tree.json, torch_tensors/ or msit_dump_*/torch_tensors/), "
    "an msit ATB dump (tensors/{device}_{pid}/ or msit_dump_*/tensors/), "
    "an msprobe dump (step*/rank*|proc*/dump.json or debug.json), an msprobe graph-mode dump "
    "(step*/rank*|pid*/dump_tensor_data/ or a dump.json alone), an msprobe ATB dump (statistic.csv), "
    "msprobe's ATB probe dump (atb_dump_data/data/{device}_{pid}/), "
    "an SGLang dumper folder (step=*___rank=*___dump_index=*___name=*...pt), "
    "or a single tensor file (.pth, .pt, .bin)"
)


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
    if not root.exists():
        raise DumpError(f"{root}: no such file or directory")
    blocked = folder_problem(root, "not read") if root.is_dir() else None
    if blocked:  # every reader's marks would be unseen in it: say why, not "not a dump"
        raise DumpError(f"{root}: {blocked}")
    if root.is_dir() and next(root.iterdir(), None) is None:  # not a list of every format it is not
        raise DumpError(f"{root}: this folder is empty: give the folder a dumper wrote its files into")
    if msprobe_atb.claims(root):
        return msprobe_atb.read(root, follow_links=follow_links)
    if msprobe_atb_probe.claims(root):
        return msprobe_atb_probe.read(root, token_offset=token_offset, rank=rank, follow_links=follow_links)
    if single.claims(root):
        return single.read(root, follow_links=follow_links)
    torch_like, atb_like = msit_torch.claims(root), msit_atb.claims(root)
    if torch_like and atb_like:
        raise DumpError(
            f"{root}: holds both an msit torch dump and an msit ATB dump; "
            "pass the torch_tensors/ or the tensors/ folder of the one you mean"
        )
    if torch_like:
        return msit_torch.read(root, rank=rank, follow_links=follow_links)
    if atb_like:
        return msit_atb.read(root, token_offset=token_offset, rank=rank, follow_links=follow_links)
    if msprobe_graph.claims(root):  # before msprobe: its dump.json has no construct.json beside it
        return msprobe_graph.read(root, rank=rank, follow_links=follow_links)
    if msprobe.claims(root):
        return msprobe.read(root, rank=rank, follow_links=follow_links)
    if msprobe_debug.claims(root):
        return msprobe_debug.read(root, rank=rank, follow_links=follow_links)
    from tui_acc.dumps.sglang import (
        dump as sglang,  # here: its gather rules import numpy, which no other layout needs
    )

    if sglang.claims(root):  # last: it lists every folder right below the root, looking for an experiment
        return sglang.read(root, rank=rank, follow_links=follow_links)
    if root.is_file():
        return single.read(root, follow_links=follow_links)  # says which tensor files it reads
    raise DumpError(f"{root}: not a dump tui-acc can read; expected {EXPECTED}")
