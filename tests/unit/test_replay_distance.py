"""How far a dumped output is from its replay (replay/distance.py), by hand-computed examples: the
replay is the reference, values not finite on either side are counted and left out, a difference
where the replay is 0 is infinitely relative, no difference there is none."""

from __future__ import annotations

import math

import numpy as np

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
