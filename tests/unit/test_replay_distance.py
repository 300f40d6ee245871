"""How far a dumped output is from its replay (replay/distance.py), by hand-computed examples: the
replay is the reference, values not finite on either side are counted and left out, a difference
where the replay is 0 is infinitely relative, no difference there is none."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tui_acc.replay.distance import distance


def test_a_finite_pair_gives_each_metric_against_the_replay() -> None:
    found = distance(np.array([3.0, 4.0]), np.array([3.0, 5.0], dtype=np.float32))
    assert found["numel"] == 2
    assert found["max_abs_err"] == 1.0 and found["mean_abs_err"] == 0.5
    assert found["max_rel_err"] == 0.25  # |5 - 4| / 4
    assert found["rel_euclidean"] == 1.0 / 5.0  # |(0, 1)| / |(3, 4)|
    assert math.isclose(found["cosine"], (9 + 20) / (5 * math.sqrt(34)), rel_tol=1e-15)
    assert (found["dumped_nan"], found["dumped_inf"], found["replay_nan"], found["replay_inf"]) == (
        0,
        0,
        0,
        0,
    )


def test_values_not_finite_are_counted_and_left_out() -> None:
    found = distance(np.array([np.nan, 1.0, np.inf, 2.0]), np.array([1.0, 1.0, 2.0, -np.inf]))
    assert (found["replay_nan"], found["replay_inf"], found["dumped_nan"], found["dumped_inf"]) == (
        1,
        1,
        0,
        1,
    )
    assert found["numel"] == 4 and found["max_abs_err"] == 0.0 and found["cosine"] == 1.0


def test_where_the_replay_is_zero_a_difference_is_infinitely_relative_and_none_is_none() -> None:
    assert distance(np.array([0.0, 2.0]), np.array([1e-3, 2.0]))["max_rel_err"] == math.inf
    assert distance(np.array([0.0, 2.0]), np.array([0.0, 3.0]))["max_rel_err"] == 0.5
    only_zeros = distance(np.zeros(3), np.zeros(3))
    assert only_zeros["max_rel_err"] == 0.0 and only_zeros["cosine"] is None
    assert only_zeros["rel_euclidean"] == 0.0


def test_nothing_finite_gives_no_metric() -> None:
    found = distance(np.array([np.nan]), np.array([1.0]))
    assert found["max_abs_err"] is None and found["replay_nan"] == 1


def _by_hand(replay: list[float], dumped: list[float]) -> dict[str, float | int | None]:
    """The definitions element by element in Python floats (math.fsum: correctly rounded sums)."""
    pairs = [(r, d) for r, d in zip(replay, dumped, strict=True) if math.isfinite(r) and math.isfinite(d)]
    if not pairs:
        return {"cosine": None, "max_abs_err": None, "max_rel_err": None, "rel_euclidean": None}
    norm_r = math.sqrt(math.fsum(r * r for r, _ in pairs))
    norm_d = math.sqrt(math.fsum(d * d for _, d in pairs))
    norm_diff = math.sqrt(math.fsum((d - r) ** 2 for r, d in pairs))
    relative = [abs(d - r) / abs(r) if r else (math.inf if d != r else math.nan) for r, d in pairs]
    kept = [x for x in relative if not math.isnan(x)]
    return {
        "cosine": math.fsum(r * d for r, d in pairs) / (norm_r * norm_d) if norm_r and norm_d else None,
        "max_abs_err": max(abs(d - r) for r, d in pairs),
        "max_rel_err": max(kept) if kept else 0.0,
        "rel_euclidean": norm_diff / norm_r if norm_r else (0.0 if norm_diff == 0 else math.inf),
    }


@pytest.mark.parametrize("seed", range(6))
def test_each_metric_is_its_definition_with_values_not_finite_or_zero_anywhere(seed: int) -> None:
    """Drawn pairs with NaN, Inf, zeros and exact agreements placed at random (the squared norms that
    prove a pair finite are checked not to hide one), against the definitions by hand."""
    rng = np.random.default_rng(seed)
    replay = rng.normal(size=300)
    dumped = replay + rng.normal(scale=0.01, size=300)
    specials = [np.nan, np.inf, -np.inf, 0.0]
    for values in (replay, dumped):
        spots = rng.choice(300, size=int(rng.integers(0, 6)), replace=False)
        values[spots] = rng.choice(specials, size=spots.size)
    dumped[rng.choice(300, size=3, replace=False)] = 0.0
    replay[:2] = dumped[:2] = 0.0  # no difference where the replay is 0: none
    found = distance(replay, dumped.astype(np.float32).astype(np.float64))
    expected = _by_hand(replay.tolist(), dumped.astype(np.float32).astype(np.float64).tolist())
    assert found["max_abs_err"] == expected["max_abs_err"] and found["max_rel_err"] == expected["max_rel_err"]
    for key in ("cosine", "rel_euclidean"):
        assert found[key] == pytest.approx(expected[key], rel=1e-12), key
    assert found["replay_nan"] == int(np.isnan(replay).sum()) and found["dumped_inf"] == int(
        np.isinf(dumped).sum()
    )
