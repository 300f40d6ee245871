"""A router's choice of experts against its own scores: a flip between near-equal scores, or a bug.

An MoE router scores every expert and keeps the top k (Qwen2-MoE's and Mixtral's routers return the
scores, the kept weights and the chosen indices; msprobe, msit and ATB dump all three). In a bf16
port the scores carry bf16's rounding, so where two experts' golden scores are nearly equal the
port may keep the other one: the indices then differ from the golden's, every expert's output after
them differs by design, and no threshold or error model of integers can tell that from a router
that picks wrongly. What tells them apart is the router's own output: a correct router's indices
are the top k of its own scores; a flip then only says the scores were near a tie, and the scores'
own error is what to judge. Indices that are not the top k of their own scores are the router's
fault.

Read from the test side's dumped tensors (``LocalChecks.routing``); nothing here judges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tui_acc.pairing import NodePair, TensorPair
from tui_acc.rows import TensorRow
from tui_acc.tolerances.thresholds import is_float


@dataclass(frozen=True)
class Selection:
    """A top-k selection among a node's outputs: its scores (float, ``[..., E]``) and the indices
    it kept (integer, ``[..., k]``, k < E, the same leading dimensions)."""

    scores: TensorPair
    indices: TensorPair


@dataclass(frozen=True)
class Routing:
    """The test side's selection against its own scores, row by row (a row: one token's choice)."""

    rows: int
    flipped: int  # rows whose kept experts differ from the golden's
    wrong: int  # rows whose kept experts are not the top k of the test's own scores
    first_wrong: int | None = None  # the first such row

    @property
    def consistent(self) -> bool:
        """Every row keeps the top k of its own scores."""
        return self.wrong == 0


def selection_of(node: NodePair, rows: Sequence[TensorRow]) -> Selection | None:
    """The node's top-k selection, by the shapes its outputs' rows record (None: it has none)."""
    by_slot = {row.get("slot"): row for row in rows if row.get("role") == "output"}
    outputs = [pair for pair in node.outputs if pair.slot in by_slot]
    integers = [p for p in outputs if not is_float(by_slot[p.slot].get("test_dtype"))]
    floats = [p for p in outputs if is_float(by_slot[p.slot].get("test_dtype"))]
    for kept in integers:
        shape = _dims(by_slot[kept.slot].get("test_shape"))
        if not shape:
            continue
        for scored in floats:
            dims = _dims(by_slot[scored.slot].get("test_shape"))
            if dims and len(dims) == len(shape) and dims[:-1] == shape[:-1] and dims[-1] > shape[-1]:
                return Selection(scored, kept)
    return None


def check(scores: np.ndarray, kept: np.ndarray, golden_kept: np.ndarray) -> Routing:
    """Whether each row of ``kept`` is the top k of the same row of ``scores`` (ties either way),
    and how many rows differ from ``golden_kept``."""
    width, k = scores.shape[-1], kept.shape[-1]
    scores = np.asarray(scores, dtype=np.float64).reshape(-1, width)
    kept = np.asarray(kept).reshape(-1, k).astype(np.int64)
    golden = np.asarray(golden_kept).reshape(-1, k).astype(np.int64)
    wrong: list[int] = []
    for row, (values, chosen) in enumerate(zip(scores, kept, strict=True)):
        if chosen.min() < 0 or chosen.max() >= width or len(set(chosen.tolist())) != k:
            wrong.append(row)
            continue
        others = np.delete(values, chosen)
        # the kept ones are at least as large as every one left out: the top k, ties either way
        if others.size and values[chosen].min() < others.max():
            wrong.append(row)
    flipped = (
        sum(
            1 for ours, theirs in zip(kept, golden, strict=True) if set(ours.tolist()) != set(theirs.tolist())
        )
        if golden.shape == kept.shape
        else len(kept)
    )
    return Routing(len(kept), flipped, len(wrong), wrong[0] if wrong else None)


def _dims(shape: object) -> list[int] | None:
    text = str(shape or "").strip("[]")
    try:
        return [int(d) for d in text.split(",")] if text else None
    except ValueError:
        return None
