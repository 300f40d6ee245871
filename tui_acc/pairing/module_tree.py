"""A graph's nodes nested under the modules they ran in, where the graph text recorded them.

TorchAir's graph text gives each op the ``nn_module_stack`` of its FX node (when the run set
``export.experimental.enable_record_nn_module_stack``; docs/formats.md §7.2), a dump's own folders
only the graph: this tree puts each graph's nodes under their modules (``graph_2/model.layers.1``,
its type the module's class), so the TUI and ``hunt`` see layers. Execution order is kept: where a
node leaves a module and a later node comes back to it, the module opens again
(``model.layers.0@2``). A node without modules stays under its graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tui_acc.dumps.model import Node, NodeTree

Modules = Sequence[tuple[str, str]]  # (path, class name), outermost first


def nested_by_module(tree: NodeTree, modules_of: Callable[[str], Modules]) -> NodeTree | None:
    """``tree`` (root -> graphs -> nodes) with each graph's nodes under the modules ``modules_of``
    gives them; None where no node has one (the tree stays as it is)."""
    nodes: dict[str, Node] = {tree.root: Node(tree.root, tree.nodes[tree.root].type, None, 0)}
    nested = False
    opened: dict[str, int] = {}
    for graph in tree.children(tree.root):
        nodes[tree.root].children.append(graph)
        nodes[graph] = Node(graph, tree.nodes[graph].type, tree.root, 1)
        chain: list[tuple[str, str]] = []  # the open modules: (path, node name)
        for name in tree.children(graph):
            wanted = list(modules_of(name))
            nested = nested or bool(wanted)
            kept = 0
            while kept < min(len(chain), len(wanted)) and chain[kept][0] == wanted[kept][0]:
                kept += 1
            del chain[kept:]
            for path, kind in wanted[kept:]:
                parent = chain[-1][1] if chain else graph
                module = _unused(nodes, f"{graph}/{path}", opened)
                nodes[module] = Node(module, kind, parent, nodes[parent].depth + 1)
                nodes[parent].children.append(module)
                chain.append((path, module))
            parent = chain[-1][1] if chain else graph
            _add_subtree(tree, name, parent, nodes)
    return NodeTree(tree.root, nodes) if nested else None


def _unused(nodes: dict[str, Node], name: str, opened: dict[str, int]) -> str:
    """``name``, or ``name@2``, ``@3``... the first time it opens again (``opened`` counts: a module
    entered a thousand times costs a thousand lookups, not a million)."""
    n = opened.get(name, 0)
    candidate = name if n == 0 else f"{name}@{n + 1}"
    while candidate in nodes:
        n += 1
        candidate = f"{name}@{n + 1}"
    opened[name] = n + 1
    return candidate


def _add_subtree(tree: NodeTree, name: str, parent: str, nodes: dict[str, Node]) -> None:
    """``name`` (and whatever is below it) under ``parent``, depths from there."""
    stack = [(name, parent)]
    while stack:
        current, above = stack.pop()
        node = tree.nodes[current]
        nodes[current] = Node(current, node.type, above, nodes[above].depth + 1)
        nodes[above].children.append(current)
        stack.extend((child, current) for child in reversed(node.children))
