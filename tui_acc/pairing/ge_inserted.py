"""The ops GE inserted into a TorchAir graph, judged against their own input: they have no golden.

GE's optimiser inserts conversions between ops whose formats or dtypes disagree (hicann/ge
``compiler/engines/nn_engine/optimizer/graph_optimizer/shape_format_transfer/
trans_node_implementation/``): each named ``trans_{type}_{n}`` (``trans_node_base_generator.cc``),
in no graph text TorchAir wrote, with no record of the op it follows (``trans_node_cast_generator.cc``
gives it an empty list of original names). msprobe compares such an op's input with its own output
(``compare_specials_private_ops`` in ``torchair_acc_cmp.py``); so does tui-acc, where the output
holds the input's values element for element (a Cast rounds them to its dtype; a TransData or a
Reformat moves them between layouts, which the reader undoes; a Reshape, SqueezeV2 or UnsqueezeV2
keeps their order). A Transpose moves elements: it stays unpaired.

Each such op is a node of the pairing's golden tree (``{golden graph}/{op name}``, placed after the
golden node of the op that ran before it), paired with itself: its inputs against themselves, its
output against its input (``TensorPair.golden_from_test``). A Cast that is wrong is then the one
operator whose inputs match and whose output does not.

One exception: the ops GE inserted after the logits, at the end of a run (a Cast of the logits to
float32, the graph's output), carry the logits: their input and output are held against the
golden's logits, and the last of them is the token's logits (a wrong Cast there changes the answer
while every op the graph text holds is right).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.dumps.torchair.graph_text import GraphText
from tui_acc.dumps.torchair.graph_texts import split_fused
from tui_acc.pairing.model import CarriedLogits, NodePair, TensorPair, Unmatched

# GE's inserted ops whose output holds its input's values element for element
VALUE_KEEPING = frozenset({"Cast", "TransData", "Reformat", "Reshape", "SqueezeV2", "UnsqueezeV2"})


@dataclass(frozen=True)
class _Placed:
    after: str | None  # the golden node it follows (None: its graph's first)
    graph: str  # the golden graph
    type: str


class GoldenTreeView:
    """The golden tree a TorchAir pairing walks: the reader's (nested by module where ``grow`` nests
    it), grown as later runs list their nodes, with the ops GE inserted placed in it. The reader's own
    tree is never changed: a tree of the pairing's own is made the first time it needs one."""

    def __init__(self, read_tree: NodeTree, nest: Callable[[NodeTree], NodeTree | None]) -> None:
        self._read, self._nest = read_tree, nest
        self._placed: dict[str, _Placed] = {}
        self._lock = threading.Lock()
        nested = nest(read_tree)
        self._own = nested is not None
        self.tree: NodeTree = nested if nested is not None else read_tree

    def catch_up(self, names: Mapping[str, object]) -> None:
        """Take in the nodes a later run added to the reader's tree (``names``: a token's nodes)."""
        if not self._own or all(n in self.tree.nodes for n in names):
            return  # the reader's own tree grows by itself
        with self._lock:
            self.tree.adopt(self._grown())

    def place(self, placed: list[tuple[str, str | None, str, str]]) -> None:
        """Put each (name, after, graph, type) of ``placed`` (ops GE inserted) right after ``after``
        (first in ``graph`` where None), all in one growth of the tree."""
        with self._lock:
            new = {name: _Placed(after, graph, kind) for name, after, graph, kind in placed}
            new = {name: found for name, found in new.items() if name not in self._placed}
            if not new:
                return
            self._placed.update(new)
            if not self._own:  # the first ops placed: from now on the pairing's own tree
                self.tree, self._own = self._grown(), True
            else:
                self.tree.adopt(self._grown())

    def _grown(self) -> NodeTree:
        grown = self._nest(self._read) or self._read.copy()
        for name, placed in self._placed.items():
            anchor = placed.after if placed.after in grown.nodes else None
            parent = grown.nodes[anchor].parent if anchor is not None else placed.graph
            if parent is None or parent not in grown.nodes:
                continue
            siblings = grown.nodes[parent].children
            siblings.insert(siblings.index(anchor) + 1 if anchor is not None else 0, name)
            grown.nodes[name] = Node(name, placed.type, parent, grown.nodes[parent].depth + 1)
        return grown


@dataclass(frozen=True)
class InsertedOps:
    """What a token's inserted ops added: their pairs, and the ops that carried its logits."""

    pairs: list[NodePair]
    logits: CarriedLogits | None


def judge_inserted(
    token: int,
    golden_graph: str,
    test: DumpIndex,
    test_graph: str,
    text: GraphText,
    pairs: list[NodePair],
    alone: list[Unmatched],
    logits: tuple[str, TensorRef] | None,
    view: GoldenTreeView,
) -> InsertedOps:
    """Pair the ops GE inserted in ``test_graph``'s run at ``token`` (among ``alone``, the test's
    unpaired nodes: those paired here leave it) with themselves, placing each in ``view`` after the
    golden node of the op before it; ``logits``: the golden's logits node and output, where this
    token's pairs hold them."""
    unpaired = {u.name for u in alone if u.kind == "node" and u.side == "test"}
    golden_of = {p.test: p.golden for p in pairs}
    logits_op = next((p.test for p in pairs if logits is not None and p.golden == logits[0]), None)
    order = test.tree.children(test_graph)
    ran = test.tokens[token]
    found: list[NodePair] = []
    placed: list[tuple[str, str | None, str, str]] = []  # (node, after, graph, type), as place takes them
    before: str | None = None  # the golden node of the last op that ran
    carrying = False  # only ops GE inserted ran since the logits' op
    carriers: list[NodePair] = []
    for position, name in enumerate(order):
        if name in golden_of:
            before, carrying = golden_of[name], name == logits_op
            continue
        if name not in ran:
            continue
        kind = test.tree.nodes[name].type
        op = name.partition("/")[2]
        if name not in unpaired or not _inserted(op, kind, text):
            carrying = False
            continue
        golden_name = f"{golden_graph}/{op}"
        trailing = carrying and all(n not in golden_of for n in order[position + 1 :])
        carried = None
        if trailing and logits is not None and logits_op is not None:
            carried = logits[1] if _same_shape(ran[name], ran.get(logits_op, []), test) else None
        pair = _self_pair(token, golden_name, name, kind, ran[name], carried)
        if pair is None:
            carrying = False
            continue
        placed.append((golden_name, before, golden_graph, f"{kind}, inserted by GE"))
        found.append(pair)
        before, carrying = golden_name, carried is not None
        carriers += [pair] if carried is not None else []
    if found:
        view.place(placed)
        found = [replace(p, depth=view.tree.nodes[p.golden].depth) for p in found]
        taken = {p.test for p in found}
        alone[:] = [u for u in alone if not (u.kind == "node" and u.side == "test" and u.name in taken)]
    held = None
    if carriers and logits is not None and logits_op is not None:
        held = CarriedLogits(carriers[-1].golden, (logits[0],), (logits_op, *(p.test for p in carriers)))
    return InsertedOps(found, held)


def _same_shape(inserted: list[TensorRef], logits: list[TensorRef], test: DumpIndex) -> bool:
    """Whether the inserted op's first input has the shape of the logits op's first output (their
    files' headers): what it converts is the logits."""
    from tui_acc.dumps.torchair.ge_file import GeDumpError, read_file_header

    source = next((r for r in inserted if r.role == "input"), None)
    target = next((r for r in logits if r.role == "output"), None)
    if source is None or target is None:
        return False
    try:
        given = read_file_header(source.path, test.load_policy).of("input")[0]
        made = read_file_header(target.path, test.load_policy).of("output")[0]
    except (GeDumpError, OSError, IndexError):
        return False
    return (given.original_shape or given.shape) == (made.original_shape or made.shape)


def _inserted(op: str, kind: str, text: GraphText) -> bool:
    """Whether ``op`` is one GE inserted that keeps its input's values (in no graph text, fusing none
    of its ops)."""
    return kind in VALUE_KEEPING and op not in text.ops and not split_fused(op, text.ops)


def _self_pair(
    token: int, golden: str, test: str, kind: str, refs: list[TensorRef], carried: TensorRef | None
) -> NodePair | None:
    """The op against itself: each input against itself and each output against the input of its
    index (the first where it has fewer), or all against ``carried`` (the golden's logits)."""
    inputs = [r for r in refs if r.role == "input"]
    outputs = [r for r in refs if r.role == "output"]
    if not inputs or not outputs:
        return None
    tensors: list[TensorPair] = []
    for ref in inputs:
        source = ref if carried is None else replace(carried, slot=ref.slot, role="input")
        tensors.append(TensorPair(token, golden, test, source, ref, golden_from_test=carried is None))
    for position, ref in enumerate(outputs):
        own = inputs[min(position, len(inputs) - 1)]
        source = own if carried is None else carried
        tensors.append(
            TensorPair(
                token,
                golden,
                test,
                replace(source, slot=ref.slot, role="output"),
                ref,
                golden_from_test=carried is None,
            )
        )
    return NodePair(token, golden, test, f"{kind}, inserted by GE", kind, 0, tuple(tensors), inserted=True)
