"""Gathering a multi-rank dump into one, to compare it with a single-device golden.

Each tensor becomes the list of its ranks' files, merged when loaded:

* **sum** for partial sums: the inputs of an all-reduce (ATB ``AllReduceOperation``, msprobe
  ``Distributed.all_reduce``) and the outputs of the operation just before one in its module (a
  row-parallel linear: an ATB ``LinearOperation``, msprobe's ``Functional.linear``). The sum of
  the ranks' inputs is what the single-device model computes.
* **auto** otherwise: concatenated along the dimension where the ranks together have the
  golden's size, dimensions of 1 aside (column-parallel outputs; msit's rule), or, when every rank
  holds as many elements as the golden (replicated, as after an all-reduce), rank 0's where they
  agree; where they do not, their sum if it is far closer to the golden than any of them (partial
  sums no collective beside them announced), else the rank farthest from the golden (a collective
  that went wrong on one rank shows there, not only downstream).
* **cat:D** where the reader knows the split: concatenated along dimension D (SGLang's ``[tp]``).

See docs/formats.md §6.4.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from tui_acc.dumps.dtypes import is_complex, is_float
from tui_acc.dumps.model import AUTO, CONCAT, SUM, DumpError, DumpIndex, NodeTree, Problem, TensorRef
from tui_acc.dumps.sharding import collective_kind

# ranks that disagree on a tensor they all hold are its partial sums where their sum is this many
# times closer to the golden than any one of them
PARTIAL_SUM_MARGIN = 4.0


def gather(
    ranks: Sequence[DumpIndex],
    origins: Mapping[str, tuple[int, str]] | None = None,
    orders: Mapping[str, Sequence[str]] | None = None,
) -> DumpIndex:
    """One index whose tensors refer to every rank's file. A node only some ranks ran (a routed
    expert, which only the rank that owns it holds) is that rank's, whole: its tree and its files.
    ``origins`` and ``orders``: the ranks' own calls and where they go (rank_alignment.py)."""
    first = ranks[0]
    problems = [p for index in ranks for p in index.problems]
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    for token in sorted(set.intersection(*(set(index.tokens) for index in ranks))):
        nodes: dict[str, list[TensorRef]] = {}
        for name, refs in first.tokens[token].items():
            if not all(name in index.tokens[token] for index in ranks[1:]):
                nodes[name] = list(refs)  # not every rank ran it (an expert rank 0 owns): rank 0's whole
                continue
            elsewhere = _another_call(ranks, name)
            if elsewhere is not None:  # one name, different calls (per-rank counters): never merged
                problems.append(Problem(name, f"token {token}: {elsewhere}; rank 0's compared alone"))
                nodes[name] = list(refs)
                continue
            gathered = []
            for ref in refs:
                others = [_same_slot(index, token, name, ref.slot) for index in ranks[1:]]
                if not ref.has_data or any(o is None or not o.has_data for o in others):
                    problems.append(
                        Problem(str(ref.path), f"token {token}: not on every rank with data; not gathered")
                    )
                    continue
                parts = (ref.path, *(o.path for o in others if o is not None))
                # a reader that knows how its ranks split a tensor (SGLang's dims annotation) says so
                merge = ref.merge or _merge_kind(first, name, ref)
                records = (ref.recorded, *(o.recorded for o in others if o is not None))
                gathered.append(replace(ref, parts=parts, merge=merge, part_records=records))
            nodes[name] = gathered
        for index in ranks[1:]:  # what rank 0 did not run at this token: the first holder's, whole
            for name, refs in index.tokens[token].items():
                nodes.setdefault(name, list(refs))
        tokens[token] = nodes
    note = (
        f"gathered {len(ranks)} ranks ({', '.join(first.ranks)}): summed before all-reduce, "
        "concatenated where the golden is larger; where every rank holds the whole tensor, rank 0's if "
        "they agree, else their sum where it is the golden's, else the rank farthest from it; what "
        "one rank ran alone, that rank's; --rank R compares one rank alone"
    )
    tree = _union_tree(ranks)
    for parent, order in (orders or {}).items():
        if parent in tree.nodes:
            children = tree.nodes[parent].children
            placed = [name for name in order if name in tree.nodes]
            children[:] = placed + [name for name in children if name not in set(placed)]
    return replace(
        first,
        tree=tree,
        tokens=tokens,
        problems=problems,
        notes=[n for n in first.notes if "ranks" not in n] + [note],
        rank=None,
        origins=dict(origins or {}),
        # the same operator at every token: rank 0's key, else the rank that ran it
        stable={key: value for index in reversed(ranks) for key, value in index.stable.items()},
        call_tree_doubted=any(index.call_tree_doubted for index in ranks),
        call_tree_lost=any(index.call_tree_lost for index in ranks),
    )


def _another_call(ranks: Sequence[DumpIndex], name: str) -> str | None:
    """Why a name all ranks hold is not one call (msprobe numbers API calls per rank: where the ranks
    ran different experts, ``Functional.linear.40`` is another linear on each), or None: its parent
    module is another on some rank."""
    parent = ranks[0].tree.nodes[name].parent
    for rank, index in enumerate(ranks[1:], start=1):
        other = index.tree.nodes.get(name)
        if other is not None and other.parent != parent:
            return f"rank {rank} ran it in {other.parent}, rank 0 in {parent}"
    return None


def _union_tree(ranks: Sequence[DumpIndex]) -> NodeTree:
    """Rank 0's tree with what only other ranks ran added where they ran it: before the nearest
    sibling after it that the tree has (after what lower ranks ran there alone: experts in the order
    of their ids), else after the nearest one before it."""
    tree = ranks[0].tree.copy()
    for index in ranks[1:]:
        for node in index.tree.preorder():
            if node.name in tree.nodes or node.parent is None or node.parent not in tree.nodes:
                continue
            tree.nodes[node.name] = replace(node, children=[])
            theirs = index.tree.nodes[node.parent].children
            mine = tree.nodes[node.parent].children
            position = theirs.index(node.name)
            following = [mine.index(s) for s in theirs[position + 1 :] if s in mine]
            before = [mine.index(s) + 1 for s in theirs[:position] if s in mine]
            mine.insert(following[0] if following else max(before, default=0), node.name)
    return tree


def _same_slot(index: DumpIndex, token: int, name: str, slot: str) -> TensorRef | None:
    return next((r for r in index.tokens.get(token, {}).get(name, []) if r.slot == slot), None)


def _merge_kind(index: DumpIndex, name: str, ref: TensorRef) -> str:
    node = index.tree.nodes[name]
    if _all_reduce(index, name):
        return SUM if ref.role == "input" else AUTO
    if ref.role == "output" and node.parent is not None:
        siblings = index.tree.nodes[node.parent].children
        position = siblings.index(name)
        following = siblings[position + 1] if position + 1 < len(siblings) else None
        if following is not None and _all_reduce(index, following):
            return SUM
    return AUTO


def _all_reduce(index: DumpIndex, name: str) -> bool:
    """ATB's ``AllReduceOperation`` (or runner), msprobe's ``Distributed.all_reduce.N.forward`` (type
    ``all_reduce``); not a fused operation that holds one (its inputs are not what is reduced)."""
    return collective_kind(index.tree.nodes[name].type, name) == "all_reduce"


def merge_parts(
    parts: Sequence[np.ndarray], how: str, like: np.ndarray | Sequence[int] | None, where: Path
) -> np.ndarray:
    """Merge one tensor's ranks, shaped like the golden (``like``: its values, or its shape) where
    that decides it. A tensor every rank holds whole is one rank's; where the ranks disagree on it
    (a collective that gave one rank a wrong result), the rank farthest from the golden's values."""
    if how == SUM:
        # in float64, which holds every rank's values exactly (complex parts stay complex), then
        # rounded once to the ranks' dtype: what a correct all-reduce of them gives
        wide = np.complex128 if any(p.dtype.kind == "c" for p in parts) else np.float64
        total = parts[0].astype(wide)  # one rank at a time: never every rank widened at once
        for part in parts[1:]:
            total += part
        dtypes = {p.dtype for p in parts}
        return total.astype(parts[0].dtype) if len(dtypes) == 1 and is_float(parts[0]) else total
    if how.startswith(CONCAT):  # "cat:1": along the dimension the dump's own annotation names
        dim = int(how.removeprefix(CONCAT))
        if not all(p.ndim > dim for p in parts):
            shapes = ", ".join(str(list(p.shape)) for p in parts)
            raise DumpError(f"{where}: ranks {shapes} have no dimension {dim} to concatenate along")
        return np.concatenate(list(parts), axis=dim)
    first = parts[0]
    golden = like if isinstance(like, np.ndarray) else None
    shape = tuple(golden.shape if golden is not None else like) if like is not None else None
    # the golden's leading 1 (a batch of one) against a rank's [tokens, hidden]: elements decide
    if shape is None or first.size == math.prod(shape):
        return _replicated(parts, golden)
    along = _concat_dim([p.shape for p in parts], shape)
    if along is not None:
        return np.concatenate(list(parts), axis=along)
    shapes = ", ".join(str(list(p.shape)) for p in parts)
    raise DumpError(f"{where}: cannot gather ranks {shapes} into the golden's {list(shape)}")


def _concat_dim(shapes: Sequence[Sequence[int]], golden: Sequence[int]) -> int | None:
    """The dimension along which the ranks' shapes together make the golden's (dimensions of 1 aside)."""
    for dim in range(len(shapes[0])):
        others = [list(s[:dim]) + list(s[dim + 1 :]) for s in shapes]
        if any(o != others[0] for o in others):
            continue
        merged = list(shapes[0])
        merged[dim] = sum(s[dim] for s in shapes)
        if _squeezed(merged) == _squeezed(golden):
            return dim
    return None


def part_regions(
    shapes: Sequence[Sequence[int]], how: str, golden: Sequence[int]
) -> tuple[list[int], list[tuple[slice, ...]]] | None:
    """Where each rank's part lies in the tensor ``merge_parts`` makes of them: that tensor's shape
    and each part's index into it (``()``: the whole, a tensor every rank holds). None where a part is
    no region of it: partial sums, or shapes that do not merge."""
    dim: int | None
    if how == SUM or not shapes:
        return None
    if how.startswith(CONCAT):
        dim = int(how.removeprefix(CONCAT))
    elif math.prod(shapes[0]) == math.prod(golden):
        return list(shapes[0]), [() for _ in shapes]
    else:
        dim = _concat_dim(shapes, golden)
    if dim is None or not all(len(s) > dim for s in shapes):
        return None
    merged = list(shapes[0])
    merged[dim] = sum(s[dim] for s in shapes)
    regions, start = [], 0
    for shape in shapes:
        regions.append((*([slice(None)] * dim), slice(start, start + shape[dim])))
        start += shape[dim]
    return merged, regions


def _squeezed(shape: Sequence[int]) -> list[int]:
    return [d for d in shape if d != 1]


def _replicated(parts: Sequence[np.ndarray], golden: np.ndarray | None) -> np.ndarray:
    """The tensor every rank holds whole: rank 0's where they agree (bit for bit, as a correct
    collective leaves them). Where they do not and the golden is at hand: their sum, where it is
    far closer to the golden than any one of them (partial sums that no collective beside them
    announced: a vocabulary-parallel embedding's masked lookup); else the rank farthest from the
    golden (a collective that gave one rank a wrong result). Without the golden, rank 0's."""
    first = parts[0]
    float_kind = is_float(first) or is_complex(first)  # bfloat16 too (numpy's kind is "V" for it)

    def same(part: np.ndarray) -> bool:
        return part.shape == first.shape and bool(np.array_equal(part, first, equal_nan=float_kind))

    if golden is None or all(same(p) for p in parts[1:]):
        return first
    wide = np.complex128 if golden.dtype.kind == "c" or first.dtype.kind == "c" else np.float64
    reference = golden.astype(wide).reshape(-1)

    def distance(values: np.ndarray) -> float:
        with np.errstate(invalid="ignore", over="ignore"):
            gap = np.nan_to_num(values.astype(wide).reshape(-1) - reference, nan=np.inf)
        return float(np.linalg.norm(gap))

    if float_kind:
        total = merge_parts(parts, SUM, None, Path())
        if distance(total) * PARTIAL_SUM_MARGIN < min(distance(p) for p in parts):
            return total
    return max(parts, key=distance)
