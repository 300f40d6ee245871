"""The error map: where a pair's error sits, and how it compares with the dtype's rounding.

Seeded data of a known structure; what is asserted is structure (which rows or channels, which
levels, which side of u), never digits a CPU's floating-point path decides.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tui_acc.metrics import error_map as em
from tui_acc.metrics import error_sweep
from tui_acc.metrics.engine import Cancelled
from tui_acc.metrics.error_map import LEVELS, error_map
from tui_acc.metrics.kernels import ShapeMismatch

BF16 = ml_dtypes.bfloat16


def _golden(rows: int = 256, channels: int = 512, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, channels), dtype=np.float32)


def _bf16(values: np.ndarray) -> np.ndarray:
    return values.astype(BF16)


def test_one_bad_row_is_named_and_its_cells_stand_out() -> None:
    golden = _golden()
    test = golden.copy()
    test[77] += 1.0  # one token gone wrong
    emap = error_map(golden, _bf16(test))
    assert emap.standing_out("rows") == [(77, 77)]
    assert emap.standing_out("channels") == []
    assert emap.where().startswith("stands out") and "row 77" in emap.where()
    levels = emap.levels()
    block = int(np.searchsorted(emap.row_edges, 77, side="right")) - 1
    assert (levels[block] == LEVELS - 1).all()  # the bad row's block: the top level everywhere
    others = np.delete(levels, block, axis=0)
    assert others.max() <= LEVELS - 3  # the rest two levels (16x) or more below it
    assert emap.worst is not None and emap.worst.row == 77


def test_a_scale_error_is_uniform_and_above_the_rounding() -> None:
    golden = _golden()
    emap = error_map(golden, _bf16(golden * 1.05))
    assert emap.standing_out("rows") == emap.standing_out("channels") == []
    assert emap.where().startswith("spread evenly")
    assert emap.levels().min() >= LEVELS - 3  # every cell within a few times the largest
    within = emap.share_within_roundoff()
    assert within is not None and within < 0.05  # 5% is 12.8 u: nearly every element above u


def test_rounding_alone_keeps_every_relative_error_below_u() -> None:
    golden = _golden()
    emap = error_map(golden, _bf16(golden))
    assert emap.unit_roundoff == 2.0**-8 and emap.unit_exponent == -8
    # round to nearest: |fl(x) - x| <= u/(1+u) |x| < u |x|, on any IEEE machine
    assert emap.share_within_roundoff() == 1.0
    first_above = -8 + 1 - em.EXPONENT_LOW
    assert not emap.histogram[first_above:].any() and emap.histogram.any()
    assert emap.where().startswith("spread evenly")
    assert emap.read == golden.size and emap.sampled_every == 1


def test_u_is_the_coarser_dtypes() -> None:
    golden = _golden(8, 64)
    assert error_map(golden, golden.astype(np.float16)).unit_roundoff == 2.0**-11
    assert error_map(golden, golden).unit_roundoff == 2.0**-24
    assert error_map(_bf16(golden), golden).unit_roundoff == 2.0**-8  # swapped sides: still bf16
    ints = np.arange(12).reshape(3, 4)
    assert error_map(ints, ints).unit_roundoff is None


def test_most_channels_off_names_them_not_the_quiet_ones() -> None:
    # like the demo's fault (a matmul's tail tile wrong): the last 48 of 64 columns off by a bias
    golden = _golden(1, 64, seed=3).reshape(1, 1, 64)
    test = golden.copy()
    test[..., 16:] += 0.5
    emap = error_map(golden, _bf16(test))
    assert emap.standing_out("channels") == [(16, 63)]
    assert "channels 16-63 (48 of 64)" in emap.where()


def test_crossed_faults_a_bad_row_and_outlier_channels_are_both_named() -> None:
    golden = _golden(1024, 512)
    test = golden.copy()
    test[300] += 1.0
    test[:, [7, 400]] *= 1.5  # every row's largest |Δ| is now in these channels: the means tell the row
    where = error_map(golden, _bf16(test)).where()
    assert "row 300" in where and "channels 7, 400 (2 of 512)" in where


def test_noise_is_spread_evenly_and_above_u() -> None:
    golden = _golden()
    noise = np.random.default_rng(1).standard_normal(golden.shape, dtype=np.float32) * 0.05
    emap = error_map(golden, _bf16(golden + noise))
    assert emap.where().startswith("spread evenly")
    within = emap.share_within_roundoff()
    assert within is not None and within < 0.5


def test_nan_cells_are_marked_and_left_out_of_the_numbers() -> None:
    golden = _golden(64, 64)
    test = golden.copy()
    test[10, 20] = np.nan
    test[50, 5] = np.inf
    emap = error_map(golden, test)
    assert int(emap.cell_bad.sum()) == 2
    levels = emap.levels()
    assert (levels == -1).sum() == 2
    assert np.isfinite(emap.cell_max).all() and emap.cell_max.max() == 0.0
    assert emap.where() == "no finite element differs; 2 NaN/Inf (cells marked !)"
    assert emap.exact == golden.size - 2 - emap.no_scale


def test_finite_values_whose_float32_difference_overflows_are_not_nan() -> None:
    golden = np.full((4, 8), 3e38, dtype=np.float32)
    test = golden.copy()
    test[1, 2] = -3e38  # t - g overflows float32: a finite error of 6e38
    emap = error_map(golden, test)
    assert not emap.cell_bad.any()
    assert emap.worst is not None and (emap.worst.row, emap.worst.channel) == (1, 2)
    assert emap.cell_max.max() == 2 * float(np.float32(3e38))  # exact in float64


def test_elements_with_a_zero_golden_have_no_relative_error() -> None:
    golden = np.zeros((4, 64), dtype=np.float32)
    golden[0] = 1.0
    emap = error_map(golden, golden + np.float32(0.5))
    assert emap.no_scale == 3 * 64
    assert int(emap.histogram.sum()) == 64  # the scaled row only: 0.5 in [2^-1, 2^0)
    assert emap.histogram[0 - em.EXPONENT_LOW] == 64


def test_coarsening_merges_cells_exactly() -> None:
    golden = _golden(512, 1024)
    test = golden.copy()
    test[100:140, 200:260] *= 1.5
    fine = error_map(golden, _bf16(test))
    coarse = error_map(golden, _bf16(test), rows=8, channels=16)
    merged = fine.coarsened(8, 16)
    assert (merged.row_edges == coarse.row_edges).all()
    assert (merged.channel_edges == coarse.channel_edges).all()
    assert (merged.cell_max == coarse.cell_max).all()  # a maximum is exact whatever the order
    assert np.allclose(merged.cell_sum, coarse.cell_sum, rtol=1e-9)
    assert (merged.levels() == coarse.levels()).all()
    assert fine.coarsened(64, 128) is fine  # nothing to merge


def test_wide_rows_are_read_in_pieces_with_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    golden = _golden(3, 4000)
    test = golden.copy()
    test[1, 2345] += 2.0
    whole = error_map(golden, _bf16(test))
    monkeypatch.setattr(error_sweep, "CHUNK_ELEMENTS", 256)  # a row in 16 pieces, none across a block
    pieces = error_map(golden, _bf16(test))
    assert (pieces.cell_max == whole.cell_max).all()
    assert pieces.row_max is not None and whole.row_max is not None
    assert (pieces.row_max == whole.row_max).all()
    assert (pieces.histogram == whole.histogram).all()
    assert pieces.worst == whole.worst and pieces.where() == whole.where()
    assert "channel 2345" in pieces.where()


def test_the_histogram_samples_a_large_tensor_but_the_cells_see_every_element(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(error_sweep, "HISTOGRAM_BUDGET", 10_000)
    golden = _golden(512, 512)
    test = golden.copy()
    test[401, 99] += 3.0  # one element: a sample of every 27th would likely miss it
    emap = error_map(golden, _bf16(test))
    step = emap.sampled_every
    assert step > 1 and np.gcd(step, 512) == 1  # coprime to the row: every channel is read
    assert emap.read in (golden.size // step, golden.size // step + 1)
    assert emap.worst is not None and (emap.worst.row, emap.worst.channel) == (401, 99)
    assert "row 401; channel 99" in emap.where()
    assert f"every {step}th element" in emap.histogram_summary()


def test_integers_complex_empty_and_single_values() -> None:
    ints = np.arange(40).reshape(4, 10)
    off = ints.copy()
    off[:, 3] += 1
    assert error_map(ints, off).standing_out("channels") == [(3, 3)]
    z = (_golden(4, 8) + 1j * _golden(4, 8, seed=1)).astype(np.complex64)
    zmap = error_map(z, z)
    assert zmap.where() == "test equals golden" and zmap.exact == z.size
    assert error_map(np.zeros((0, 5)), np.zeros((0, 5))).where() == "empty tensor"
    scalar = error_map(np.float32(1.0).reshape(()), np.float32(2.0).reshape(()))
    assert (scalar.rows, scalar.channels) == (1, 1) and scalar.cell_max.shape == (1, 1)


def test_shapes_of_another_count_are_refused_and_a_stop_is_honoured() -> None:
    with pytest.raises(ShapeMismatch, match="element counts differ"):
        error_map(np.zeros((2, 3)), np.zeros((3, 3)))
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        error_map(_golden(4096, 512), _golden(4096, 512, seed=1), should_stop=stop)
    assert len(calls) == 3  # asked between chunks, and stopped at the first yes


def test_labels_in_units_of_u() -> None:
    emap = error_map(_golden(8, 64), _bf16(_golden(8, 64)))
    assert emap.in_units(2.0**-8) == "1u" and emap.in_units(2.0**-8 * 170) == "170u"
    assert emap.in_units(2.0**-8 * 1234) == "1.2e3u" and emap.in_units(2.0**-8 * 0.05) == "0.05u"
    assert em.percent(0.999) == ">99%" and em.percent(0.001) == "<1%" and em.percent(1.0) == "100%"
    assert em.count(4_100_000) == "4.1M" and em.count(950) == "950"
