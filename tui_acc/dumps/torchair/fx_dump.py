"""Reader for TorchAir's FX dump: the FX graph run eagerly, one ``.npy`` per tensor (the golden of a
GE dump; docs/formats.md §7.3).

TorchAir's ``_NpuFxDumper`` (``fx_dumper.py``; msprobe ``set_fx_dump_config`` turns it on) saves each
``call_function`` node's tensors as ``{node}-{target}.INPUT.{i}[.{j}].{time}.npy`` and
``...OUTPUT.{k}.{time}.npy`` (``j``: the i-th argument is a list; ``time`` is ``%Y%m%d%H%M%S%f``,
the same for every file of one call). Layouts::

    {dump}/msprobe_fx_dump/worldsize{W}_global_rank{R}/graph_{n}/{step}/*.npy   (torch_npu > 7.1.0)
    {dump}/msprobe_fx_dump/data_dump/{step + 1}/gm_{time}_dump/*.npy           (7.1.0; older: ./data_dump)

The tree is the model, one node per graph, and the graph's FX nodes in the order they ran
(``graph_1/mm-aten.mm.default``); a node's stable name is its FX name (``mm-aten.mm.default``), the
same operator in every graph. Slots are ``input.{i}``, ``input.{i}.{j}`` and ``output.{k}``, in
numeric order.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tui_acc.dumps.fs import subdir_names
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    Role,
    TensorRef,
    pick_rank,
)
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register
from tui_acc.dumps.torchair.runs import Run, numbered

FORMAT: Format = "torchair-fx"
ROOT = "model"
LOGITS = "logits"  # the stable name every graph's last node shares: its output is that run's logits
_WRAPPERS = ("msprobe_fx_dump", "msit_fx_dump")
RANK_FOLDER = re.compile(r"^worldsize(\d+)_global_rank(\d+)$")
_GRAPH = re.compile(r"^graph_\d+$")
_OLD_GRAPH = re.compile(r"^gm_.*_dump$")
_FILE = re.compile(
    r"^(?P<key>[^/]+?)\.(?P<role>INPUT|OUTPUT)\.(?P<i>\d{1,9})(?:\.(?P<j>\d{1,9}))?\.(?P<time>\d{1,30})\.npy$",
    re.ASCII,
)


def claims(root: Path) -> bool:
    """Whether ``root`` holds an FX dump (names only)."""
    return _layout(root) is not None


def read(root: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index the FX dump at ``root`` (DumpError where it holds none)."""
    layout = _layout(root)
    if layout is None:
        raise DumpError(
            f"{root}: not a TorchAir FX dump (expected worldsize*_global_rank*/graph_*/STEP/*.npy or "
            "data_dump/N/gm_*_dump/*.npy)"
        )
    kind, folders = layout
    notes: list[str] = []
    chosen: int | None = None
    ranks: list[str] = []
    if kind == "new":
        folder, chosen, notes = pick_rank(root, [Path(f) for f in folders], rank)
        ranks = sorted((Path(f).name for f in folders), key=_rank_of) if len(folders) > 1 else []
        runs = _new_runs(str(folder))
    else:
        folder = Path(folders[0])
        runs = _old_runs(str(folder))
    if not runs:
        raise DumpError(f"{folder}: an FX dump folder without a .npy file in any step folder")
    problems: list[Problem] = []
    index = _indexed(root, folder, numbered(runs), problems)
    index.notes += notes
    index.ranks, index.rank = ranks, chosen
    index.policy = LoadPolicy.for_dump(root, follow_links)
    return index


def _indexed(root: Path, folder: Path, runs: dict[int, Run], problems: list[Problem]) -> DumpIndex:
    nodes: dict[str, Node] = {ROOT: Node(ROOT, "model", None, 0)}
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    stable: dict[str, str] = {}
    for token, run in runs.items():
        if run.graph not in nodes:
            nodes[run.graph] = Node(run.graph, "graph", ROOT, 1)
            nodes[ROOT].children.append(run.graph)
        found: dict[str, list[TensorRef]] = {}
        started: dict[str, int] = {}
        for name in run.names:
            matched = _FILE.match(name)
            if matched is None:
                if name.endswith(".npy") or "." in name:
                    problems.append(Problem(f"{run.folder}/{name}", _NOT_FX_NAME))
                continue
            key = matched["key"]
            node = f"{run.graph}/{key}"
            slot = _slot(matched)
            role: Role = "input" if matched["role"] == "INPUT" else "output"
            found.setdefault(node, []).append(TensorRef(slot, role, f"{run.folder}/{name}"))
            started[node] = min(started.get(node, int(matched["time"])), int(matched["time"]))
        graph_node = nodes[run.graph]
        for node in sorted(found, key=lambda n: (started[n], n)):
            found[node].sort(key=lambda ref: (ref.role != "input", _numbers(ref.slot)))
            if node not in nodes:
                key = node.split("/", 1)[1]
                nodes[node] = Node(node, key.split("-", 1)[1] if "-" in key else key, run.graph, 2)
                graph_node.children.append(node)
                stable[node] = key
        tokens[token] = found
    logits_hint = None
    for graph in nodes[ROOT].children:
        with_output = [c for c in nodes[graph].children if any(_has_output(tokens, c))]
        if with_output:
            stable[with_output[-1]] = LOGITS
            logits_hint = logits_hint or with_output[-1]
    return DumpIndex(
        root=root,
        data_dir=folder,
        format=FORMAT,
        tree=NodeTree(ROOT, nodes),
        tokens=tokens,
        order_source="file times",
        order_is_execution=True,
        problems=problems,
        stable=stable,
        logits_hint=logits_hint,
        runs={token: (run.graph, run.step) for token, run in runs.items()},
    )


_NOT_FX_NAME = "not an FX dump file name ({node}-{target}.INPUT|OUTPUT.{i}.{time}.npy); skipped"


def npy_shape(path: Path, policy: LoadPolicy) -> tuple[int, ...] | None:
    """The shape a ``.npy`` file's header gives (its first bytes read; no numpy), or None."""
    try:
        with policy.open(path) as handle:
            head = handle.read(_NPY_HEAD)
    except OSError:
        return None
    found = _NPY_SHAPE.search(head)
    if not head.startswith(b"\x93NUMPY") or found is None:
        return None
    return tuple(int(d) for d in found[1].replace(b" ", b"").split(b",") if d)


_NPY_HEAD = 512  # numpy pads its header to a multiple of 64 bytes; a shape fits in the first 512
_NPY_SHAPE = re.compile(rb"'shape':\s*\(([0-9, ]*)\)")


def _has_output(tokens: dict[int, dict[str, list[TensorRef]]], node: str) -> list[bool]:
    return [any(ref.role == "output" for ref in refs.get(node, [])) for refs in tokens.values()]


def _slot(matched: re.Match[str]) -> str:
    role = "input" if matched["role"] == "INPUT" else "output"
    return f"{role}.{int(matched['i'])}" + (f".{int(matched['j'])}" if matched["j"] is not None else "")


def _numbers(slot: str) -> tuple[int, ...]:
    return tuple(int(part) for part in slot.split(".")[1:])


def _rank_of(name: str) -> int:
    matched = RANK_FOLDER.match(name)
    return int(matched[2]) if matched else 0


def _layout(root: Path) -> tuple[str, list[str]] | None:
    """("new", rank folders) or ("old", [the data_dump folder]), from names two levels deep."""
    for base in (root, *(root / name for name in _WRAPPERS)):
        base_s = str(base)
        if RANK_FOLDER.match(base.name) and _holds_graphs(base_s):
            return "new", [base_s]
        children = subdir_names(base_s)
        ranks = [path for name, path in children if RANK_FOLDER.match(name) and _holds_graphs(path)]
        if ranks:
            return "new", ranks
        if base.name == "data_dump" and _holds_old_graphs(base_s):
            return "old", [base_s]
        old = [path for name, path in children if name == "data_dump" and _holds_old_graphs(path)]
        if old:
            return "old", old
    return None


def _holds_graphs(folder: str) -> bool:
    return any(_GRAPH.match(name) for name, _ in subdir_names(folder))


def _holds_old_graphs(folder: str) -> bool:
    for name, path in subdir_names(folder):
        if (
            name.isascii()
            and name.isdigit()
            and any(_OLD_GRAPH.match(inner) for inner, _ in subdir_names(path))
        ):
            return True
    return False


def _new_runs(rank_folder: str) -> list[Run]:
    runs = []
    for graph, graph_path in subdir_names(rank_folder):
        if _GRAPH.match(graph):
            for step, step_path in subdir_names(graph_path):
                if step.isascii() and step.isdigit() and len(step) < 12:
                    runs.append(_run(graph, int(step), step_path))
    return [run for run in runs if run.names]


def _old_runs(data_dump: str) -> list[Run]:
    """``data_dump/{step + 1}/gm_{time}_dump``: the folder counts from 1 (torchair 7.1.0's layout)."""
    runs = []
    for counter, counter_path in subdir_names(data_dump):
        if counter.isascii() and counter.isdigit() and 0 < len(counter) < 12 and int(counter) > 0:
            for graph, graph_path in subdir_names(counter_path):
                if _OLD_GRAPH.match(graph):
                    runs.append(_run(graph, int(counter) - 1, graph_path))
    return [run for run in runs if run.names]


def _run(graph: str, step: int, folder: str) -> Run:
    try:
        with os.scandir(folder) as entries:
            names = tuple(sorted(e.name for e in entries if not e.is_dir()))
    except OSError:
        names = ()
    times = [int(m["time"]) for m in map(_FILE.match, names) if m is not None]
    return Run(graph, step, folder, min(times) if times else None, names)


register(
    DumpReader(
        name="a TorchAir FX dump",
        marks="worldsize*_global_rank*/graph_*/STEP/*.npy or data_dump/N/gm_*_dump/",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=80,  # with the GE reader: a folder holding both dumps is refused, naming both
        pick="msprobe_fx_dump",
    )
)
