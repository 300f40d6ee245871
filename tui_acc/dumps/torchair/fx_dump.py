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
numeric order. As for the GE dump, opening reads one file name per run folder and lists each graph's
first run; a token's files are listed when it is first asked for (runs.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from tui_acc.dumps.fs import NOT_UTF8, not_utf8, shown, subdir_names
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Problem,
    Role,
    TensorRef,
    pick_rank,
)
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register
from tui_acc.dumps.torchair.runs import Run, add_ops, first_runs, graph_tree, numbered, one_time
from tui_acc.lazy import LazyMapping

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
    """The tree from each graph's first run (a graph runs the same nodes every time); every other
    run's files are listed when its token is first asked for, and a node only it ran is added then."""
    tree = graph_tree(ROOT, runs)
    stable: dict[str, str] = {}
    listed: dict[int, dict[str, list[TensorRef]]] = {}

    def calls(token: int) -> dict[str, list[TensorRef]]:
        # once per token: at opening (each graph's first run), else from the tokens' LazyMapping,
        # which builds one token at a time
        if token not in listed:
            run = runs[token]
            found, started = _calls(run, run.names or _listing(run.folder), problems)
            ran = sorted(found, key=lambda n: (started[n], n))
            add_ops(tree, stable, run.graph, ((n, _target(n), n.split("/", 1)[1]) for n in ran))
            listed[token] = found
        return listed[token]

    logits_hint = None
    for graph, first in first_runs(runs).items():  # each graph's first run now: the tree, the logits
        ran = calls(first)
        with_output = [c for c in tree.children(graph) if any(r.role == "output" for r in ran.get(c, []))]
        if with_output:
            stable[with_output[-1]] = LOGITS
            logits_hint = logits_hint or with_output[-1]
    return DumpIndex(
        root=root,
        data_dir=folder,
        format=FORMAT,
        tree=tree,
        tokens=LazyMapping(sorted(runs), calls),
        order_source="file times",
        order_is_execution=True,
        problems=problems,
        stable=stable,
        logits_hint=logits_hint,
        runs={token: (run.graph, run.step) for token, run in runs.items()},
    )


def _calls(
    run: Run, names: Iterable[str], problems: list[Problem]
) -> tuple[dict[str, list[TensorRef]], dict[str, int]]:
    """A run's nodes and their tensors (inputs, then outputs, in numeric order), and the time each
    node's call started; a name that is no FX dump file's said."""
    found: dict[str, list[TensorRef]] = {}
    started: dict[str, int] = {}
    for name in names:
        if not_utf8(name):
            problems.append(Problem(shown(f"{run.folder}/{name}"), NOT_UTF8))
            continue
        matched = _FILE.match(name)
        if matched is None:
            if name.endswith(".npy") or "." in name:
                problems.append(Problem(f"{run.folder}/{name}", _NOT_FX_NAME))
            continue
        node = f"{run.graph}/{matched['key']}"
        role: Role = "input" if matched["role"] == "INPUT" else "output"
        found.setdefault(node, []).append(TensorRef(_slot(matched), role, f"{run.folder}/{name}"))
        started[node] = min(started.get(node, int(matched["time"])), int(matched["time"]))
    for refs in found.values():
        refs.sort(key=lambda ref: (ref.role != "input", _numbers(ref.slot)))
    return found, started


def _target(node: str) -> str:
    """A node's type: its aten target (``graph_1/mm-aten.mm.default`` -> ``aten.mm.default``)."""
    key = node.split("/", 1)[1]
    return key.split("-", 1)[1] if "-" in key else key


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
    return [run for run in runs if run.first is not None or run.names]


def _old_runs(data_dump: str) -> list[Run]:
    """``data_dump/{step + 1}/gm_{time}_dump``: the folder counts from 1 (torchair 7.1.0's layout)."""
    runs = []
    for counter, counter_path in subdir_names(data_dump):
        if counter.isascii() and counter.isdigit() and 0 < len(counter) < 12 and int(counter) > 0:
            for graph, graph_path in subdir_names(counter_path):
                if _OLD_GRAPH.match(graph):
                    runs.append(_run(graph, int(counter) - 1, graph_path))
    return [run for run in runs if run.first is not None or run.names]


def _run(graph: str, step: int, folder: str) -> Run:
    """A run, its time from one file's name (``runs.one_time``): its other names are read when its
    token is first asked for. A folder whose first names say no time is listed whole now."""
    held, time = one_time(folder, _time_of)
    names = _listing(folder) if held and time is None else ()
    if time is None:
        times = [int(m["time"]) for m in map(_FILE.match, names) if m is not None]
        time = min(times) if times else None
    return Run(graph, step, folder, time, names)


def _listing(folder: str) -> tuple[str, ...]:
    """The files' names of a run folder, sorted (none where it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            return tuple(sorted(e.name for e in entries if not e.is_dir()))
    except OSError:
        return ()


def _time_of(name: str) -> int | None:
    matched = _FILE.match(name)
    return int(matched["time"]) if matched else None


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
