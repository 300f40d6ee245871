"""A gathered tensor rank by rank: each rank's part against the region of the golden it stands for
(its slice of a concatenated tensor, or the whole where every rank holds it), so that the detail can
say which rank's shard is off. Partial sums (an all-reduce's inputs, or ranks whose sum the merge
took) stand for no region: none."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from tui_acc import numbers
from tui_acc.dumps.gather import merge_parts, part_regions
from tui_acc.dumps.model import TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import load_tensor
from tui_acc.metrics.kernels import compare_tensors


def by_rank(
    golden: np.ndarray, ref: TensorRef, policy: LoadPolicy, parts: list[np.ndarray] | None = None
) -> str | None:
    """``rank 0 [:, 0:16]: cosine 0.999998, max abs 1.2e-03; rank 1 [:, 16:32]: ...``, or None where the
    test side is one file, partial sums, or parts that do not lie in the golden's shape. Each part is
    read again (mapped: the pages the merge read) and compared with its region alone; ``parts``: the
    parts already at hand (on a Ray node, some sent from the nodes holding them)."""
    if len(ref.parts) < 2:
        return None
    if parts is None:
        parts = [load_tensor(path, policy) for path in ref.parts]
    layout = part_regions([p.shape for p in parts], ref.merge, golden.shape)
    if layout is None or math.prod(layout[0]) != golden.size:
        return None
    if not any(layout[1]) and not any(merge_parts(parts, ref.merge, golden, ref.path) is p for p in parts):
        return None  # every rank holds as many elements, and the merge took their sum: partial sums
    shaped = golden.reshape(layout[0])
    return "; ".join(
        rank_said(rank, region, compare_tensors(shaped[region], part, kl=False))
        for rank, (part, region) in enumerate(zip(parts, layout[1], strict=True))
    )


def rank_said(rank: int, region: tuple[slice, ...], found: Mapping[str, object]) -> str:
    """``rank 1 [:, 16:32]: cosine 0.999998, max abs 1.2e-03``: one part's row (``found``) said."""
    where = f" {_indexed(region)}" if region else ""
    return (
        f"rank {rank}{where}: cosine {numbers.cosine(_float(found['cosine']))}, "
        f"max abs {numbers.number(_float(found['max_abs_err']))}"
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _indexed(region: tuple[slice, ...]) -> str:
    """``[:, 16:32]``"""
    return "[" + ", ".join(":" if s == slice(None) else f"{s.start}:{s.stop}" for s in region) + "]"
