"""msprobe ranks that ran different calls, put into one namespace before they are gathered.

An expert-parallel rank runs the experts it owns and no other: its module records are named by
their global path (``model.layers.1.mlp.experts.3``), but msprobe numbers API calls per rank, so
after the first expert loop one name is another call on each rank (``Functional.linear.50`` is an
expert's projection on rank 0 and the router on rank 1). Here each rank's records are matched with
rank 0's, parent by parent, at every token:

* **anchors**: a module record, or a collective (``Distributed.*``: every rank calls the same
  collectives in the same order), of the same name under the same parent on both ranks;
* **between two anchors**, where neither rank ran a module, the same kinds of call in the same
  order are the same calls (a tensor-parallel shard differs in its values, not in what it is);
  where a rank ran a module only it holds (an expert), the calls both ranks recorded alike (the
  same arguments, the same statistics in dump.json: replicated work such as the router's softmax)
  are the same calls up to the first that differs, and the rest are that rank's own: its expert
  loop, kept whole and placed after the lower ranks' own calls (experts in the order of their ids).

A rank's own call whose name another rank already uses gets the next free call counter of its API;
``origins`` keeps the name its rank's dump.json knows it by. See docs/formats.md §6.4.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Any

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef, logical_name
from tui_acc.dumps.msprobe.passes import api_of, is_module
from tui_acc.dumps.msprobe.records import dump_json_of, record_of

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
    """The ranks in one namespace: rank 0 as read, every other rank renamed; ``origins``: a renamed
    call's rank and its name in that rank's dump.json."""

    ranks: list[DumpIndex]
    origins: dict[str, tuple[int, str]]
    notes: list[str]


def alignable(index: DumpIndex) -> bool:
    """Whether a rank's records can be matched with another's: msprobe's, with module records (level
    L0 or mix) to anchor them. At L1 nothing marks where an expert's calls begin: two ranks' loops of
    the same length would be taken for the same calls."""
    return index.format == "msprobe" and any(is_module(name) for name in index.tree.nodes)


def align_ranks(ranks: Sequence[DumpIndex]) -> Aligned:
    """Every rank's records named as rank 0's where they are the same call; see the module's doc."""
    first = ranks[0]
    taken = set(first.tree.nodes)
    counters = _Counters(taken)
    origins: dict[str, tuple[int, str]] = {}
    aligned = [first]
    common = sorted(set.intersection(*(set(index.tokens) for index in ranks)))
    for rank, index in enumerate(ranks[1:], start=1):
        names: dict[str, str] = {}
        matcher = _Matcher(first, index)
        for token in common:
            matcher.token = token
            matcher.walk(first.tree.root, index.tree.root, names)
        own = [node.name for node in index.tree.preorder() if node.name not in names]
        for name in own:  # its own calls, and what no common token holds
            names[name] = counters.free(name) if name in taken else name
            taken.add(names[name])
            origins[names[name]] = (rank, name)
        aligned.append(_renamed(index, names, set(own), rank))
    compared = {name for index in aligned[1:] for records in index.tokens.values() for name in records}
    alone = sum(1 for name in origins if name in compared)
    said = [f"{alone} records that one rank ran alone (each rank its own experts) are taken whole from it"]
    accumulating = any(api_of(name) in ACCUMULATING for _, name in origins.values())
    return Aligned(
        aligned, origins, [*said, *([ACCUMULATOR_NOTE] if accumulating else [])] if origins else []
    )


class _Matcher:
    """Rank ``other``'s children matched with ``first``'s, parent by parent, at one token."""

    def __init__(self, first: DumpIndex, other: DumpIndex) -> None:
        self.first, self.other = first, other
        self.token = 0

    def walk(self, mine: str, theirs: str, names: dict[str, str]) -> None:
        names[theirs] = mine
        at_root = mine == self.first.tree.root
        records = (self.first.tokens[self.token], self.other.tokens[self.token])
        # the root's children are every token's top calls: this token's only
        left = [c for c in self.first.tree.children(mine) if not at_root or c in records[0]]
        right = [c for c in self.other.tree.children(theirs) if not at_root or c in records[1]]
        for a, b in self._pairs(left, right):
            self.walk(a, b, names)

    def _pairs(self, left: list[str], right: list[str]) -> list[tuple[str, str]]:
        marked = ([n for n in left if _is_anchor(n)], [n for n in right if _is_anchor(n)])
        anchors = [
            (marked[0][block.a + i], marked[1][block.b + i])
            for block in SequenceMatcher(None, *marked, autojunk=False).get_matching_blocks()
            for i in range(block.size)
        ]
        pairs = list(anchors)
        starts = (0, 0)
        for end in [*anchors, (None, None)]:
            stop_left = left.index(end[0]) if end[0] is not None else len(left)
            stop_right = right.index(end[1]) if end[1] is not None else len(right)
            pairs += self._segment(left[starts[0] : stop_left], right[starts[1] : stop_right])
            starts = (stop_left + 1, stop_right + 1)
        return pairs

    def _segment(self, left: list[str], right: list[str]) -> list[tuple[str, str]]:
        """The same calls of two runs of calls between anchors (see the module's doc)."""
        if not any(is_module(n) for n in (*left, *right)) and [_kind(n) for n in left] == [
            _kind(n) for n in right
        ]:
            return list(zip(left, right, strict=True))
        same = []
        for a, b in zip(left, right, strict=False):
            if _kind(a) != _kind(b) or self._recorded(self.first, a) != self._recorded(self.other, b):
                break
            same.append((a, b))
        return same

    def _recorded(self, index: DumpIndex, name: str) -> str | None:
        """The call's record as dump.json holds it, its files' names aside: its arguments, and each
        tensor's dtype, shape and statistics (None: no record found, which matches nothing)."""
        refs = index.tensors(self.token, name)
        dump_json = dump_json_of(refs)
        record = record_of(dump_json, name, index.load_policy) if dump_json is not None else None
        return json.dumps(_without_files(record), sort_keys=True) if record is not None else None


def _compared(name: str, refs: list[TensorRef], own: set[str]) -> list[TensorRef]:
    """A rank's own in-place sum (``out.index_add_(0, rows, expert(x))``) without the tensor it adds
    into and its result: both hold this rank's partial sum, which the golden's one loop over every
    expert never holds (its sum so far includes the lower ranks' experts). What it adds is still
    compared, and the sum of the ranks' partial sums where a collective takes them."""
    if name in own and api_of(name) in ACCUMULATING:
        return [ref for ref in refs if ref.slot != "input.0" and ref.role != "output"]
    return refs


def _without_files(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_files(v) for k, v in value.items() if k != "data_name"}
    if isinstance(value, list):
        return [_without_files(v) for v in value]
    return value


def _is_anchor(name: str) -> bool:
    """A record every rank names alike when it is the same call: a module's, a collective's."""
    return is_module(name) or name.startswith("Distributed.")


def _kind(name: str) -> str:
    return api_of(name) or logical_name(name)


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
