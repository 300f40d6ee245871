"""Execution order from data flow, for a dump whose file times were lost (a copy without ``cp -a``).

Why files are opened at index time here: once the times are gone, nothing in a listing tells
which of two sibling modules ran first (msit's ``model_tree.json`` lists them as ``__init__``
declares them), and the engine's "first failing operator", and the input verdict of a module
called with keyword arguments (judged by the sibling before it), depend on that order. What is
left is what the files hold: a module's input that is, bit for bit, another module's output was
made by it, so that module ran first. The cost is kept bounded: one token (the one the reader
samples), only when the times are lost, and per file only its zip directory (a few hundred bytes:
``torchfile.storage_digest``); tensor data is read only for records saved without a CRC whose sizes match a
file of the other role. ``scripts/bench_dataflow_order.py`` measures it.

A value tells an order only when one module made it: the modules holding it as an output, less
those holding it as an input as well (an identity or in-place module passes it on, it did not
make it), must be one module and its ancestors (a parent returns its last child's output). Then
that innermost module ran before every module reading the value. Each such pair is lifted to the
two siblings under their lowest common ancestor, and each parent's children are sorted
topologically, keeping ``model_tree.json``'s order wherever the data flow says nothing (a cycle,
which a coincidence or a module called twice can make, is broken in that order too).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING

from tui_acc.dumps.model import NodeTree, Order, TensorRef
from tui_acc.dumps.policy import LoadPolicy

if TYPE_CHECKING:
    from tui_acc.dumps.torchfile.storage_digest import StorageListing

Edge = tuple[str, str]  # (ran first, ran after)


def order_by_data_flow(
    tree: NodeTree, nodes: Mapping[str, list[TensorRef]], policy: LoadPolicy, noun: str = "modules"
) -> Order | None:
    """Sort ``tree``'s siblings by the data flow between ``nodes``' files (one token's).

    Returns the order (``DumpIndex.order_source`` and ``order_is_execution``), or None (tree
    untouched) when the files show no producer of any input, or no parent has two dumped children
    to order.

    The order is execution order only when the data flow fixed every pair of neighbouring
    dumped siblings: the known producer-before-consumer pairs are a subset of the real ones, so
    the run's order is one of their topological orders; when only one exists, it is the run's. Any
    pair left to ``model_tree.json`` (``q_proj`` and ``v_proj`` read the same input and feed no
    module directly) may not be, and a module after an unrelated one may have run first.
    """
    edges = producer_edges(tree, nodes, policy)
    if not edges:
        return None
    before = _lift(tree, edges)
    dumped = _with_ancestors(tree, (name for name, refs in nodes.items() if refs))
    placed = ambiguous = 0
    for node in tree.nodes.values():
        if len(node.children) < 2:
            continue
        pairs = before.get(node.name, set())
        node.children[:] = stable_topological(node.children, pairs)
        counted = [child for child in node.children if child in dumped]
        if len(counted) >= 2:
            placed += placed_count(node.children, counted, pairs)
            ambiguous += len(counted)
    if ambiguous == 0:
        return None
    if placed == ambiguous:
        return Order(f"data flow ({placed} of {ambiguous} {noun} with siblings placed by it)", execution=True)
    return Order(
        f"data flow and model_tree.json ({placed} of {ambiguous} {noun} with siblings placed by data flow, "
        "the rest in model_tree.json's order)",
        execution=False,
    )


def producer_edges(
    tree: NodeTree,
    nodes: Mapping[str, list[TensorRef]],
    policy: LoadPolicy,
    maker: Callable[[set[str]], str | None] | None = None,
) -> set[Edge]:
    """(producer, consumer) pairs: the innermost module that made a value, and each that read it.
    Files are opened as ``policy`` allows; one it refuses, or that is no torch archive, says nothing.

    ``maker`` picks the one that made a value among those holding it as an output (and not as an
    input), or None when it cannot be told; by default the deepest, when they are one module and
    its ancestors in ``tree``."""
    # imported here: the graph helpers below are every launch's (msprobe's graph order), the zip and
    # hash modules this one needs are not (the first screen's imports)
    from tui_acc.dumps.torchfile.storage_digest import list_storage

    pick = maker or (lambda makers: _innermost_maker(tree, makers))
    listed: list[tuple[str, str, StorageListing]] = []
    for name, refs in nodes.items():
        for ref in refs:
            if ref.role in ("input", "output") and ref.has_data and not ref.parts:
                listing = list_storage(ref.location, policy)
                if listing is not None:
                    listed.append((name, ref.role, listing))
    sizes: dict[str, set[tuple[int, ...]]] = {"input": set(), "output": set()}
    for _, role, listing in listed:
        sizes[role].add(listing.sizes)
    made_by: dict[object, set[str]] = {}
    read_by: dict[object, set[str]] = {}
    for name, role, listing in listed:
        other = "output" if role == "input" else "input"
        if listing.sizes not in sizes[other]:  # no file of the other role is as large: no match
            continue
        identity = listing.identity(policy)
        if identity is not None:
            (made_by if role == "output" else read_by).setdefault(identity, set()).add(name)
    edges: set[Edge] = set()
    for value, readers in read_by.items():
        producer = pick(made_by.get(value, set()) - readers)
        if producer is not None:
            edges.update((producer, reader) for reader in readers if reader != producer)
    return edges


def _innermost_maker(tree: NodeTree, makers: set[str]) -> str | None:
    """The deepest of ``makers`` when they are one module and its ancestors; else None (two
    unrelated modules made the same bytes: a constant, a coincidence; which one fed the reader
    cannot be told)."""
    if not makers:
        return None
    chain = sorted(makers, key=lambda name: tree.nodes[name].depth)
    for outer, inner in pairwise(chain):
        if not tree.is_ancestor(outer, inner):
            return None
    return chain[-1]


def _lift(tree: NodeTree, edges: Iterable[Edge]) -> dict[str, set[Edge]]:
    """Each edge as an order between the two siblings (under their lowest common ancestor) that
    hold its ends; an edge between a module and its own ancestor orders nothing."""
    before: dict[str, set[Edge]] = {}
    for first, then in edges:
        if first not in tree.nodes or then not in tree.nodes:
            continue
        down_first, down_then = _path_from_root(tree, first), _path_from_root(tree, then)
        common = 0
        while common < min(len(down_first), len(down_then)) and down_first[common] == down_then[common]:
            common += 1
        if 0 < common < min(len(down_first), len(down_then)):  # neither is the other's ancestor
            before.setdefault(down_first[common - 1], set()).add((down_first[common], down_then[common]))
    return before


def _path_from_root(tree: NodeTree, name: str) -> list[str]:
    path: list[str] = []
    current: str | None = name
    while current is not None and len(path) <= len(tree.nodes):  # bounded, should a tree loop
        path.append(current)
        current = tree.nodes[current].parent
    return path[::-1]


def stable_topological(children: list[str], pairs: set[Edge]) -> list[str]:
    """``children`` sorted so that every pair's first comes before its second, otherwise in their
    given order: at each step the earliest child (given order) whose predecessors are all placed."""
    index = {child: i for i, child in enumerate(children)}
    after: dict[str, list[str]] = {child: [] for child in children}
    waiting = dict.fromkeys(children, 0)
    for first, then in pairs:
        after[first].append(then)
        waiting[then] += 1
    ready = [(index[c], c) for c in children if waiting[c] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(children):
        if not ready:  # a cycle: the data flow contradicts itself; the earliest unplaced goes next
            rest = min((c for c in children if c not in placed), key=index.__getitem__)
            heapq.heappush(ready, (index[rest], rest))
        _, child = heapq.heappop(ready)
        if child in placed:
            continue
        placed.add(child)
        order.append(child)
        for then in after[child]:
            waiting[then] -= 1
            if waiting[then] == 0 and then not in placed:
                heapq.heappush(ready, (index[then], then))
    return order


def placed_count(order: list[str], counted: list[str], pairs: set[Edge]) -> int:
    """How many of ``counted`` (in ``order``) the data flow puts where they are: each neighbour
    among ``counted`` is reached from it, or reaches it, through pairs the order keeps."""
    position = {child: i for i, child in enumerate(order)}
    forward: dict[str, list[str]] = {}
    for first, then in pairs:
        if position[first] < position[then]:
            forward.setdefault(first, []).append(then)
    fixed = [_reaches(a, b, forward, position) for a, b in pairwise(counted)]
    return sum((i == 0 or fixed[i - 1]) and (i == len(counted) - 1 or fixed[i]) for i in range(len(counted)))


def _reaches(start: str, goal: str, forward: dict[str, list[str]], position: dict[str, int]) -> bool:
    """Whether ``goal`` follows ``start`` through kept pairs (which only go forward in the order)."""
    stack, seen = [start], {start}
    while stack:
        for then in forward.get(stack.pop(), []):
            if then == goal:
                return True
            if then not in seen and position[then] < position[goal]:
                seen.add(then)
                stack.append(then)
    return False


def _with_ancestors(tree: NodeTree, names: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for name in names:
        while name in tree.nodes and name not in found:
            found.add(name)
            parent = tree.nodes[name].parent
            if parent is None:
                break
            name = parent
    return found
