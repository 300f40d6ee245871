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
    nodes with children of their own come first (a layer's repeated Transposes are operators).
    ``within``: only below that node (a TorchAir token's graph: another graph's layers did not run).
    """
    start = within if within in tree.nodes else None
    # a block holds operators: a layer's five Transposes are not blocks where anything else repeats;
    # where only leaves repeat (a dump of the layers' outputs alone), they are the blocks
    return _repeated(tree, start, holders_only=True) or _repeated(tree, start, holders_only=False)


def _repeated(tree: NodeTree, start: str | None, holders_only: bool) -> list[str]:
    best: tuple[int, int] = (1, 0)  # (count, -depth): at least two of one type
    chosen: list[str] = []
    for node in tree.preorder(start):
        kinds = Counter(
            tree.nodes[child].type
            for child in node.children
            if tree.nodes[child].children or not holders_only
        )
        if not kinds:
            continue
        kind, count = kinds.most_common(1)[0]
        if (count, -node.depth) > best:
            best = (count, -node.depth)
            chosen = [child for child in node.children if tree.nodes[child].type == kind]
    return chosen
