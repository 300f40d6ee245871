"""A group's golden built node by node (collectives/partial_sums.py: each node adds its ranks' inputs to
what the nodes before it sent) has the very bits the local check's ``goldens_of`` gives from every
input at once, wherever the ranks are cut between nodes."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from tui_acc.collectives.partial_sums import (
    RunningInputs,
    _folded,
    complete,
    extend,
    foldable,
    narrowest,
)
from tui_acc.collectives.rank_set import Collective
from tui_acc.collectives.tensors import CheckFailed, goldens_of

DTYPES = (ml_dtypes.bfloat16, np.float16, np.float32)


def _inputs(rng: np.random.Generator, ranks: int, numel: int) -> list[np.ndarray]:
    """Each rank's input in one dtype, values over many binades (sums that round in float64), with
    signed zeros, infinities and NaNs here and there."""
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    found = []
    for _ in range(ranks):
        values = rng.standard_normal(numel) * 2.0 ** rng.integers(-60, 60, numel)
        specials = rng.random(numel)
        values[specials < 0.03] = -0.0
        values[(specials >= 0.03) & (specials < 0.04)] = np.inf
        values[(specials >= 0.04) & (specials < 0.05)] = -np.inf
        values[(specials >= 0.05) & (specials < 0.06)] = np.nan
        with np.errstate(over="ignore"):
            found.append(values.astype(dtype).reshape(2, -1) if numel % 2 == 0 else values.astype(dtype))
    return found


def _cuts(rng: np.random.Generator, ranks: int) -> list[int]:
    """Where the ranks are cut into runs held by one node each (at least one run)."""
    return sorted(int(c) for c in rng.choice(np.arange(1, ranks), size=rng.integers(0, ranks), replace=False))


def _same_bits(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))
        for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("reduction", ["sum", "avg", "prod", "max", "min"])
@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("ranks", [2, 3, 4, 8, 9])
def test_folding_node_by_node_gives_the_bits_of_every_input_at_once(
    kind: str, reduction: str, ranks: int
) -> None:
    rng = np.random.default_rng([ranks, len(kind), len(reduction)])
    collective = Collective(0, "Distributed.all_reduce.0.forward", kind, list(range(ranks)))  # type: ignore[arg-type]
    params: list[dict[str, object]] = [{} for _ in range(ranks)]
    for _ in range(12):
        inputs = _inputs(rng, ranks, ranks * int(rng.choice([1, 2, 9, 250])))
        assert foldable(collective, reduction, [x.shape for x in inputs])  # type: ignore[arg-type]
        want = goldens_of(inputs, collective, reduction, params)  # type: ignore[arg-type]
        state = RunningInputs(reduction)  # type: ignore[arg-type]
        bounds = [0, *_cuts(rng, ranks), ranks]
        for start, end in itertools.pairwise(bounds):  # each node folds its run in
            state = _folded(
                RunningInputs(reduction, state.folded, state.total, state.magnitude, inputs[start:end])
            )  # type: ignore[arg-type]
        got = complete(state, collective, params, ranks)
        assert _same_bits(got[0], want[0]) and _same_bits(got[1], want[1])


def test_what_travels_is_the_smaller_of_the_inputs_and_their_running_sum() -> None:
    one = [np.ones((64, 64), dtype=ml_dtypes.bfloat16)]
    kept = extend(None, one, "sum", fold=True)
    assert kept.folded == 0 and kept.nbytes == 64 * 64 * 2  # a bf16 input: 2 bytes an element, not 16
    many = [np.full((64, 64), r + 2.0**-12, dtype=np.float64) for r in range(12)]
    summed = extend(kept, many, "sum", fold=True)
    assert summed.folded == 13 and not summed.pending
    assert summed.total is not None and summed.total.dtype == np.float32  # 19 bits: float32, not bf16
    assert summed.nbytes == 2 * 64 * 64 * 4
    assert extend(None, many, "sum", fold=False).folded == 0  # a copy (all-gather) never folds


def test_only_what_shares_reduces_row_by_row_is_folded() -> None:
    reduce = Collective(0, "op", "all_reduce", [0, 1])
    assert foldable(reduce, "sum", [(4, 2), (4, 2)])
    assert not foldable(reduce, "sum", [(1,), (1,)])  # numpy sums a one-column stack pairwise
    assert not foldable(reduce, "sum", [(4, 2), (8,)])  # unequal shapes: goldens_of names them
    assert not foldable(reduce, "sum", [(4, 2), None])
    assert not foldable(Collective(0, "op", "all_gather", [0, 1]), "gather", [(4,), (4,)])


def test_a_scatter_that_does_not_split_is_refused_as_the_local_check_refuses_it() -> None:
    collective = Collective(0, "Distributed.reduce_scatter_tensor.0.forward", "reduce_scatter", [0, 1, 2])
    inputs = [np.ones(4, dtype=np.float32) for _ in range(3)]
    with pytest.raises(CheckFailed) as local:
        goldens_of(inputs, collective, "sum", [{}, {}, {}])
    state = _folded(RunningInputs("sum", pending=inputs))
    with pytest.raises(CheckFailed) as spread:
        complete(state, collective, [{}, {}, {}], 3)
    assert str(spread.value) == str(local.value)


def test_the_narrowest_dtype_gives_back_every_bit() -> None:
    rng = np.random.default_rng(3)
    for values in (
        rng.standard_normal(1000),
        rng.standard_normal(1000).astype(np.float32).astype(np.float64),
        np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1e-320, 65504.0]),
    ):
        narrow = narrowest(values)
        assert np.array_equal(narrow.astype(np.float64).view(np.uint64), values.view(np.uint64))
    assert narrowest(np.array([1.0, 0.5, -0.0])).dtype == ml_dtypes.bfloat16
