"""A concatenated tensor's row made from its parts' sums (``metrics/region_sums.py``, what ``report
--ray`` does on the nodes) is ``compare_tensors``' on the merged tensor: counts, extremes, the worst
element and the top-1 exactly, every sum within its reassociation (8 N 2**-53 of the scale)."""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tui_acc.dumps.gather import merge_parts
from tui_acc.dumps.model import AUTO
from tui_acc.metrics.kernels import compare_tensors
from tui_acc.metrics.region_sums import combined_row, golden_regions, part_sums, split_plan


@pytest.mark.parametrize(("dim", "kl"), [(0, True), (1, True), (2, False), (2, True)])
def test_the_row_from_the_parts_is_the_merged_tensors(dim: int, kl: bool) -> None:
    rng = np.random.default_rng(dim)
    golden = rng.standard_normal((2, 6, 8)).astype(np.float32)
    test = (golden * 1.01).astype(ml_dtypes.bfloat16)
    test[1, 3, 5] = np.nan  # left out of the metrics, counted
    test[0, 5, 7] = golden[0, 5, 7] + 4  # the worst element, in the last part
    parts = np.split(test, 2, axis=dim)
    shapes = [p.shape for p in parts]
    split = split_plan(shapes, ["bfloat16"] * 2, AUTO, golden, kl)
    if dim == 2 and kl:  # the softmax rows cross the parts: not split
        assert split is None
        return
    assert split is not None
    sums = [
        part_sums(region, part, kl) for region, part in zip(golden_regions(golden, split), parts, strict=True)
    ]
    found = combined_row(golden, split, sums, kl)
    expected = compare_tensors(golden, merge_parts(parts, AUTO, golden, Path("merged")), kl=kl)
    assert found.keys() == expected.keys()
    tolerance = 8 * golden.size * 2**-53
    for key, value in expected.items():
        if isinstance(value, float) and value != found[key]:
            assert math.isclose(found[key], value, rel_tol=tolerance, abs_tol=tolerance * 5), key  # type: ignore[arg-type]
        else:
            assert found[key] == value, key
    assert found["worst_index"] == np.ravel_multi_index((0, 5, 7), golden.shape)


def test_copies_partial_sums_and_mixed_dtypes_do_not_split() -> None:
    golden = np.ones((4, 8), dtype=np.float32)
    assert split_plan([(4, 8), (4, 8)], ["float32"] * 2, AUTO, golden, False) is None  # each whole
    assert split_plan([(2, 8), (2, 8)], ["float32"] * 2, "sum", golden, False) is None
    assert split_plan([(2, 8), (2, 8)], ["float32", "bfloat16"], AUTO, golden, False) is None
    assert split_plan([(2, 8), (2, 8)], ["float32"] * 2, AUTO, golden, False) is not None


def test_a_rank_holding_no_rows_leaves_the_top1_to_the_last_rows_there_are() -> None:
    """An expert rank given no token holds no rows: the merged tensor's last row is the previous
    part's, and the row is still the merged tensor's (it had ended the report in an IndexError)."""
    rng = np.random.default_rng(7)
    golden = rng.standard_normal((5, 8)).astype(np.float32)
    test = golden.copy()
    test[4, 2] += 3.0  # the last row's top-1 moves
    parts = [test[:5], test[5:]]  # the second rank: no rows
    split = split_plan([p.shape for p in parts], ["float32"] * 2, "cat:0", golden, True)
    assert split is not None
    sums = [
        part_sums(region, part, True)
        for region, part in zip(golden_regions(golden, split), parts, strict=True)
    ]
    found = combined_row(golden, split, sums, True)
    expected = compare_tensors(golden, test, kl=True)
    for key in ("golden_top1", "test_top1", "numel", "max_abs_err", "worst_index"):
        if key in expected:
            assert found[key] == expected[key], key
