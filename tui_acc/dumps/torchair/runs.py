"""Tokens of a TorchAir dump: each run of a compiled graph, numbered in the order the runs happened.

TorchAir compiles one graph per shape (a prefill graph, a decode graph) and counts each graph's runs
on its own: the FX dump's ``graph_N/{step}``, the GE dump's ``{model}/{model_id}/{data_index}``.
A token here is one forward pass: the runs of every graph, ordered by a time stamp in their files'
names (both dumps name each file with the time it was written; a device runs one graph at a time,
so runs do not overlap and any one file's time orders its run: ``one_time`` reads one name), so
that the prefill run is token 0 and the decode graph's step s is token s + 1 in a prefill-then-decode
run. Where no file names a time, runs are ordered by graph, then step. ``DumpIndex.runs`` keeps each token's
graph and step: pairing matches the two sides' graphs by content and their runs by step, and a
re-dump names the step (``dump_step``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tui_acc.dumps.model import Node, NodeTree

SAMPLED = 64  # entries of a run folder looked at for a name saying its time, before listing it all


@dataclass(frozen=True)
class Run:
    """One run of one graph: its label, its step (that graph's own count), its folder, a time one of
    its files names (None: none does), its files' names (empty until listed: readers list a run
    when its token is first asked for), the names files stored under a hash stand for (the GE
    dump's mapping.csv: name on disk -> original name), and what each name says."""

    graph: str
    step: int
    folder: str
    first: int | None
    names: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    # the GE dump: each name read once, (op type, op name, time) or None, in ``names``' order
    parsed: tuple[tuple[str, str, int] | None, ...] = ()

    def original(self, name: str) -> str:
        """The name a file on disk stands for."""
        return self.aliases.get(name, name)


def numbered(runs: Iterable[Run]) -> dict[int, Run]:
    """Token -> run: in time order where every run names a time, else by graph and step."""
    found = list(runs)
    if found and all(run.first is not None for run in found):
        found.sort(key=lambda run: (run.first or 0, run.graph, run.step))
    else:
        found.sort(key=lambda run: (_graph_key(run.graph), run.step))
    return dict(enumerate(found))


def graph_tree(root: str, runs: Mapping[int, Run]) -> NodeTree:
    """The model's tree before any op is known: ``root`` and one node per graph, in the order the
    graphs first ran (each reader adds a graph's ops as its runs are listed: ``add_ops``)."""
    nodes = {root: Node(root, "model", None, 0)}
    for graph in first_runs(runs):
        nodes[graph] = Node(graph, "graph", root, 1)
        nodes[root].children.append(graph)
    return NodeTree(root, nodes)


def first_runs(runs: Mapping[int, Run]) -> dict[str, int]:
    """Each graph's first run: graph -> its token, in token order (a graph runs the same ops every
    time, so its first run tells its ops)."""
    found: dict[str, int] = {}
    for token in sorted(runs):
        found.setdefault(runs[token].graph, token)
    return found


def one_time(folder: str, time_of: Callable[[str], int | None]) -> tuple[bool, int | None]:
    """Whether ``folder`` holds anything, and the time the first dump file name among its first few
    entries says (``time_of``: None for a name that is no dump file's). A device runs one graph at a
    time, so runs do not overlap and any one time orders a run: its other names need not be read to
    number the tokens. None: no name says one, or the folder cannot be listed (then list it whole)."""
    held = False
    try:
        with os.scandir(folder) as entries:
            for looked, entry in enumerate(entries):
                held = True
                if looked >= SAMPLED:
                    break
                time = time_of(entry.name)
                if time is not None and not entry.is_dir():
                    return True, time
    except OSError:
        return True, None
    return held, None


def add_ops(tree: NodeTree, stable: dict[str, str], graph: str, ops: Iterable[tuple[str, str, str]]) -> None:
    """The ops of a run, in the order they ran as (node, type, stable name), that ``tree`` lacks,
    added under their graph copy-on-write (the UI may be walking the tree: ``NodeTree.adopt``). Most
    runs add none: their graph ran before."""
    new = [op for op in ops if op[0] not in tree.nodes]
    if not new:
        return
    grown = tree.copy()
    for node, kind, name in new:
        grown.nodes[node] = Node(node, kind, graph, 2)
        grown.nodes[graph].children.append(node)
        stable.setdefault(node, name)
    tree.adopt(grown)


def described(run: Run) -> str:
    """How a note names a run: ``graph_2 step 1``."""
    return f"{run.graph} step {run.step}"


def _graph_key(label: str) -> tuple[int, str]:
    digits = "".join(ch if "0" <= ch <= "9" else " " for ch in label).split()
    return (int(digits[0][:18]) if digits else 0, label)
