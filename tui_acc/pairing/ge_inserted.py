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

One exception: the ops GE inserted after the logits' op whose first input is what it wrote (by
their files' headers: shape and dtype; a Cast of the logits to float32, the graph's output) carry
the logits: their input and output are held against the golden's logits, and the last of them is
the token's logits, judged as logits at the dtype the logits' op wrote (a wrong Cast there changes
the answer while every op the graph text holds is right). A TransData or Reformat is judged only
where the reader reads both its formats in the logical order (not FRACTAL_Z, not NHWC).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.dumps.torchair.graph_text import GraphText
from tui_acc.dumps.torchair.graph_texts import split_fused
from tui_acc.pairing.model import CarriedLogits, NodePair, TensorPair, Unmatched

# GE's inserted ops whose output holds its input's values element for element
VALUE_KEEPING = frozenset({"Cast", "TransData", "Reformat", "Reshape", "SqueezeV2", "UnsqueezeV2"})
# formats the GE reader reads in the logical (ND / NCHW) element order (ge_file.decode): NCHW, ND,
# NC1HWC0, NC1HWC0_C04, FRACTAL_NZ (dumps/atb/tiled.py)
_READ_AS_LOGICAL = frozenset({0, 2, 3, 12, 29})


@dataclass(frozen=True)
class _Placed:
    after: str | None  # the golden node it follows (None: its graph's first)
    graph: str  # the golden graph
    type: str


class GoldenTreeView:
    """The golden tree a TorchAir pairing walks: the reader's (nested by module where ``nest`` nests
    it), grown as later runs list their nodes, with the ops GE inserted placed in it. ``tree`` is one
    object for the pairing's life (the judge and the screens hold it): its node table follows the
    reader's until an op is placed, then is the pairing's own. The reader's tree is never changed."""

    def __init__(self, read_tree: NodeTree, nest: Callable[[NodeTree], NodeTree | None]) -> None:
        self._read, self._nest = read_tree, nest
        self._placed: dict[str, _Placed] = {}
        self._lock = threading.Lock()
        nested = nest(read_tree)
        self._own = nested is not None
        self.tree: NodeTree = nested if nested is not None else NodeTree(read_tree.root, read_tree.nodes)

    def catch_up(self, names: Mapping[str, object]) -> None:
        """Take in the nodes a later run added to the reader's tree (``names``: a token's nodes)."""
        if all(n in self.tree.nodes for n in names):
            return
        with self._lock:
            if self._own:
                self.tree.adopt(self._grown())
            else:  # the reader replaced its table (copy-on-write): the newer one
                self.tree.nodes = self._read.nodes

    def place(self, placed: list[tuple[str, str | None, str, str]]) -> None:
        """Put each (name, after, graph, type) of ``placed`` (ops GE inserted) right after ``after``
        (first in ``graph`` where None), all in one growth of the tree."""
        with self._lock:
            new = {name: _Placed(after, graph, kind) for name, after, graph, kind in placed}
            new = {name: found for name, found in new.items() if name not in self._placed}
            if not new:
                return
            self._placed.update(new)
            if self._own:
                self.tree.adopt(self._grown())
            else:  # the first ops placed: the table is the pairing's own from now on
                self.tree.nodes, self._own = self._grown().nodes, True

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
    after: dict[str, str | None]  # each one's golden node -> the golden node it follows (None: first)

    def spliced(self, pairs: list[NodePair]) -> list[NodePair]:
        """``pairs`` (the token's, in the golden tree's order) with these in their places: each right
        after the node it follows (a leaf: nothing of its subtree between), which may be another
        inserted op (ops GE inserted in a row)."""
        following: dict[str | None, list[NodePair]] = {}
        for pair in self.pairs:
            following.setdefault(self.after[pair.golden], []).append(pair)
        out: list[NodePair] = []

        def put(after: str | None) -> None:
            waiting = list(reversed(following.get(after, [])))
            while waiting:  # no recursion: a run may hold thousands in a row
                pair = waiting.pop()
                out.append(pair)
                waiting += reversed(following.get(pair.golden, []))

        put(None)
        for pair in pairs:
            out.append(pair)
            put(pair.golden)
        return out


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
    token's pairs hold them. An op after the logits' op whose first input is what the logits' op
    (or the last such op) wrote, by its file's header (shape and dtype), carries the logits."""
    unpaired = {u.name for u in alone if u.kind == "node" and u.side == "test"}
    golden_of = {p.test: p.golden for p in pairs}
    logits_op = next((p.test for p in pairs if logits is not None and p.golden == logits[0]), None)
    ran = test.tokens[token]
    headers = _Headers(test)
    found: list[NodePair] = []
    placed: list[tuple[str, str | None, str, str]] = []  # (node, after, graph, type), as place takes them
    before: str | None = None  # the golden node of the last op that ran
    carried_so_far: tuple[tuple[int, ...], int | str] | None = None  # what the logits last became
    carriers: list[NodePair] = []
    for name in test.tree.children(test_graph):
        if name in golden_of:
            before = golden_of[name]
            if name == logits_op:
                carried_so_far = headers.written(ran.get(name, []), "output")
            continue
        if name not in ran or name not in unpaired:
            continue
        kind = test.tree.nodes[name].type
        op = name.partition("/")[2]
        if not _inserted(op, kind, text) or not headers.readable_alike(ran[name], kind):
            continue
        carries = carried_so_far is not None and headers.written(ran[name], "input") == carried_so_far
        carried = logits[1] if carries and logits is not None else None
        pair = _self_pair(token, f"{golden_graph}/{op}", name, kind, ran[name], carried)
        if pair is None:
            continue
        placed.append((pair.golden, before, golden_graph, pair.golden_type))
        found.append(pair)
        before = pair.golden
        if carried is not None:
            carriers.append(pair)
            carried_so_far = headers.written(ran[name], "output")
    if found:
        view.place(placed)
        found = [replace(p, depth=view.tree.nodes[p.golden].depth) for p in found]
        taken = {p.test for p in found}
        alone[:] = [u for u in alone if not (u.kind == "node" and u.side == "test" and u.name in taken)]
    held = None
    if carriers and logits is not None and logits_op is not None:
        held = CarriedLogits(
            carriers[-1].golden,
            (logits[0],),
            (logits_op, *(p.test for p in carriers)),
            headers.dtype(ran.get(logits_op, []), "output"),
        )
    return InsertedOps(found, held, {name: after for name, after, _, _ in placed})


class _Headers:
    """The GE file headers the inserted ops are judged by, each read once (the reader imported here:
    numpy is not on the first screen's path)."""

    def __init__(self, test: DumpIndex) -> None:
        self._test = test
        self._read: dict[str, Any] = {}  # path -> its GeDump, or None where it cannot be read

    def _of(self, refs: list[TensorRef]) -> Any:
        from tui_acc.dumps.torchair.ge_file import GeDumpError, read_file_header

        if not refs:
            return None
        path = refs[0].location
        if path not in self._read:
            try:
                self._read[path] = read_file_header(refs[0].path, self._test.load_policy)
            except (GeDumpError, OSError):
                self._read[path] = None
        return self._read[path]

    def dtype(self, refs: list[TensorRef], role: str) -> str:
        """The dtype of the first ``role`` tensor of a node's file, as numpy names it ("" unknown)."""
        from tui_acc.dumps.torchair.ge_file import DTYPES

        written = self.written(refs, role)
        if written is None:
            return ""
        if isinstance(written[1], str):  # a statistics file's, by torch's name (numpy's, for floats)
            return written[1]
        return str(DTYPES[written[1]]) if written[1] in DTYPES else ""

    def written(self, refs: list[TensorRef], role: str) -> tuple[tuple[int, ...], int | str] | None:
        """The logical shape and data type of the first ``role`` tensor of a node's file: GE's number
        from a dump file's header, torch's name from a statistics file (ge_stats.py)."""
        stats = next((r.stats for r in refs if r.role == role), None)
        if stats is not None:
            return (stats.shape, stats.dtype) if stats.shape is not None and stats.dtype else None
        header = self._of(refs)
        tensors = header.of(role) if header is not None else []
        if not tensors:
            return None
        return tensors[0].logical_shape, tensors[0].data_type

    def readable_alike(self, refs: list[TensorRef], kind: str) -> bool:
        """Whether the op's first input and output read in the same element order: a Cast in one
        format on both sides, or each in a format the reader brings back to ND / NCHW (a TransData
        from ND to FRACTAL_NZ); not one the reader leaves as laid out (FRACTAL_Z, NHWC)."""
        if refs and refs[0].stats is not None:  # statistics are the same in any element order
            return {r.role for r in refs} >= {"input", "output"}
        header = self._of(refs)
        if header is None or not header.of("input") or not header.of("output"):
            return False
        given, made = header.of("input")[0].primary_format, header.of("output")[0].primary_format
        if kind == "Cast" and given == made:
            return True
        return given in _READ_AS_LOGICAL and made in _READ_AS_LOGICAL


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
