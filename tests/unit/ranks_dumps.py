"""Multi-rank msit ATB runs written at test time: every layer's partial sums all-reduced in bfloat16,
each rank's output summed in an order of its own (a ring starts at its own rank), one all-reduce
optionally faulty. Seeded numpy; every addition exact in float64, then rounded to bfloat16 (as a
kernel adding two bf16 values in a wider type and writing bf16 does): the same bits on every CPU."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from tui_acc.dumps.writers.atb_bin import write_bin

BF16 = ml_dtypes.bfloat16
PID_BASE = 7000


def op_name(layer: int) -> str:
    return f"{layer + 1}_LlamaLayer/1_AllReduceOperation"


def bf16_sum(values: list[np.ndarray], order: str, start: int = 0) -> np.ndarray:
    """Σ values, rounded to bf16 after every addition (``sequential``/``pairwise``), or once (``once``),
    ``start`` rotating which value comes first."""
    ordered = values[start:] + values[:start]
    if order == "once":
        return np.sum([v.astype(np.float64) for v in ordered], axis=0).astype(BF16)
    if order == "pairwise":
        level = [v.astype(BF16) for v in ordered]
        while len(level) > 1:
            pairs = [
                (level[i].astype(np.float64) + level[i + 1].astype(np.float64)).astype(BF16)
                for i in range(0, len(level) - 1, 2)
            ]
            level = pairs + ([level[-1]] if len(level) % 2 else [])
        return level[0]
    total = ordered[0].astype(BF16)
    for value in ordered[1:]:
        total = (total.astype(np.float64) + value.astype(np.float64)).astype(BF16)
    return total


def write_atb_run(
    root: Path,
    world: int,
    tokens: int = 3,
    layers: int = 2,
    *,
    fault: tuple[int, int, int] | None = None,  # (token, layer, rank): that output leaves out the next rank
    order: str = "sequential",
    skip: frozenset[tuple[int, int, int | None]] = frozenset(),  # (rank, token, layer or None: the token)
    seed: int = 0,
    shape: tuple[int, ...] = (4, 32),
    group: int | None = None,  # ranks per reduction group (consecutive), recorded as op_param's rankSize
) -> Path:
    """Write ``root/msit_dump_x/tensors/{rank}_{pid}/...``; return the tensors/ folder."""
    rng = np.random.default_rng(seed)
    tensors = root / "msit_dump_20250101_000000" / "tensors"
    for token in range(tokens):
        for layer in range(layers):
            partials = [(rng.standard_normal(shape) * 2.0).astype(BF16) for _ in range(world)]
            size = group or world
            for rank in range(world):
                if (rank, token, None) in skip or (rank, token, layer) in skip:
                    continue
                first = rank - rank % size
                kept = partials[first : first + size]
                if fault == (token, layer, rank):
                    kept = [p for r, p in enumerate(kept) if r != (rank + 1) % size]
                output = bf16_sum(kept, order, start=rank % len(kept))
                node = tensors / f"{rank}_{PID_BASE + rank}" / str(token) / f"{layer + 1}_LlamaLayer"
                write_bin(node / "0_LinearOperation" / "after" / "outtensor0.bin", partials[rank])
                folder = node / "1_AllReduceOperation"
                write_bin(folder / "before" / "intensor0.bin", partials[rank])
                write_bin(folder / "after" / "outtensor0.bin", output)
                param = {"allReduceType": "sum", "rank": rank % size, "rankSize": size, "rankRoot": 0}
                (folder / "op_param.json").write_text(json.dumps(param), encoding="utf-8")
    for rank in range(world):  # a rank that lacks every token still has its folder
        (tensors / f"{rank}_{PID_BASE + rank}").mkdir(parents=True, exist_ok=True)
    return tensors


def case_of(folder: Path) -> dict:
    """A fixture archive's ``case.json``: where its faults are."""
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def rank_folder(folder: Path, case: str, rank: int) -> Path:
    """msprobe's ``step*/rank{R}`` folder of one case of a multi-rank fixture."""
    (found,) = (folder / case).glob(f"step*/rank{rank}")
    return found
