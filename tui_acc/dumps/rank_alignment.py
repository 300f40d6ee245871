"""msprobe ranks that ran different calls, put into one namespace before they are gathered.

An expert-parallel rank runs the experts it owns and no other: its module records are named by
their global path (``model.layers.1.mlp.experts.3``), but msprobe numbers API calls per rank, so
after the first expert loop one name is another call on each rank (``Functional.linear.50`` is an
expert's projection on rank 0 and the router on rank 1). Here each rank's records are matched with
rank 0's, parent by parent, at every token, by what dump.json records of them:

* **anchors** are a module record, or a collective (``Distributed.*``: every rank calls the same
  collectives in the same order), of the same name on both;
* between two anchors, calls of the same kind are the same call up to the first whose record
  differs in form (its arguments, its tensors' dtypes and shapes: a tensor-parallel shard, or one
  rank's wrong copy of replicated work, is the same call, and the merge shows which rank is off;
  ``chosen == 2`` is not ``chosen == 0``), and the calls after each rank's last module or in-place
  sum are the same where both ranks made them alike in form (a scale applied to each rank's partial
  sum); the rest are that rank's own (its expert loop).

Where any rank differs from rank 0 in a gap, every rank keeps only what all of them share there.
Each rank's own calls are cut into its loop's iterations and placed by expert id, as the golden's
one loop ran them (``_iterations``); where an iteration's id cannot be told, each rank's calls are
kept whole and placed by its lowest expert id, and ranks whose ids interleave are refused
(``NotAlignable``).
An own call whose name another rank already uses gets the next free call counter of its API;
``origins`` keeps every own call's rank and the name its rank's dump.json knows it by. An own
in-place sum (``index_add_`` into the rank's partial sum) is compared without that sum,
which the golden's one loop over every expert never holds. See docs/formats.md §6.4.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from functools import partial

from tui_acc.dumps.expert_order import call_kind, experts_of, interleaved, iterations, placed_whole
from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.dumps.msprobe.passes import api_of, is_module
from tui_acc.dumps.msprobe.record_forms import RecordForms

# in-place sums whose first argument is the tensor added into (msprobe's API names)
ACCUMULATING = frozenset(
    {"Tensor.index_add_", "Tensor.add_", "Tensor.__iadd__", "Tensor.scatter_add_", "Tensor.index_put_"}
)
ACCUMULATOR_NOTE = (
    "a rank's own in-place sums (index_add_, add_) are compared without the tensor they add into and "
    "their result: both hold that rank's partial sum, which the golden never holds"
)
_API_COUNTER = re.compile(r"^(?P<head>.*\.)(?P<n>\d+)(?P<tail>\.(?:forward|backward))$")
_MODULE_COUNTER = re.compile(r"^(?P<head>.*\.(?:forward|backward)\.)(?P<n>\d+)(?P<tail>)$")


@dataclass(frozen=True)
class Aligned:
    """The ranks in one namespace: rank 0 as read, every other rank renamed; ``origins``: each call
    one rank ran alone, its rank and its name in that rank's dump.json; ``orders``: the children of a
    parent where ranks ran calls of their own under it, in the order the gathered tree gives them."""

    ranks: list[DumpIndex]
    origins: dict[str, tuple[int, str]]
    orders: dict[str, list[str]]
    notes: list[str]


def alignable(index: DumpIndex) -> bool:
    """Whether a rank's records can be matched with another's: msprobe's, with module records (level
    L0 or mix) to anchor them. At L1 nothing marks where an expert's calls begin; experts numbered per
    rank (Megatron's ``local_experts.{i}``) would be taken for the same expert on every rank."""
    names = index.tree.nodes
    return (
        index.format == "msprobe"
        and any(is_module(name) for name in names)
        and not any(".local_experts." in name for name in names)
    )


_GapKey = tuple[int, str, str | None]


class NotAlignable(Exception):
    """Ranks whose own calls cannot be placed where the golden ran them; the message says why."""


@dataclass
class _Gap:
    """The calls of one parent between two anchors, on rank 0 and on each other rank."""

    first: list[str]
    others: dict[int, list[str]] = field(default_factory=dict)
    prefix: dict[int, int] = field(default_factory=dict)  # calls matched from the start, per rank
    tail: dict[int, int] = field(default_factory=dict)  # calls matched from the end, per rank


def align_ranks(ranks: Sequence[DumpIndex]) -> Aligned:
    """Every rank's records named as rank 0's where they are the same call; see the module's doc."""
    first = ranks[0]
    records = RecordForms()
    names: dict[int, dict[str, str]] = {r: {} for r in range(1, len(ranks))}
    # (token, parent, the anchor before it) -> its calls; (token, parent) -> its anchors and gaps in
    # order (the tree's root holds every token's top calls: the token keeps them apart)
    gaps: dict[_GapKey, _Gap] = {}
    layouts: dict[tuple[int, str], list[tuple[str, str | None]]] = {}
    common = sorted(set.intersection(*(set(index.tokens) for index in ranks)))
    for rank, index in enumerate(ranks[1:], start=1):
        for token in common:
            matcher = _Matcher(first, index, token, records)
            matcher.walk(first.tree.root, index.tree.root, names[rank], rank, gaps, layouts)
    experts = experts_of(run for gap in gaps.values() for run in [(0, gap.first), *gap.others.items()])
    refused = interleaved(experts)
    own: dict[int, set[str]] = {r: set() for r in range(len(ranks))}
    placed: dict[_GapKey, list[str]] = {}  # each gap's calls in the gathered order
    lowest = {rank: min(ids) for rank, ids in experts.items() if ids}
    for key, gap in gaps.items():
        start = min(gap.prefix.values())
        lengths = [len(gap.first), *(len(theirs) for theirs in gap.others.values())]
        tail = min(gap.tail.values())
        if any(length - tail < start for length in lengths):  # the tail would overlap the prefix
            tail = 0
        stop = len(gap.first) - tail
        runs = [(0, gap.first[start:stop])]
        for rank, theirs in gap.others.items():
            end = len(theirs) - tail
            for mine, their in [
                *zip(gap.first[:start], theirs[:start], strict=True),
                *zip(gap.first[stop:], theirs[end:], strict=True),
            ]:
                names[rank][their] = mine
            runs.append((rank, theirs[start:end]))
        for rank, run in runs:
            own[rank].update(_subtree(ranks[rank].tree, run))
        loops = iterations(runs, partial(_first_int_at, records, ranks, key[0]))
        if loops is None and refused:
            raise NotAlignable(refused)
        order = loops if loops is not None else placed_whole(runs, lowest)
        placed[key] = [*gap.first[:start], *(f"\0{rank}\0{name}" for rank, name in order), *gap.first[stop:]]
    origins: dict[str, tuple[int, str]] = {name: (0, name) for name in own[0]}
    taken = set(first.tree.nodes)
    counters = _Counters(taken)
    aligned = [_renamed(first, {n: n for n in first.tree.nodes}, own[0], 0)]
    for rank, index in enumerate(ranks[1:], start=1):
        mapped = names[rank]
        for node in index.tree.preorder():
            if node.name in mapped and node.name not in own[rank]:
                continue
            mapped[node.name] = counters.free(node.name) if node.name in taken else node.name
            taken.add(mapped[node.name])
            origins[mapped[node.name]] = (rank, node.name)
        aligned.append(_renamed(index, mapped, own[rank], rank))
    # a parent's children in order at every token (the root holds every token's), where any has a gap
    with_gaps = {parent for (_, parent), layout in layouts.items() if any(k == "gap" for k, _ in layout)}
    orders: dict[str, list[str]] = {}
    for (token, parent), layout in sorted(layouts.items()):
        if parent in with_gaps:
            orders.setdefault(parent, []).extend(
                _resolved(name, names)
                for kind, item in layout
                for name in (placed.get((token, parent, item), []) if kind == "gap" else [item])
                if name is not None
            )
    compared = {name for index in aligned for records_ in index.tokens.values() for name in records_}
    alone = sum(1 for name in origins if name in compared)
    notes = [f"{alone} records that one rank ran alone (each rank its own experts) are taken whole from it"]
    if any(api_of(name) in ACCUMULATING for _, name in origins.values()):
        notes.append(ACCUMULATOR_NOTE)
    return Aligned(aligned, origins, orders, notes if origins else [])


def _resolved(name: str, names: dict[int, dict[str, str]]) -> str:
    """A gap's placeholder for another rank's own call (``\\0rank\\0name``) as its gathered name."""
    if not name.startswith("\0"):
        return name
    _, rank, own = name.split("\0", 2)
    return names[int(rank)].get(own, own) if int(rank) else own


def _first_int_at(
    records: RecordForms, ranks: Sequence[DumpIndex], token: int, rank: int, call: str
) -> int | None:
    return records.first_int(ranks[rank], token, call)


def _subtree(tree: NodeTree, names: Iterable[str]) -> set[str]:
    return {node.name for name in names for node in tree.preorder(name)}


class _Matcher:
    """Rank ``other``'s records matched with ``first``'s, parent by parent, at one token."""

    def __init__(self, first: DumpIndex, other: DumpIndex, token: int, records: RecordForms) -> None:
        self.first, self.other, self.token, self.records = first, other, token, records

    def walk(
        self,
        mine: str,
        theirs: str,
        names: dict[str, str],
        rank: int,
        gaps: dict[_GapKey, _Gap],
        layouts: dict[tuple[int, str], list[tuple[str, str | None]]],
    ) -> None:
        names[theirs] = mine
        at_root = mine == self.first.tree.root
        held = (self.first.tokens[self.token], self.other.tokens[self.token])
        # the root's children are every token's top calls: this token's only
        left = [c for c in self.first.tree.children(mine) if not at_root or c in held[0]]
        right = [c for c in self.other.tree.children(theirs) if not at_root or c in held[1]]
        marked = ([n for n in left if _is_anchor(n)], [n for n in right if _is_anchor(n)])
        anchors = [
            (marked[0][block.a + i], marked[1][block.b + i])
            for block in SequenceMatcher(None, *marked, autojunk=False).get_matching_blocks()
            for i in range(block.size)
        ]
        layout: list[tuple[str, str | None]] = []
        starts, after = (0, 0), None
        for end in [*anchors, (None, None)]:
            stop_left = left.index(end[0]) if end[0] is not None else len(left)
            stop_right = right.index(end[1]) if end[1] is not None else len(right)
            gap_left, gap_right = left[starts[0] : stop_left], right[starts[1] : stop_right]
            if gap_left or gap_right:
                gap = gaps.setdefault((self.token, mine, after), _Gap(gap_left))
                if gap.first != gap_left:  # another rank's anchors cut this gap elsewhere: nothing shared
                    gap.prefix[rank] = gap.tail[rank] = 0
                else:
                    gap.prefix[rank] = self._prefix(gap_left, gap_right)
                    gap.tail[rank] = self._tail(gap_left, gap_right)
                gap.others[rank] = gap_right
                layout.append(("gap", after))
            if end[0] is not None:
                layout.append(("anchor", end[0]))
            starts, after = (stop_left + 1, stop_right + 1), end[0]
        layouts.setdefault((self.token, mine), layout)
        for a, b in anchors:
            self.walk(a, b, names, rank, gaps, layouts)

    def _prefix(self, left: list[str], right: list[str]) -> int:
        """Calls matched from the start: the same kind, recorded alike in form (arguments, dtypes,
        shapes: a shard, or one rank's wrong copy of replicated work, is still the same call, and
        the merge then shows which rank is off; ``chosen == 2`` is not ``chosen == 0``); never a
        module (a module in a gap is one rank's own)."""
        same = 0
        for a, b in zip(left, right, strict=False):
            if is_module(a) or is_module(b) or not self._alike(a, b):
                break
            same += 1
        return same

    def _tail(self, left: list[str], right: list[str]) -> int:
        """Calls matched from the end: those after each side's last module or in-place sum, where both
        made them alike in form (work on each rank's partial sum); none where they differ at all."""
        ends = [_after_last_loop(left), _after_last_loop(right)]
        if ends[0] is None or ends[1] is None:
            return 0
        after = (left[ends[0] :], right[ends[1] :])
        if len(after[0]) != len(after[1]):
            return 0
        if all(self._alike(a, b) for a, b in zip(*after, strict=True)):
            return len(after[0])
        return 0

    def _alike(self, a: str, b: str) -> bool:
        """Whether two calls were recorded alike: the same kind, and dump.json's records the same in
        form (arguments, dtypes, shapes); a call without a record is alike to none."""
        if call_kind(a) != call_kind(b):
            return False
        ours = self.records.of(self.first, self.token, a)
        theirs = self.records.of(self.other, self.token, b)
        return ours is not None and theirs is not None and ours == theirs


def _after_last_loop(calls: list[str]) -> int | None:
    """Where the calls after the last module or in-place sum start; None where there is none."""
    last = [i for i, name in enumerate(calls) if is_module(name) or api_of(name) in ACCUMULATING]
    return last[-1] + 1 if last else None


def _compared(name: str, refs: list[TensorRef], own: set[str]) -> list[TensorRef]:
    """A rank's own in-place sum (``out.index_add_(0, rows, expert(x))``) without the tensor it adds
    into and its result: both hold this rank's partial sum, which the golden's one loop over every
    expert never holds (its sum so far includes the other ranks' experts). What it adds is still
    compared, and the sum of the ranks' partial sums where a collective takes them."""
    if name in own and api_of(name) in ACCUMULATING:
        return [ref for ref in refs if ref.slot != "input.0" and ref.role != "output"]
    return refs


def _is_anchor(name: str) -> bool:
    """A record every rank names alike when it is the same call: a module's, a collective's."""
    return is_module(name) or name.startswith("Distributed.")


class _Counters:
    """The next call counter no rank uses, per API (or module)."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken

    def free(self, name: str) -> str:
        match = _API_COUNTER.match(name) or _MODULE_COUNTER.match(name)
        if match is None:
            candidates = (f"{name} ({n})" for n in range(2, len(self.taken) + 3))
            return next(c for c in candidates if c not in self.taken)
        head, tail = match.group("head"), match.group("tail")
        number = int(match.group("n")) + 1
        while f"{head}{number}{tail}" in self.taken:
            number += 1
        return f"{head}{number}{tail}"


def _renamed(index: DumpIndex, names: dict[str, str], own: set[str], rank: int) -> DumpIndex:
    nodes = {
        names[n.name]: Node(
            names[n.name],
            n.type,
            names[n.parent] if n.parent is not None else None,
            n.depth,
            [names[c] for c in n.children],
        )
        for n in index.tree.nodes.values()
    }
    tokens: dict[int, dict[str, list[TensorRef]]] = {
        token: {names.get(name, name): _compared(name, refs, own) for name, refs in records.items()}
        for token, records in index.tokens.items()
    }
    # the same operator at every token: a rank's own calls keep their rank's key, marked with the rank
    stable = {
        names[name]: f"{key} (rank {rank})" if name in own else key
        for name, key in index.stable.items()
        if name in names
    }
    return replace(index, tree=NodeTree(names[index.tree.root], nodes), tokens=tokens, stable=stable)
