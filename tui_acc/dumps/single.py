"""A single tensor file (``tui-acc report a.pth b.bin``): one token, one node, one tensor."""

from __future__ import annotations

from pathlib import Path

from tui_acc.dumps.model import DumpError, DumpIndex, Format, Node, NodeTree, TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT: Format = "tensor"
SUFFIXES = (".pth", ".pt", ".bin")
NODE = "tensor"


def claims(path: Path) -> bool:
    """A tensor file; other files (msprobe's dump.json, debug.json) are their readers'."""
    return path.is_file() and path.suffix in SUFFIXES


def read(path: Path, follow_links: bool = False) -> DumpIndex:
    """The file as a dump of one token holding one node (``tensor``) with one output; nothing is
    read from it until the comparison loads it.

    Raises:
        DumpError: its suffix is none of ``SUFFIXES``.
    """
    if path.suffix not in SUFFIXES:
        raise DumpError(f"{path}: not a tensor file tui-acc can read (expected {', '.join(SUFFIXES)})")
    tree = NodeTree(root=NODE, nodes={NODE: Node(NODE, path.suffix.lstrip("."), None, 0)})
    ref = TensorRef(slot="output", role="output", location=str(path))
    return DumpIndex(
        root=path,
        policy=LoadPolicy.for_dump(path, follow_links),
        data_dir=path.parent,
        format=FORMAT,
        tree=tree,
        tokens={0: {NODE: [ref]}},
        order_source="single file",
        order_is_execution=True,
    )


register(
    DumpReader(
        name="a single tensor file",
        marks=", ".join(SUFFIXES),
        claims=claims,
        read=lambda root, options: read(root, follow_links=options.follow_links),
        precedence=30,  # by its suffix, before layouts told by folder names (a file below tensors/)
        fallback=True,  # a file no reader claims: its read says which files it reads
    )
)
