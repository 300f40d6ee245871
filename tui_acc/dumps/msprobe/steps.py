"""A serving engine's msprobe dump: one forward pass per step, the steps its tokens.

vllm-ascend (eager) and SGLang (``--msprobe-dump-config``) call ``debugger.start()`` before each
forward pass of the server and ``stop()``/``step()`` after it, so ``step{N}/`` holds one forward:
the prefill step processes the prompt, each decode step one new token. msprobe resets its call
counters at each step, so the records of every step are named alike. A per-request dump
(``request_id``) skips the steps its request was not scheduled in: token k is the k-th step dumped.

See docs/formats.md §3.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, Problem, TensorRef


def merge_steps(
    path: Path,
    steps: Sequence[tuple[int, DumpIndex]],
    notes: Sequence[str],
    problems: Sequence[Problem],
    found: list[int],
) -> DumpIndex:
    """One index whose token k is the k-th of ``steps`` (each holding a single forward pass).

    ``problems``: steps that could not be used (named); ``found``: every step number on disk, so
    that the note tells steps never dumped from steps that were damaged.
    """
    first = steps[0][1]
    tree = NodeTree(root=first.tree.root, nodes={})
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    problems = list(problems)
    stable: dict[str, str] = {}
    between: list[str] = []
    for token, (_, index) in enumerate(steps):
        _add_tree(tree, index.tree)
        tokens[token] = next(iter(index.tokens.values()), {})
        problems += index.problems
        stable.update(index.stable)
        between += index.between_tokens
    numbers = [number for number, _ in steps]
    gaps = found != list(range(found[0], found[0] + len(found)))
    said = (
        f"{path}: each of its {len(steps)} steps holds one forward pass (a serving engine's step per "
        "forward): the steps are the tokens"
        + (
            f"; steps {_ranges(found)} were dumped (a per-request dump skips the steps its request was "
            "not in), so token k is the k-th step dumped"
            if gaps
            else ""
        )
    )
    return replace(
        first,
        tree=tree,
        tokens=tokens,
        problems=problems,
        notes=[*notes, said, *first.notes],
        stable=stable,
        between_tokens=between,
        exec_counts=dict(enumerate(numbers)),
        float_dtypes=frozenset().union(*(index.float_dtypes for _, index in steps)),
        call_tree_doubted=any(index.call_tree_doubted for _, index in steps),
        call_tree_lost=any(index.call_tree_lost for _, index in steps),
        order_source=next((i.order_source for _, i in steps if not i.order_is_execution), first.order_source),
        order_is_execution=all(index.order_is_execution for _, index in steps),
    )


def _add_tree(tree: NodeTree, other: NodeTree) -> None:
    """Every node of ``other`` not yet in ``tree``, under its parent, after its known siblings."""
    for node in other.preorder():
        if node.name in tree.nodes:
            continue
        tree.nodes[node.name] = Node(node.name, node.type, node.parent, node.depth)
        if node.parent is not None:
            tree.nodes[node.parent].children.append(node.name)


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
