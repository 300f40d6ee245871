"""Gathering a multi-rank dump into one, to compare it with a single-device golden.

Each tensor becomes the list of its ranks' files, merged when loaded:

* **sum** for partial sums: the inputs of an all-reduce (ATB ``AllReduceOperation``, msprobe
  ``Distributed.all_reduce``) and the outputs of the ATB operation just before one (a
  row-parallel linear). The sum of the ranks' inputs is what the single-device model computes.
* **auto** otherwise: concatenated along the dimension where the ranks together have the
  golden's size (column-parallel outputs; msit's rule), or taken from rank 0 when every rank
  holds the full tensor (replicated, as after an all-reduce) and they agree; where they do not,
  the rank farthest from the golden is compared (a collective that went wrong on one rank shows
  there, not only downstream).
* **cat:D** where the reader knows the split: concatenated along dimension D (SGLang's ``[tp]``).

See docs/formats.md §6.4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from tui_acc.dumps.dtypes import is_float
from tui_acc.dumps.model import AUTO, CONCAT, SUM, DumpError, DumpIndex, Problem, TensorRef


def gather(ranks: Sequence[DumpIndex]) -> DumpIndex:
    """One index whose tensors refer to every rank's file."""
    first = ranks[0]
    problems = [p for index in ranks for p in index.problems]
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    for token in sorted(set.intersection(*(set(index.tokens) for index in ranks))):
        nodes: dict[str, list[TensorRef]] = {}
        for name, refs in first.tokens[token].items():
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
                gathered.append(replace(ref, parts=parts, merge=merge))
            nodes[name] = gathered
        tokens[token] = nodes
    note = (
        f"gathered {len(ranks)} ranks ({', '.join(first.ranks)}): summed before all-reduce, "
        "concatenated where the golden is larger; where every rank holds the whole tensor, rank 0's, "
        "or the rank's farthest from the golden where they differ; --rank R compares one rank alone"
    )
    return replace(
        first,
        tokens=tokens,
        problems=problems,
        notes=[n for n in first.notes if "ranks" not in n] + [note],
        rank=None,
    )


def sharding(index: DumpIndex) -> str | None:
    """How a gathered dump was split, as the first lines say it ("tensor-parallel, 2 ranks"); None
    for a dump read as one. Tensor-parallel where its operators include an all-reduce or a parallel
    linear, expert-parallel where an all-to-all dispatches tokens."""
    if index.rank is not None or len(index.ranks) < 2:
        return None
    types = {node.type.lower().replace("_", "") for node in index.tree.nodes.values()}
    names = " ".join(types)
    kinds = []
    if any(word in names for word in ("allreduce", "linearparallel", "reducescatter", "allgather")):
        kinds.append("tensor-parallel")
    if any(word in names for word in ("alltoall", "distributedispatch", "distributecombine")):
        kinds.append("expert-parallel")
    return f"{' and '.join(kinds) or 'sharded'}, {len(index.ranks)} ranks"


def _same_slot(index: DumpIndex, token: int, name: str, slot: str) -> TensorRef | None:
    return next((r for r in index.tokens.get(token, {}).get(name, []) if r.slot == slot), None)


def _merge_kind(index: DumpIndex, name: str, ref: TensorRef) -> str:
    node = index.tree.nodes[name]
    if "allreduce" in node.type.lower().replace("_", "") or name.startswith("Distributed.all_reduce"):
        return SUM if ref.role == "input" else AUTO
    if ref.role == "output" and node.parent is not None:
        siblings = index.tree.nodes[node.parent].children
        position = siblings.index(name)
        following = siblings[position + 1] if position + 1 < len(siblings) else None
        if following is not None and "allreduce" in index.tree.nodes[following].type.lower():
            return SUM
    return AUTO


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
    shape = golden.shape if golden is not None else like
    if shape is None or list(first.shape) == list(shape):
        return _replicated(parts, golden)
    wanted = list(shape)
    for dim in range(first.ndim):
        sizes = [p.shape[dim] for p in parts]
        others_equal = all(
            list(p.shape[:dim]) + list(p.shape[dim + 1 :]) == wanted[:dim] + wanted[dim + 1 :] for p in parts
        )
        if others_equal and sum(sizes) == wanted[dim] and len(wanted) == first.ndim:
            return np.concatenate(list(parts), axis=dim)
    shapes = ", ".join(str(list(p.shape)) for p in parts)
    raise DumpError(f"{where}: cannot gather ranks {shapes} into the golden's {wanted}")


def _replicated(parts: Sequence[np.ndarray], golden: np.ndarray | None) -> np.ndarray:
    """The tensor every rank holds whole: rank 0's where they agree (bit for bit, as a correct
    collective leaves them), else the one farthest from the golden (or rank 0's without it)."""
    first = parts[0]
    float_kind = first.dtype.kind in "fc"

    def same(part: np.ndarray) -> bool:
        return part.shape == first.shape and bool(np.array_equal(part, first, equal_nan=float_kind))

    if golden is None or all(same(p) for p in parts[1:]):
        return first
    reference = golden.astype(np.complex128 if golden.dtype.kind == "c" else np.float64)

    def distance(part: np.ndarray) -> float:
        if part.shape != golden.shape:
            return -1.0
        with np.errstate(invalid="ignore", over="ignore"):
            gap = float(np.linalg.norm(np.nan_to_num(part.astype(reference.dtype) - reference, nan=np.inf)))
        return gap

    return max(parts, key=distance)
