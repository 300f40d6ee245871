"""A collective's tensors on each rank, and the golden every rank's output is held to.

msprobe records a collective in place (core/dump/data_dump/data_processor/base.py,
``analyze_forward_output``: a distributed API's output is its arguments after the call): its input
is the argument before the call, its output the same argument after it. ATB operations have
``intensor0`` / ``outtensor0``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tui_acc.collectives.bound import Reduction
from tui_acc.collectives.rank_set import Collective, RankSet
from tui_acc.dumps import TensorRef
from tui_acc.errors import TuiAccError

if TYPE_CHECKING:
    import numpy as np


class CheckFailed(TuiAccError):
    """What stops one collective (or one rank of it) from being judged; the message names the file."""


def slots_of(refs: list[TensorRef], collective: Collective) -> tuple[str, str]:
    """(input slot, output slot) of a collective's record: ATB's, or msprobe's in-place arguments."""
    if any(ref.slot.startswith(("intensor", "outtensor")) for ref in refs):
        return "intensor0", "outtensor0"
    if collective.kind == "all_reduce":
        return "input.0", "output.0"
    return "input.1", "output.0"  # reduce_scatter*(output, input) and all_gather*(output, input)


def load_slot(ranks: RankSet, rank: int, refs: list[TensorRef], slot: str, role: str) -> np.ndarray:
    """The tensor in ``slot`` (a list argument's items concatenated along dimension 0)."""
    import numpy as np

    from tui_acc.dumps.tensors import TensorLoadError, load_tensor

    index = ranks.indexes[rank]
    assert index is not None  # refs come from a readable rank
    # the slot itself; else its items (msprobe's list arguments: input.1.0, input.1.1, ...). Never
    # ATB's intensor0.after (an input dumped again after the run) beside intensor0.
    chosen = [ref for ref in refs if ref.slot == slot] or sorted(
        (ref for ref in refs if ref.slot.startswith(slot + ".")),
        key=lambda ref: [int(p) if p.isdigit() else 0 for p in ref.slot[len(slot) :].split(".") if p],
    )
    where = f"rank {rank} ({index.data_dir})"
    if not chosen:
        raise CheckFailed(f"{where}: no {role} tensor ({slot}) recorded")
    if any(not ref.has_data for ref in chosen):
        raise CheckFailed(f"{where}: {chosen[0].location}: statistics only, no {role} tensor data")
    try:
        parts = [load_tensor(ref.path, index.load_policy) for ref in chosen]
    except TensorLoadError as exc:
        raise CheckFailed(f"{where}: {exc}") from exc
    if len(parts) == 1:
        return parts[0]
    try:
        return np.concatenate([p.reshape(-1) for p in parts])
    except ValueError as exc:
        raise CheckFailed(f"{where}: {role} {slot}: parts do not concatenate ({exc})") from exc


def goldens_of(
    inputs: list[np.ndarray], collective: Collective, reduction: Reduction, params: list[dict[str, Any]]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each rank's golden and the magnitude its bound scales with, flat float64 (``params``: what each
    rank records of its call: an all-to-all's split)."""
    from tui_acc.dumps.dtypes import widened
    from tui_acc.replay.collective import sends_of, shares

    try:
        sends = (
            [sends_of(p, x.shape) for p, x in zip(params, inputs, strict=True)]
            if collective.kind == "all_to_all"
            else None
        )
        return shares([widened(x) for x in inputs], collective.kind, reduction, sends)
    except ValueError as exc:
        raise CheckFailed(f"{collective.op}: {exc}") from exc
