"""Which graph text describes each graph of a GE dump, read once per dump and kept.

GE names the model folder after the graph (``graph_2``), which is the graph text's
``dynamo_original_graph_2_…``; where names do not settle it (a renamed folder, several texts of one
id), the text holding most of the ops the graph ran, then the one whose output shapes the files'
headers agree with. The pairing reads it to pair ops; a replay reads an op's attributes from it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tui_acc.dumps.model import DumpError, DumpIndex, Problem
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchair.ge_dump import graph_files
from tui_acc.dumps.torchair.graph_text import GraphOp, GraphText, read_graph

_SHAPE_SAMPLES = 8  # ops whose output shapes tell two texts of the same ops apart
_KEPT = 16  # dumps whose matches are kept (a hunt opens a few re-dumps; each reads its texts once)
# (dump root, rank, where its files may lead, its graphs) -> (texts by graph, graphs without one and
# why, problems)
_CacheKey = tuple[str, int | None, LoadPolicy, tuple[str, ...]]
_Matched = tuple[dict[str, GraphText], dict[str, str], tuple[Problem, ...]]
_cache: OrderedDict[_CacheKey, _Matched] = OrderedDict()
_lock = threading.Lock()


def texts_by_graph(index: DumpIndex) -> dict[str, GraphText]:
    """Each GE graph (model folder) of ``index`` -> its graph text (``missing_texts``: those left
    without one); a text that cannot be read is said in ``index.problems``. Read once per dump (its
    root, rank, load policy and graphs; no file is looked at again), the last few dumps kept."""
    return _texts(index)[0]


def missing_texts(index: DumpIndex) -> dict[str, str]:
    """The GE graphs of ``index`` no graph text describes, and why. Against an FX golden, whose
    pairing needs the text, such a graph's runs are not compared (an error); against a GE golden
    its ops pair by name all the same."""
    return _texts(index)[1]


def _texts(index: DumpIndex) -> _Matched:
    key = (str(index.root), index.rank, index.load_policy, tuple(index.tree.children(index.tree.root)))
    with _lock:  # one reader per dump: the pairing and a worker's replay may ask at once
        if key in _cache:
            _cache.move_to_end(key)
        else:
            missing: dict[str, str] = {}
            problems: list[Problem] = []
            _cache[key] = (_matched(index, missing, problems), missing, tuple(problems))
            while len(_cache) > _KEPT:
                _cache.popitem(last=False)
        matched = _cache[key]
    index.problems.extend(p for p in matched[2] if p not in index.problems)
    return matched


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


@dataclass(frozen=True)
class Fused:
    """A fused op as its graph text describes it: its constituents in order, the edges it takes from
    outside them (each once, in the order they are first taken: its dumped inputs), and whether a
    constituent before the last feeds an op outside it too (then it has outputs besides the last
    constituent's)."""

    ops: tuple[GraphOp, ...]
    inputs: tuple[str, ...]
    several_outputs: bool


def outside_inputs(ops: Sequence[GraphOp]) -> list[str]:
    """The data inputs of ``ops`` (one op, or a fused op's constituents) that none of them produced,
    each once, in the order they are first taken."""
    inside = {op.name for op in ops}
    edges = [edge for op in ops for edge in op.inputs if edge.rpartition(":")[0] not in inside]
    return list(dict.fromkeys(edges))


def fused(index: DumpIndex, node: str) -> Fused | None:
    """A fused op of a GE dump (``graph_2/SwishMul_8``: Swish, then Mul_8); None where the node is an
    op of its graph text, or its name is not made of the text's op names."""
    graph, _, name = node.partition("/")
    text = texts_by_graph(index).get(graph)
    if text is None or name in text.ops:
        return None
    ops = split_fused(name, text.ops)
    if not ops:
        return None
    members = {op.name for op in ops}
    # an inner result an op outside takes too (the text's consumers, found once per text: this is
    # asked for every fused node at every token)
    several = any(text.consumers.get(op.name, set()) - members for op in ops[:-1])
    return Fused(tuple(ops), tuple(outside_inputs(ops)), several)


def first_run(index: DumpIndex, graph: str) -> int | None:
    """The token of ``graph``'s first run in ``index`` (None: it never ran there)."""
    return next((token for token, (ran, _) in sorted(index.runs.items()) if ran == graph), None)


def _matched(index: DumpIndex, missing: dict[str, str], problems: list[Problem]) -> dict[str, GraphText]:
    texts = _readable(index, graph_files(index), problems)
    found: dict[str, GraphText] = {}
    graphs = index.tree.children(index.tree.root)
    named_for = {graph: [t for t in texts if _named_for(t, graph)] for graph in graphs}
    # where texts are named for the dump's graphs, a graph none is named for has lost its own (a
    # prefill and a decode graph hold the same op names: another graph's text would pair it wrong)
    aligned = any(named_for.values())
    for graph in graphs:
        named = named_for[graph]
        ops = {index.stable_name(n) for n in index.tree.children(graph)}
        if aligned and not named:
            missing[graph] = (
                "no graph text named for it (the texts here are named for the dump's other graphs)"
            )
            continue
        candidates = [t for t in named if ops & t.ops.keys()] or texts

        def fit(text: GraphText, ops: set[str] = ops, graph: str = graph) -> tuple[int, int]:
            common = ops & text.ops.keys()
            return len(common), _shapes_agreeing(index, graph, text, common) if common else 0

        # the header reads of fit are for telling texts apart: one candidate needs none
        best = candidates[0] if len(candidates) == 1 else max(candidates, key=fit, default=None)
        if best is not None and ops & best.ops.keys():
            found[graph] = best
        else:
            missing[graph] = "no readable graph text (dynamo_original_graph_*.txt) holds its ops"
    return found


def _named_for(text: GraphText, graph: str) -> bool:
    """Whether the text names the GE graph: its model folder (``graph_2``), or that folder's runs of one
    model id (``graph_2_1``: ge_dump.py names them so where a model folder holds several)."""
    folder = f"graph_{text.graph_id}"
    return graph in (text.name, folder) or graph.startswith(f"{folder}_")


def _readable(index: DumpIndex, paths: list[Path], problems: list[Problem]) -> list[GraphText]:
    texts = []
    for path in paths:
        try:
            texts.append(read_graph(path, index.load_policy))
        except DumpError as exc:
            problems.append(Problem(str(path), str(exc).removeprefix(f"{path}: ")))
    return texts


def _shapes_agreeing(index: DumpIndex, graph: str, text: GraphText, common: Iterable[str]) -> int:
    """How many of a few ops have, in ``graph``'s first run, the output shape the graph text gives."""
    agreeing = 0
    for name in sorted(common)[:_SHAPE_SAMPLES]:
        shapes = text.ops[name].output_shapes
        ran = first_output_shape(index, graph, name) if shapes else None
        agreeing += ran is not None and ran == shapes[0]
    return agreeing


def first_output_shape(
    index: DumpIndex, graph: str, op_name: str, position: int = 0
) -> tuple[int, ...] | None:
    """The shape output ``position`` of ``op_name`` had in ``graph``'s first run (its file's header,
    the logical shape); None where no file holds it."""
    from tui_acc.dumps.torchair.ge_file import GeDumpError, read_file_header

    first = first_run(index, graph)
    refs = index.tokens[first].get(f"{graph}/{op_name}", []) if first is not None else []
    if not refs:
        return None
    if refs[0].stats is not None:  # a statistics file (ge_stats.py): the shape its row gives
        held = {r.slot: r.stats.shape for r in refs if r.stats is not None}
        return held.get(f"output.{position}")
    try:
        outputs = read_file_header(refs[0].path, index.load_policy).of("output")
    except (GeDumpError, OSError):
        return None
    if position >= len(outputs):
        return None
    return outputs[position].logical_shape
