"""Pairing TorchAir's dumps: a GE dump against its FX golden, or against a GE dump with fusion off.

What msprobe's ``compare -m torchair`` does (``core/compare/torchair_acc_cmp.py``; docs/formats.md
§7.4), with its known defects mended:

- **GE against FX.** The graph text TorchAir wrote says which FX node each GE op computes
  (``_fx_tensor_name``); a GE op's outputs are that node's outputs, by the index the name carries,
  and each input the FX tensor its producer (the graph's edge) computed, whatever order the aten op
  takes its arguments in. A fused op, named by its constituents' names run together, is split by the
  longest op name of the graph at each point: its inputs are its constituents' inputs from outside
  them, its outputs the last one's. An op the graph text does not hold and that fuses none of its
  ops (a Cast or TransData GE inserted) has no golden: it is judged against its own input
  (``ge_inserted.py``); ops that compute no FX node (graph inputs, constants) are named unpaired.
- **GE against GE.** Ops pair by name; a fused op's inputs are its constituents' inputs that no
  other constituent produced (the graph's edges), in order, and its outputs the last one's.
- **Graphs by content, not position.** Each GE graph (model folder) is the graph text whose ops it
  ran, and each is paired with the FX graph holding most of the same FX nodes (with the same output
  shapes where names tie, as a prefill and a decode graph do), or the GE graph with most ops in
  common; a note says where they differ. A token pairs with the golden's run of the paired graph at
  the same step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from tui_acc.dumps.model import DumpError, DumpIndex, Problem, TensorRef
from tui_acc.dumps.torchair.fx_dump import npy_shape
from tui_acc.dumps.torchair.graph_text import GraphOp, GraphText
from tui_acc.dumps.torchair.graph_texts import (
    first_output_shape,
    first_run,
    missing_texts,
    outside_inputs,
    split_fused,
    texts_by_graph,
)
from tui_acc.lazy import LazyMapping
from tui_acc.pairing.ge_inserted import GoldenTreeView, judge_inserted
from tui_acc.pairing.model import CarriedLogits, NodePair, TensorPair, Unmatched
from tui_acc.pairing.module_tree import nested_by_module
from tui_acc.pairing.result import Pairing, logits_holder

_SHAPE_SAMPLES = 8  # FX nodes whose output shapes tell two graphs of the same nodes apart


@dataclass
class _Graphs:
    """What pairing learned of the graphs: test graph -> its graph text and its golden graph."""

    texts: dict[str, GraphText]
    golden_of: dict[str, str]
    notes: list[str]
    golden_texts: dict[str, GraphText]  # a GE golden's graph -> its graph text


def pair_torchair(golden: DumpIndex, test: DumpIndex, logits_node: str | None = None) -> Pairing:
    """Pair a GE dump (``test``) with its FX golden or a fusion-off GE dump; DumpError where the test
    is not a GE dump."""
    if test.format != "torchair-ge":
        raise DumpError(f"{test.root}: a TorchAir golden is compared with a GE dump; this is {test.format}")
    graphs = _graphs(golden, test)
    token_of = {}  # test token -> golden token
    golden_run = {run: token for token, run in golden.runs.items()}
    for token, (graph, step) in test.runs.items():
        partner = golden_run.get((graphs.golden_of.get(graph, ""), step))
        if partner is not None:
            token_of[token] = partner
    unmatched = [Unmatched("token", "test", t, _run_name(test, t)) for t in test.runs if t not in token_of]
    paired = set(token_of.values())
    unmatched += [
        Unmatched("token", "golden", t, _run_name(golden, t)) for t in golden.runs if t not in paired
    ]
    tokens = sorted(paired)
    test_token = {golden_token: token for token, golden_token in token_of.items()}
    view = replace(
        test,
        tokens=LazyMapping(tokens, lambda t: test.tokens[test_token[t]]),
        runs={t: test.runs[test_token[t]] for t in tokens},
    )
    lock = threading.Lock()
    pair_node = _fx_partner(golden, graphs) if golden.format == "torchair-fx" else _ge_partner(golden, graphs)
    modules = _modules_of(golden, graphs)
    evident = _pairs_evident(golden, view, graphs)
    tree_view = GoldenTreeView(golden.tree, lambda tree: nested_by_module(tree, modules))
    golden = replace(golden, tree=tree_view.tree)  # the pairing's view: one tree object throughout
    logits = logits_node or golden.logits_hint or golden.tree.leaf_chain_end()
    logits_at: dict[int, CarriedLogits] = {}  # token -> the ops that carried its logits past ``logits``

    def build(token: int) -> list[NodePair]:
        # listing a later run adds the ops only it ran to the reader's tree: the pairing's tree takes
        # them too (copy-on-write), else the pairs of that token would name nodes it lacks
        tree_view.catch_up(golden.tokens.get(token, {}))
        pairs, alone = _pair_token(token, golden, view, pair_node)
        if golden.format == "torchair-fx":
            pairs = _with_inserted(token, golden, view, graphs, pairs, alone, logits, tree_view, logits_at)
        with lock:
            unmatched.extend(alone)
        return pairs

    return Pairing(
        golden=golden,
        test=view,
        tokens=tokens,
        nodes=LazyMapping(tokens, build),
        logits_node=logits,
        unmatched_found=unmatched,
        notes=graphs.notes,
        pairs_without_pairing=evident,
        logits_at=logits_at,
    )


def _with_inserted(
    token: int,
    golden: DumpIndex,
    test: DumpIndex,
    graphs: _Graphs,
    pairs: list[NodePair],
    alone: list[Unmatched],
    logits: str,
    tree_view: GoldenTreeView,
    logits_at: dict[int, CarriedLogits],
) -> list[NodePair]:
    """``pairs`` with the ops GE inserted in the token's run, each against itself (ge_inserted.py),
    in the golden tree's order; ``logits_at`` takes the op that carries the token's logits."""
    graph = test.runs[token][0]
    text, golden_graph = graphs.texts.get(graph), graphs.golden_of.get(graph)
    if text is None or golden_graph is None:
        return pairs
    holder = logits_holder(pairs, golden, logits)
    carried = (holder.golden, holder.outputs[0].golden) if holder is not None else None
    found = judge_inserted(token, golden_graph, test, graph, text, pairs, alone, carried, tree_view)
    if not found.pairs:
        return pairs
    if found.logits is not None:
        logits_at[token] = found.logits
    return found.spliced(pairs)


def _pairs_evident(golden: DumpIndex, test: DumpIndex, graphs: _Graphs) -> Callable[[int], bool]:
    """Whether a token's pairs are evident from names alone (no file header read): an op its graph
    ran (each graph's first run, listed at opening) computes a node its golden graph ran (the graph
    text's FX node), or has the same name there (a GE golden). False says only "not evident"."""
    golden_names = {
        g: {n.partition("/")[2] for n in golden.tree.children(g)}
        for g in golden.tree.children(golden.tree.root)
    }

    def evident(token: int) -> bool:
        graph = test.runs[token][0]
        theirs = golden_names.get(graphs.golden_of.get(graph, ""), set())
        text = graphs.texts.get(graph)
        for node in test.tree.children(graph):
            op = node.partition("/")[2]
            if golden.format == "torchair-fx":
                described = text.ops.get(op) if text is not None else None
                if described is not None and any(fx in theirs for fx in described.fx_outputs if fx):
                    return True
            elif op in theirs:
                return True
        return False

    return evident


# (the golden node a test node pairs with, its tensors: (golden node, golden tensor, test tensor))
Found = tuple[str, list[tuple[str, TensorRef, TensorRef]]]
# a test node at a token, its tensors and the golden's nodes there -> what it pairs with, or None
Partner = Callable[[int, str, list[TensorRef], Mapping[str, list[TensorRef]]], Found | None]


def _pair_token(
    token: int, golden: DumpIndex, test: DumpIndex, partner: Partner
) -> tuple[list[NodePair], list[Unmatched]]:
    golden_nodes, test_nodes = golden.tokens.get(token, {}), test.tokens[token]
    found: dict[str, NodePair] = {}
    unmatched: list[Unmatched] = []
    for name, refs in test_nodes.items():
        paired = partner(token, name, refs, golden_nodes)
        if paired is None or paired[0] in found:
            unmatched.append(Unmatched("node", "test", token, name))
            continue
        golden_name, tensors = paired
        node = golden.tree.nodes[golden_name]
        # a tensor another golden node wrote (the producer of an input; a fused op's first constituent)
        # is this node's, under the test tensor's slot: rows are keyed by node and slot
        pairs = tuple(
            TensorPair(
                token,
                golden_name,
                name,
                g if owner == golden_name else replace(g, slot=t.slot, role=t.role),
                t,
            )
            for owner, g, t in tensors
        )
        found[golden_name] = NodePair(
            token, golden_name, name, node.type, test.tree.nodes[name].type, node.depth, pairs
        )
    order = [node.name for node in golden.tree.preorder() if node.name in golden_nodes]
    unmatched += [Unmatched("node", "golden", token, n) for n in order if n not in found]
    return [found[n] for n in order if n in found], unmatched


def _fx_partner(golden: DumpIndex, graphs: _Graphs) -> Partner:
    def partner(
        token: int, name: str, refs: list[TensorRef], golden_nodes: Mapping[str, list[TensorRef]]
    ) -> Found | None:
        graph, _, op_name = name.partition("/")
        text = graphs.texts.get(graph)
        fx_graph = graphs.golden_of.get(graph)
        if text is None or fx_graph is None:
            return None
        ops = [text.ops[op_name]] if op_name in text.ops else split_fused(op_name, text.ops)
        if not ops or ops[-1].fx_node is None or f"{fx_graph}/{ops[-1].fx_node}" not in golden_nodes:
            return None

        def golden_output(op: GraphOp, index: int) -> tuple[str, TensorRef] | None:
            """The FX tensor output ``index`` of ``op`` computes (its ``_fx_tensor_name``), if dumped."""
            if index >= len(op.fx_outputs) or op.fx_outputs[index] is None:
                return None
            node = f"{fx_graph}/{op.fx_outputs[index]}"
            slot = f"output.{op.fx_indices[index]}"
            found = next((r for r in golden_nodes.get(node, []) if r.slot == slot), None)
            return (node, found) if found is not None else None

        tensors = []
        test_inputs = [ref for ref in refs if ref.role == "input"]
        # each input against the FX tensor its producer computes: the golden of what came in, whatever
        # order the aten op takes its arguments in (a fused op: its constituents' outside inputs)
        for edge, ref in zip(outside_inputs(ops), test_inputs, strict=False):
            producer, _, index = edge.rpartition(":")
            op = text.ops.get(producer)
            found = golden_output(op, int(index)) if op is not None and index.isdigit() else None
            if found is not None:
                tensors.append((found[0], found[1], ref))
        for ref in refs:
            if ref.role == "output":
                found = golden_output(ops[-1], int(ref.slot.split(".")[1]))
                if found is not None:
                    tensors.append((found[0], found[1], ref))
        return f"{fx_graph}/{ops[-1].fx_node}", tensors

    return partner


def _modules_of(golden: DumpIndex, graphs: _Graphs) -> Callable[[str], list[tuple[str, str]]]:
    """A golden node -> the modules its graph text records for it: an FX node's through the GE op
    computing it (the test's text), a GE golden's op through its own."""
    test_of = {golden_graph: graph for graph, golden_graph in graphs.golden_of.items()}
    by_fx = {
        graph: text.by_fx_node() for graph, text in graphs.texts.items() if golden.format == "torchair-fx"
    }

    def modules(name: str) -> list[tuple[str, str]]:
        graph, _, key = name.partition("/")
        if golden.format == "torchair-fx":
            ops = by_fx.get(test_of.get(graph, ""), {}).get(key)
            return ops[-1].modules if ops else []
        text = graphs.golden_texts.get(graph)
        op = text.ops.get(key) if text is not None else None
        return op.modules if op is not None else []

    return modules


def _ge_partner(golden: DumpIndex, graphs: _Graphs) -> Partner:
    def partner(
        token: int, name: str, refs: list[TensorRef], golden_nodes: Mapping[str, list[TensorRef]]
    ) -> Found | None:
        graph, _, op_name = name.partition("/")
        golden_graph = graphs.golden_of.get(graph)
        if golden_graph is None:
            return None
        direct = f"{golden_graph}/{op_name}"
        if direct in golden_nodes:
            by_slot = {ref.slot: ref for ref in golden_nodes[direct]}
            return direct, [(direct, by_slot[r.slot], r) for r in refs if r.slot in by_slot]
        ran = {n.partition("/")[2]: n for n in golden_nodes if n.startswith(f"{golden_graph}/")}
        text = graphs.golden_texts.get(golden_graph)
        described = text.ops if text is not None else {}
        constituents = split_fused(op_name, {n: described.get(n) for n in ran})
        if not constituents:
            return None
        inside = {op.name for op in constituents}
        golden_inputs: list[tuple[str, TensorRef]] = []
        taken: set[str] = set()  # each outside edge once, as outside_inputs lists the fused op's inputs
        for op in constituents:
            node = ran[op.name]
            edges = described[op.name].inputs if op.name in described else []
            for position, ref in enumerate(r for r in golden_nodes[node] if r.role == "input"):
                edge = edges[position] if position < len(edges) else f"{node}#{position}"
                if edge.rpartition(":")[0] not in inside and edge not in taken:
                    taken.add(edge)
                    golden_inputs.append((node, ref))
        last = ran[constituents[-1].name]
        test_inputs = [r for r in refs if r.role == "input"]
        tensors = [(node, g, t) for (node, g), t in zip(golden_inputs, test_inputs, strict=False)]
        outputs = {ref.slot: ref for ref in golden_nodes[last] if ref.role == "output"}
        tensors += [(last, outputs[r.slot], r) for r in refs if r.role == "output" and r.slot in outputs]
        return last, tensors

    return partner


def _graphs(golden: DumpIndex, test: DumpIndex) -> _Graphs:
    notes: list[str] = []
    text_of = texts_by_graph(test)
    for graph, why in missing_texts(test).items():
        if golden.format == "torchair-fx":  # the text pairs its ops with FX nodes: none, no pairs
            # an error, not a note: the rest's runs passing must not read as the whole dump passing
            said = Problem(str(test.root), f"GE graph {graph}: {why}; its runs are not compared")
            if said not in test.problems:
                test.problems.append(said)
        else:  # against a GE golden its ops pair by name all the same
            notes.append(f"GE graph {graph}: {why}; its ops are paired by name, its fused ops not split")
    test_graphs = test.tree.children(test.tree.root)
    golden_graphs = golden.tree.children(golden.tree.root)
    scores: list[tuple[int, float, str, str]] = []
    for graph in test_graphs:
        for other in golden_graphs:
            if golden.format == "torchair-fx":
                if graph not in text_of:
                    continue
                mine = set(text_of[graph].by_fx_node())
            else:
                mine = {test.stable_name(n) for n in test.tree.children(graph)}
            theirs = {n.partition("/")[2] for n in golden.tree.children(other)}
            common = mine & theirs
            if common:
                shapes = _shapes_agreeing(golden, other, test, graph, text_of.get(graph), common)
                scores.append((shapes, len(common) / len(mine | theirs), graph, other))
    golden_of: dict[str, str] = {}
    # output shapes first: a prefill and a decode graph hold nearly the same nodes
    for _, share, graph, other in sorted(scores, reverse=True):
        if graph not in golden_of and other not in golden_of.values():
            golden_of[graph] = other
            if share < 1:
                notes.append(
                    f"GE graph {graph} paired with {other} by content: {share:.0%} of their nodes in common"
                )
    for graph in test_graphs:
        if graph in text_of and graph not in golden_of:
            notes.append(f"GE graph {graph}: no golden graph runs its nodes; not compared")
    golden_texts = texts_by_graph(golden) if golden.format == "torchair-ge" else {}
    return _Graphs(text_of, golden_of, notes, golden_texts)


def _shapes_agreeing(
    golden: DumpIndex,
    graph: str,
    test: DumpIndex,
    test_graph: str,
    text: GraphText | None,
    common: Iterable[str],
) -> int:
    """How many of a few FX nodes have, in the FX ``graph``'s first run, the output shape the GE op
    computing them wrote in ``test_graph``'s first run (its file's header; the graph text's shape,
    -1 matching any size, where no file holds it): a prefill and a decode graph hold the same nodes
    with other shapes."""
    if text is None or golden.format != "torchair-fx":
        return 0
    first = first_run(golden, graph)
    if first is None:
        return 0
    ops = text.by_fx_node()
    agreeing = 0
    for key in sorted(common)[:_SHAPE_SAMPLES]:
        op = ops[key][-1]
        position = op.fx_outputs.index(key)
        refs = golden.tokens[first].get(f"{graph}/{key}", [])
        output = next((r for r in refs if r.slot == f"output.{op.fx_indices[position]}"), None)
        shape = npy_shape(output.path, golden.load_policy) if output is not None else None
        if shape is None:
            continue
        ran = first_output_shape(test, test_graph, op.name, position)
        if ran is not None:
            agreeing += ran == shape
        elif position < len(op.output_shapes) and len(op.output_shapes[position]) == len(shape):
            agreeing += all(d in (-1, s) for d, s in zip(op.output_shapes[position], shape, strict=True))
    return agreeing


def _run_name(index: DumpIndex, token: int) -> str:
    graph, step = index.runs.get(token, ("?", token))
    return f"{token} ({graph} step {step})"
