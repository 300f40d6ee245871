"""The module tree of one token, each node marked with its verdict."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from tui_acc.dumps.model import NodeTree
from tui_acc.rows import Row
from tui_acc.tui import formatting as fmt
from tui_acc.verdicts.verdict import row_failing as failing


class LayerTree(Tree[str]):
    """Golden module tree; Enter scopes the operator table to a subtree."""

    DEFAULT_CSS = """
    LayerTree { scrollbar-size-vertical: 1; }
    """

    class LayerSelected(Message):
        """The user chose a subtree to look at."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(
        self, tree: NodeTree, present: set[str], partners: dict[str, str] | None = None, **kwargs: object
    ) -> None:
        """``partners``: the test-side name of each node, shown when it differs (an ATB test)."""
        super().__init__(tree.root, data=tree.root, **kwargs)  # type: ignore[arg-type]
        self.model_tree = tree
        self._partners = {g: t for g, t in (partners or {}).items() if g != t}
        self._by_name: dict[str, TreeNode[str]] = {tree.root: self.root}
        self._verdicts: dict[str, bool | None] = {}
        self._local_inside: dict[str, bool] = {}  # where an error starts in the node or below it
        self._own_rows: dict[str, Row] = {}
        self._populate(tree, present)
        self.root.expand()
        self.show_root = True
        self.guide_depth = 2

    _drawn_width = -1  # the width its lines were drawn at

    def on_resize(self, event: events.Resize) -> None:
        """A change of height keeps the lines drawn (the tree's own handler rebuilds every line and
        lays the screen out again on any resize: the operator screen's detail panel changes the
        tree's height operator by operator)."""
        if event.size.width == self._drawn_width:
            event.prevent_default()
            self._line_cache.grow(event.size.height)  # what the tree's own handler does besides
        self._drawn_width = event.size.width

    def _populate(self, tree: NodeTree, present: set[str]) -> None:
        keep = _with_ancestors(tree, present)
        for node in tree.preorder():
            if node.name == tree.root or node.name not in keep or node.parent is None:
                continue
            parent = self._by_name[node.parent]
            has_children = any(child in keep for child in node.children)
            self._by_name[node.name] = parent.add(
                self._label(node.name), data=node.name, allow_expand=has_children, expand=node.depth < 2
            )
        self.root.set_label(self._label(tree.root))

    def _label(self, name: str) -> Text:
        node = self.model_tree.nodes[name]
        passed = self._verdicts.get(name)
        own = self._own_rows.get(name)
        if own is not None:
            letter = own.get("label")
        else:  # a node without rows (the layers' list): "c" only where an error starts inside it
            letter = "contains" if self._local_inside.get(name) else "inherited" if passed is False else None
        mark = fmt.output_mark(passed, letter)
        label = Text.assemble(mark, " ", fmt.styled(fmt.short_name(name), passed))
        if name in self._partners:
            label.append(f" ↔ {fmt.short_name(self._partners[name])}", style="cyan")
        elif node.children:
            label.append(f" {node.type}", style="dim")
        return label

    def set_row(self, row: Row) -> None:
        """Record a node's metrics and refresh its mark and its ancestors' marks."""
        name = row["golden_node"]
        self._own_rows[name] = row
        current: str | None = name
        while current is not None:
            self._verdicts[current] = self._derive(current)
            below = (self._own_rows.get(current) or {}).get("label") == "local"
            children = self.model_tree.children(current)
            self._local_inside[current] = below or any(self._local_inside.get(c, False) for c in children)
            if current in self._by_name:
                self._by_name[current].set_label(self._label(current))
            current = self.model_tree.nodes[current].parent

    def _derive(self, name: str) -> bool | None:
        """Own verdict (verdicts/verdict.py's shown_failing), failing too where anything inside it
        fails: a module never shows ✓ over a failure; for a module with no outputs, the verdicts of
        its children."""
        child_verdicts = [self._verdicts.get(c) for c in self.model_tree.children(name) if c in self._by_name]
        if any(v is False for v in child_verdicts):
            return False
        own = failing(self._own_rows.get(name))
        if own is not None:
            return not own
        if child_verdicts and all(v is True for v in child_verdicts):
            return True
        return None

    def reveal(self, name: str) -> None:
        """Expand the path to ``name`` and put the cursor on it."""
        node = self._by_name.get(name)
        if node is None:
            return
        parent = node.parent
        while parent is not None:
            parent.expand()
            parent = parent.parent
        # Expanding rebuilds the tree lines on the next refresh; only then has the node a line.
        self.call_after_refresh(self._centre_on, node)

    def _centre_on(self, node: TreeNode[str]) -> None:
        """Cursor on ``node``, scrolled to the middle: what is above and below it stays in sight, and
        where it lands does not depend on where the tree was scrolled before."""
        self.move_cursor(node, animate=False)
        if node.line >= 0:
            self.scroll_to(y=max(0, node.line - self.scrollable_content_region.height // 2), animate=False)

    def expanded_names(self) -> frozenset[str]:
        """The open nodes (kept when the user leaves the token, restored by ``expand_only``)."""
        return frozenset(name for name, node in self._by_name.items() if node.is_expanded)

    def expand_only(self, names: frozenset[str]) -> None:
        """Expand exactly the nodes in ``names`` and collapse every other (a token reopened as it was
        left)."""
        for name, node in self._by_name.items():
            if name in names:
                node.expand()
            elif node.is_expanded:
                node.collapse()

    def on_tree_node_selected(self, event: Tree.NodeSelected[str]) -> None:
        """Enter on a layer: ``LayerSelected`` tells the screen to scope the table to it."""
        event.stop()
        if event.node.data is not None:
            self.post_message(self.LayerSelected(event.node.data))


def _with_ancestors(tree: NodeTree, names: set[str]) -> set[str]:
    keep = set()
    for name in names:
        current: str | None = name
        while current is not None and current not in keep:
            keep.add(current)
            current = tree.nodes[current].parent
    return keep
