"""The model's blocks: the repeated layers a hunt narrows to before it looks at operators."""

from __future__ import annotations

from collections import Counter

from tui_acc.dumps.model import NodeTree


def find_blocks(tree: NodeTree, within: str | None = None) -> list[str]:
    """The children of the node that holds the most children of one type (``model.layers``' decoder
    layers; ATB's ``N_LlamaLayer`` operations), in execution order; empty when no node repeats a type.

    msit's own layer detection wants more than ten children, five of one type (docs/formats.md §4.2): a
    hunt on a two-layer test model must find its layers too, so two of one type suffice here. Ties
    go to the shallower node (a block's own repeated children, heads or experts, are not blocks), and
    only nodes with children of their own count (a layer's repeated Transposes are operators).
    ``within``: only below that node (a TorchAir token's graph: another graph's layers did not run).
    """
    best: tuple[int, int] = (1, 0)  # (count, -depth): at least two of one type
    chosen: list[str] = []
    for node in tree.preorder(within if within in tree.nodes else None):
        # a block holds operators: leaves (a layer's five Transposes) are not blocks
        kinds = Counter(tree.nodes[child].type for child in node.children if tree.nodes[child].children)
        if not kinds:
            continue
        kind, count = kinds.most_common(1)[0]
        if (count, -node.depth) > best:
            best = (count, -node.depth)
            chosen = [child for child in node.children if tree.nodes[child].type == kind]
    return chosen
