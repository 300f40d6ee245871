"""--compat's views computed chunk by chunk: the same columns as on the whole tensor (exactly where
the tools' arithmetic is elementwise, within the rounding of a sum taken in another order where it
is not), non-finite values found in any chunk, and no copy of a whole tensor made."""

from __future__ import annotations

import math
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

from tests.conformance.msit_definitions import kl_rounding_bound, msit_elementwise, whole_tensor_kl64
from tests.conformance.rounding import (
    EPS32,
    EPS64,
    cosine_bound,
    mean_bound,
    norm_relative_bound,
    relative_euclidean_bound,
    rounded_apart,
)
from tui_acc.metrics.compat import msit_metrics, msprobe_metrics

WHOLE = 1 << 40  # a chunk larger than any tensor here: the whole tensor at once, as before


def _pair(n: int = 10_007) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    golden = rng.standard_normal((n // 7, 7)).astype(np.float32)
    golden[3, :4] = 0.0  # below eps: the masked elements of msit's errors, msprobe's zero benches
    test = (golden + 0.01 * rng.standard_normal(golden.shape)).astype(ml_dtypes.bfloat16)
    return golden, test


def test_the_msit_view_is_the_same_in_chunks() -> None:
    golden, test = _pair()
    whole, chunked = msit_metrics(golden, test, chunk=WHOLE), msit_metrics(golden, test, chunk=999)
    exact = ("golden_max_value", "golden_min_value", "my_max_value", "my_min_value")
    exact += ("max_relative_error", "max_absolute_error", "cmp_fail_reason")
    assert {k: chunked[k] for k in exact} == {k: whole[k] for k in exact}  # extremes of the same terms
    g, m = golden.reshape(-1), test.reshape(-1).astype(np.float32)
    n = g.size
    terms = msit_elementwise(golden, test)
    for column, values in (
        ("golden_mean_value", g),
        ("my_mean_value", m),
        ("mean_relative_error", terms["rel"]),
        ("mean_absolute_error", terms["abs_err"]),
    ):  # fp32 sums of the same terms, in another order
        assert abs(chunked[column] - whole[column]) <= 2 * mean_bound(values, EPS32) + EPS32 * abs(
            whole[column]
        )
    assert abs(chunked["cosine_similarity"] - whole["cosine_similarity"]) <= rounded_apart(
        10, 2 * cosine_bound(n, EPS64)
    )
    red = whole["relative_euclidean_distance"]
    assert abs(chunked["relative_euclidean_distance"] - red) <= 2 * red * relative_euclidean_bound(n, EPS64)
    exact_kl = whole_tensor_kl64(g, m)
    bound = kl_rounding_bound(g, m, EPS32) + kl_rounding_bound(g, m, EPS64)
    assert (
        abs(chunked["kl_divergence"] - exact_kl) <= bound and abs(whole["kl_divergence"] - exact_kl) <= bound
    )


def test_the_msprobe_view_is_the_same_in_chunks() -> None:
    golden, test = _pair()
    whole, chunked = msprobe_metrics(golden, test, chunk=WHOLE), msprobe_metrics(golden, test, chunk=999)
    exact = ("MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio")
    assert {k: chunked[k] for k in exact} == {k: whole[k] for k in exact}
    n = golden.size
    assert abs(chunked["Cosine"] - whole["Cosine"]) <= rounded_apart(12, 2 * cosine_bound(n, EPS64))
    dist = whole["EucDist"]
    assert abs(chunked["EucDist"] - dist) <= rounded_apart(
        12, 2 * (norm_relative_bound(n, EPS64) + EPS64) * dist, dist
    )


@pytest.mark.parametrize("where", [5, 9_000])  # in the first chunk, in a later one
def test_a_non_finite_value_in_any_chunk_is_found(where: int) -> None:
    golden, test = _pair()
    test.reshape(-1)[where] = np.nan
    msit = msit_metrics(golden, test, chunk=999)
    assert msit["cmp_fail_reason"] == "my_data includes NAN or inf." and msit["cosine_similarity"] == ""
    assert math.isnan(msit["my_max_value"]) and msit["golden_max_value"] == float(golden.max())
    msprobe = msprobe_metrics(golden, test, chunk=999)
    assert math.isnan(msprobe["MaxAbsErr"]) and math.isnan(msprobe["EucDist"])
    assert msprobe == pytest.approx(msprobe_metrics(golden, test, chunk=WHOLE), nan_ok=True)


def test_single_elements_and_empty_tensors() -> None:
    one = np.array([[2.0]], dtype=np.float32)
    assert msprobe_metrics(one, one * 1.5)["Cosine"] == "unsupported"
    assert msprobe_metrics(one, one * 1.5)["MaxAbsErr"] == 1.0
    empty = np.zeros((0, 3), dtype=np.float32)
    assert msit_metrics(empty, empty)["cosine_similarity"] == ""


def test_no_whole_tensor_copy_is_made() -> None:
    """numpy's allocations are traced: the msprobe view's peak stays a few chunks' worth, where a
    float64 copy of one side alone would be twice the float32 tensor."""
    n = 1 << 21
    golden = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    test = golden * np.float32(1.001)
    chunk = 1 << 14
    tracemalloc.start()
    try:
        msprobe_metrics(golden, test, chunk=chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # some 60 bytes an element of a chunk (float64 copies, masks); the whole pair at once took 90 MiB
    assert peak < 100 * chunk < golden.nbytes / 4
