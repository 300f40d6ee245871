"""What the replay registry is asked for a node, in order (no tensor data is read, no numpy imported;
a TorchAir GE dump's graph texts are read once per dump, dumps/torchair/graph_texts.py)."""

from __future__ import annotations

from tui_acc.dumps.model import MSPROBE_FORMATS, DumpIndex
from tui_acc.dumps.msprobe.passes import api_of

FUSED = "GE.fused"  # the key of ge_ops.fused: a fused GE op replayed as its constituents


def replay_names(index: DumpIndex, node: str) -> tuple[str | None, str | None]:
    """``(record name, type)``: msprobe's API name (``Functional.linear`` of
    ``Functional.linear.3.forward``) then the node's type; a GE op's type as ``GE.{type}`` (GE's
    ``Add`` is not a torch module called Add), and a fused GE op's type then ``GE.fused``; an FX node's
    type is its aten target already."""
    found = index.tree.nodes.get(node)
    node_type = found.type if found is not None else None
    if index.format in MSPROBE_FORMATS:
        return api_of(node), node_type
    if index.format == "torchair-ge" and node_type:
        from tui_acc.dumps.torchair.graph_texts import fused

        # a fused op: a reference of its own type first (a user's), else its constituents in turn
        return (f"GE.{node_type}", FUSED) if fused(index, node) else (None, f"GE.{node_type}")
    return None, node_type
