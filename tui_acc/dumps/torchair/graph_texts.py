"""Which graph text describes each graph of a GE dump, read once per dump and kept.

GE names the model folder after the graph (``graph_2``), which is the graph text's
``dynamo_original_graph_2_…``; where names do not settle it (a renamed folder, several texts of one
id), the text holding most of the ops the graph ran, then the one whose output shapes the files'
headers agree with. The pairing reads it to pair ops; a replay reads an op's attributes from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from tui_acc.dumps.model import DumpError, DumpIndex, Problem
from tui_acc.dumps.torchair.ge_dump import graph_files
from tui_acc.dumps.torchair.graph_text import GraphOp, GraphText, read_graph

_SHAPE_SAMPLES = 8  # ops whose output shapes tell two texts of the same ops apart
# (dump root, rank, each graph text's name, size and time) -> (texts by graph, notes)
_CacheKey = tuple[str, int | None, tuple[tuple[str, int, int], ...]]
_cache: dict[_CacheKey, tuple[dict[str, GraphText], tuple[str, ...]]] = {}
_lock = threading.Lock()


def texts_by_graph(index: DumpIndex, notes: list[str] | None = None) -> dict[str, GraphText]:
    """Each GE graph (model folder) of ``index`` -> its graph text; what could not be matched is said
    in ``notes``, a text that cannot be read in ``index.problems`` (once)."""
    paths = graph_files(index)
    key = (str(index.root), index.rank, tuple(_identity(path) for path in paths))
    with _lock:  # one reader per dump: the pairing and a worker's replay may ask at once
        if key not in _cache:
            said: list[str] = []
            _cache[key] = (_matched(index, paths, said), tuple(said))
        found, said_then = _cache[key]
    if notes is not None:
        notes.extend(said_then)
    return found


def op_of(index: DumpIndex, node: str) -> GraphOp | None:
    """The graph text's op for a GE dump's node (``graph_2/MatMulV2_13``); None where no text holds it
    (a fused op, an op GE inserted)."""
    graph, _, name = node.partition("/")
    text = texts_by_graph(index).get(graph)
    return text.ops.get(name) if text is not None else None


def split_fused(name: str, ops: Mapping[str, GraphOp | None]) -> list[GraphOp]:
    """The ops whose names run together make ``name`` (``Add_2Cast_9ConcatV2``), the longest name at
    each point; empty where the names do not make up all of it. An op known by name only (no graph
    text) is described by its name."""
    found: list[GraphOp] = []
    position = 0
    while position < len(name):
        rest = name[position:]
        length = next((n for n in range(len(rest), 0, -1) if rest[:n] in ops), 0)
        if not length:
            return []
        op = ops[rest[:length]] or GraphOp(rest[:length], "", [], [], [], [])
        found.append(op)
        position += length
    return found if len(found) > 1 else []


def constituents(index: DumpIndex, node: str) -> list[GraphOp]:
    """A fused op's constituents in the graph text (``graph_2/SwishMul_8``: Swish, then Mul_8); empty
    where the node is an op of the text, or its name is not made of the text's op names."""
    graph, _, name = node.partition("/")
    text = texts_by_graph(index).get(graph)
    if text is None or name in text.ops:
        return []
    return split_fused(name, text.ops)


def first_run(index: DumpIndex, graph: str) -> int | None:
    """The token of ``graph``'s first run in ``index`` (None: it never ran there)."""
    return next((token for token, (ran, _) in sorted(index.runs.items()) if ran == graph), None)


def _identity(path: Path) -> tuple[str, int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (path.name, -1, -1)
    return (path.name, stat.st_size, stat.st_mtime_ns)


def _matched(index: DumpIndex, paths: list[Path], notes: list[str]) -> dict[str, GraphText]:
    texts = _readable(index, paths, notes)
    found: dict[str, GraphText] = {}
    for graph in index.tree.children(index.tree.root):
        named = [t for t in texts if graph in (t.name, f"graph_{t.graph_id}")]
        ops = {index.stable_name(n) for n in index.tree.children(graph)}
        candidates = [t for t in named if ops & t.ops.keys()] or texts

        def fit(text: GraphText, ops: set[str] = ops, graph: str = graph) -> tuple[int, int]:
            common = ops & text.ops.keys()
            return len(common), _shapes_agreeing(index, graph, text, common) if common else 0

        # the header reads of fit are for telling texts apart: one candidate needs none
        best = candidates[0] if len(candidates) == 1 else max(candidates, key=fit, default=None)
        if best is not None and ops & best.ops.keys():
            found[graph] = best
        else:
            notes.append(f"GE graph {graph}: no graph text (dynamo_original_graph_*.txt) holds its ops")
    return found


def _readable(index: DumpIndex, paths: list[Path], notes: list[str]) -> list[GraphText]:
    texts = []
    for path in paths:
        try:
            texts.append(read_graph(path, index.load_policy))
        except DumpError as exc:
            index.problems.append(Problem(str(path), str(exc).removeprefix(f"{path}: ")))
    if not texts:
        notes.append(f"{index.root}: no readable graph text (dynamo_original_graph_*.txt); nothing is paired")
    return texts


def _shapes_agreeing(index: DumpIndex, graph: str, text: GraphText, common: Iterable[str]) -> int:
    """How many of a few ops have, in ``graph``'s first run, the output shape the graph text gives."""
    from tui_acc.dumps.torchair.ge_file import GeDumpError, read_file_header

    first = first_run(index, graph)
    if first is None:
        return 0
    agreeing = 0
    for name in sorted(common)[:_SHAPE_SAMPLES]:
        refs = index.tokens[first].get(f"{graph}/{name}", [])
        shapes = text.ops[name].output_shapes
        if not refs or not shapes:
            continue
        try:
            header = read_file_header(refs[0].path, index.load_policy)
        except (GeDumpError, OSError):
            continue
        outputs = header.of("output")
        if outputs:
            agreeing += tuple(outputs[0].original_shape or outputs[0].shape) == shapes[0]
    return agreeing
