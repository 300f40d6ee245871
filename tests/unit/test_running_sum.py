"""Partial sums summed host by host (cluster/running_sum.py): however the ranks are cut between hosts,
the result is ``gather.merge_parts``'s SUM bit for bit (the local ``--gather``), and what travels is
the smaller of the running sum and the parts as read."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tui_acc.cluster.running_sum import RunningSum, extend, finished
from tui_acc.dumps.gather import merge_parts
from tui_acc.dumps.model import SUM

BF16 = np.dtype(ml_dtypes.bfloat16)


def _parts(dtype: np.dtype, ranks: int, seed: int) -> list[np.ndarray]:
    """Ranks' partial sums of one tensor: values of very different sizes, so that float64's rounding
    of their sum depends on the order they are added in."""
    rng = np.random.default_rng(seed)
    shape = (3, 257)
    span = 4 if dtype == np.float16 else 8  # float16 ends at 65504
    parts = []
    for _ in range(ranks):
        values = rng.standard_normal(shape) * 10.0 ** rng.integers(-span, span, shape)
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(shape)
        parts.append(values.astype(dtype))
    return parts


def _wide_sum(parts: list[np.ndarray]) -> np.ndarray:
    """The parts added in the order given, in complex128 (float64 for real parts), not rounded."""
    total = parts[0].astype(np.complex128)
    for part in parts[1:]:
        total += part
    return total


def _hosts(parts: list[np.ndarray], cuts: list[int]) -> np.ndarray:
    """The parts summed host by host, each host's ranks ending at the next cut."""
    state: RunningSum | None = None
    start = 0
    for end in [*cuts, len(parts)]:
        state = extend(state, parts[start:end])
        start = end
    assert state is not None and state.count == len(parts)
    return finished(state)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.complex64)])
@pytest.mark.parametrize("cuts", [[1], [3], [1, 2, 5], [4, 7]])
def test_any_cut_between_hosts_gives_the_local_merges_bits(dtype: np.dtype, cuts: list[int]) -> None:
    parts = _parts(dtype, 8, seed=len(cuts) * 31 + cuts[0])
    local = merge_parts(parts, SUM, None, Path("t.pt"))
    summed = _hosts(parts, cuts)
    assert summed.dtype == local.dtype and summed.tobytes() == local.tobytes()
    # and the order matters here: the ranks added the other way round differ in float64
    assert dtype == np.float16 or not np.array_equal(_wide_sum(parts[::-1]), _wide_sum(parts))


def test_parts_of_several_dtypes_keep_the_float64_sum() -> None:
    parts = [*_parts(BF16, 2, seed=1), *_parts(np.dtype(np.float32), 2, seed=2)]
    local = merge_parts(parts, SUM, None, Path("t.pt"))
    assert local.dtype == np.float64
    assert _hosts(parts, [1, 3]).tobytes() == local.tobytes()


def test_the_smaller_of_the_sum_and_the_parts_travels() -> None:
    """One bfloat16 rank: its part as read (2 bytes an element), not a sum (4 or 8). Eight: a sum of
    them, in float32 where float32 holds it exactly (small integers do), else float64."""
    one = extend(None, _parts(BF16, 1, seed=3))
    assert one.folded == 0 and len(one.pending) == 1 and one.nbytes == 3 * 257 * 2
    small = [np.full((3, 257), rank, dtype=BF16) for rank in range(8)]
    eight = extend(None, small)
    assert eight.folded == 8 and eight.total is not None and eight.total.dtype == np.float32
    assert eight.nbytes == 3 * 257 * 4
    wide = extend(None, _parts(BF16, 8, seed=4))
    assert wide.folded == 8 and wide.total is not None and wide.total.dtype == np.float64


def test_a_nan_s_payload_is_kept_bit_for_bit() -> None:
    """float32 holds a NaN, but not its payload's low bits: such a sum is sent in float64."""
    payload = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0]
    parts = [np.full((4, 4), 1.0, dtype=np.float64) for _ in range(8)]
    parts[0][0, 0] = payload
    state = extend(None, parts)
    assert state.total is not None and state.total.dtype == np.float64
    local = merge_parts(parts, SUM, None, Path("t.pt"))
    assert finished(state).tobytes() == local.tobytes()
