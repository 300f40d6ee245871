"""The metric kernels against hand-computed values and independent formulas."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.metrics import kernels
from tui_acc.metrics.kernels import ShapeMismatch


def compare_tensors(golden: torch.Tensor, test: torch.Tensor, kl: bool = True) -> dict:
    """The kernel on the arrays a dump's tensors load as (torch builds the cases)."""
    return kernels.compare_tensors(from_torch(golden), from_torch(test), kl=kl)


def test_identical_tensors_are_perfect() -> None:
    t = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    row = compare_tensors(t, t.clone())
    assert row["cosine"] == pytest.approx(1.0, abs=1e-15)
    assert row["max_abs_err"] == 0.0
    assert row["mean_rel_err"] == 0.0
    assert row["rel_euclidean"] == 0.0
    assert row["kl"] == pytest.approx(0.0, abs=1e-15)
    assert row["numel"] == 15


def test_hand_computed_values() -> None:
    g = torch.tensor([1.0, 2.0, 0.0, -4.0])
    t = torch.tensor([1.5, 2.0, 0.5, -3.0])
    row = compare_tensors(g, t)
    dot, ng, nt = 1.5 + 4 + 0 + 12, math.sqrt(21), math.sqrt(2.25 + 4 + 0.25 + 9)
    assert row["cosine"] == pytest.approx(dot / (ng * nt), rel=1e-15)
    assert row["max_abs_err"] == 1.0
    assert row["mean_abs_err"] == pytest.approx((0.5 + 0 + 0.5 + 1) / 4)
    # relative error skips the golden zero and averages over the 3 others (msit would divide by 4)
    assert row["max_rel_err"] == pytest.approx(0.5)
    assert row["mean_rel_err"] == pytest.approx((0.5 + 0 + 0.25) / 3)
    assert row["rel_euclidean"] == pytest.approx(math.sqrt(0.25 + 0.25 + 1) / ng)
    assert (row["golden_max"], row["golden_min"], row["golden_mean"]) == (2.0, -4.0, pytest.approx(-0.25))


def test_kl_is_per_row_softmax_averaged() -> None:
    rng = np.random.default_rng(7)
    g = rng.normal(size=(3, 50))
    t = g + rng.normal(scale=0.3, size=(3, 50))

    def kl_row(a: np.ndarray, b: np.ndarray) -> float:
        p = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
        q = np.exp(b - b.max()) / np.exp(b - b.max()).sum()
        return float((p * np.log(p / q)).sum())

    expected = np.mean([kl_row(g[i], t[i]) for i in range(3)])
    row = compare_tensors(torch.from_numpy(g), torch.from_numpy(t))
    assert row["kl"] == pytest.approx(expected, rel=1e-10)
    whole = kl_row(g.reshape(-1), t.reshape(-1))
    assert row["kl"] != pytest.approx(whole, rel=1e-3)  # not msit's whole-tensor KL


def test_chunked_accumulation_matches_single_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(64, 33, generator=gen)
    t = g + 0.01 * torch.randn(64, 33, generator=gen)
    whole = compare_tensors(g, t)
    monkeypatch.setattr(kernels, "CHUNK_ELEMENTS", 40)  # one row (33 elements) per chunk
    chunked = compare_tensors(g, t)
    for key in (
        "cosine",
        "max_abs_err",
        "mean_abs_err",
        "max_rel_err",
        "mean_rel_err",
        "rel_euclidean",
        "kl",
    ):
        assert chunked[key] == pytest.approx(whole[key], rel=1e-12), key


def test_bf16_is_read_exactly() -> None:
    g = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float32)
    t = g.to(torch.bfloat16)
    row = compare_tensors(g, t)
    assert row["test_dtype"] == "bfloat16"
    expected = (t.double() - g.double()).abs().max().item()
    assert row["max_abs_err"] == expected


def test_non_finite_values_are_counted_and_excluded() -> None:
    g = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    t = torch.tensor([[1.0, float("nan"), 3.0], [1.0, float("inf"), 1.0]])
    row = compare_tensors(g, t)
    assert (row["test_nan"], row["test_inf"], row["golden_nan"]) == (1, 1, 0)
    assert row["max_abs_err"] == 0.0  # the finite positions agree
    assert row["kl"] is None  # every row holds a non-finite value: no distribution to compare


def test_zero_tensors() -> None:
    z = torch.zeros(4)
    assert compare_tensors(z, z)["cosine"] == 1.0
    assert compare_tensors(z, torch.ones(4))["cosine"] == 0.0
    assert compare_tensors(z, torch.ones(4))["rel_euclidean"] == math.inf


def test_integer_tensors_have_no_kl() -> None:
    ids = torch.tensor([[5, 6, 7]])
    row = compare_tensors(ids, ids.clone())
    assert row["kl"] is None and row["max_abs_err"] == 0.0


def test_element_count_mismatch_raises() -> None:
    with pytest.raises(ShapeMismatch, match=r"\[2, 3\] vs test \[7\]"):
        compare_tensors(torch.zeros(2, 3), torch.zeros(7))


def test_same_count_different_shape_compares_flat() -> None:
    g = torch.arange(6.0).reshape(2, 3)
    row = compare_tensors(g, g.reshape(3, 2))
    assert (
        row["cosine"] == pytest.approx(1.0) and row["golden_shape"] == [2, 3] and row["test_shape"] == [3, 2]
    )


def test_top1_is_the_last_rows_argmax() -> None:
    g = torch.tensor([[0.0, 9.0, 1.0], [5.0, 0.0, 1.0]])
    t = torch.tensor([[0.0, 9.0, 1.0], [0.0, 0.0, 1.0]])
    row = compare_tensors(g, t)
    assert (row["golden_top1"], row["test_top1"]) == (0, 2)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float8_e5m2,
        torch.float8_e4m3fn,
        torch.bool,
        torch.int8,
    ],
)
def test_every_loadable_dtype_compares(dtype: torch.dtype) -> None:
    t = (torch.rand(3, 4, generator=torch.Generator().manual_seed(2)) * 3 + 0.1).to(dtype)
    row = compare_tensors(t, t.clone())
    assert row["cosine"] == pytest.approx(1.0) and row["max_abs_err"] == 0.0


def test_complex_compares_as_real_and_imaginary_parts() -> None:
    g = torch.tensor([1 + 1j, 2 - 1j], dtype=torch.complex64)
    t = torch.tensor([1 + 1j, 2 + 1j], dtype=torch.complex64)
    row = compare_tensors(g, t)
    assert row["max_abs_err"] == 2.0 and row["kl"] is None
    assert row["cosine"] == pytest.approx((1 + 1 + 4 - 1) / 7)


def test_added_metrics() -> None:
    g = torch.tensor([[1.0, 2.0, 0.0, -4.0]])
    t = torch.tensor([[1.0005, 2.0, 0.0, -3.0]])
    row = compare_tensors(g, t)
    assert row["abs_euclidean"] == pytest.approx(math.sqrt(0.0005**2 + 1.0))
    assert row["rmse"] == pytest.approx(math.sqrt((0.0005**2 + 1.0) / 4))
    # msprobe's ratios: rel errors 5e-4, 0, 0 (zero golden, zero test), 0.25
    assert row["thousandth_ratio"] == 0.75 and row["five_thousandths_ratio"] == 0.75
    assert (row["worst_index"], row["worst_golden"], row["worst_test"]) == (3, -4.0, -3.0)
    assert row["n"] == 4 and row["sum_dd"] == pytest.approx(0.0005**2 + 1.0)


def test_worst_element_index_spans_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "CHUNK_ELEMENTS", 8)
    g = torch.zeros(10, 8)
    t = g.clone()
    t[7, 3] = 5.0
    t[2, 1] = 1.0
    row = compare_tensors(g, t)
    assert row["worst_index"] == 7 * 8 + 3 and row["worst_test"] == 5.0


def test_topk_overlap_of_logits() -> None:
    g = torch.tensor([[9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0]])
    t = torch.tensor([[9.0, 8.0, 7.0, 0.0, 0.0, 4.0, 3.0]])
    assert compare_tensors(g, t)["topk_overlap"] == pytest.approx(3 / 5)


def test_aggregates_are_exact_from_sufficient_statistics() -> None:
    from tui_acc.metrics.aggregate import aggregate

    gen = torch.Generator().manual_seed(5)
    parts = [(torch.randn(7, 3, generator=gen), torch.randn(7, 3, generator=gen)) for _ in range(4)]
    rows = [compare_tensors(g, t) for g, t in parts]
    whole = compare_tensors(
        torch.cat([g.reshape(-1) for g, _ in parts]), torch.cat([t.reshape(-1) for _, t in parts])
    )
    from tui_acc.metrics.schema import TENSOR_SCHEMA, to_frame

    sums = [{key: row[key] for key in ("n", "sum_gg", "sum_tt", "sum_gt", "sum_dd")} for row in rows]
    sums.append({"n": 1, "sum_gg": 9.0, "sum_tt": 0.0, "error": "unreadable"})  # left out, not counted
    agg = aggregate(to_frame(sums, TENSOR_SCHEMA)).row(0, named=True)
    assert agg["tensors"] == 4
    for key in ("cosine", "rel_euclidean", "rmse"):
        assert agg[key] == pytest.approx(whole[key], rel=1e-12)


def test_an_aggregate_of_tensors_with_nothing_finite_shows_nothing() -> None:
    """A layer whose every output is all NaN: no cosine of 1 from its empty sums either."""
    from tui_acc.metrics.aggregate import aggregate
    from tui_acc.metrics.schema import TENSOR_SCHEMA, to_frame

    nan = compare_tensors(torch.ones(3, 4), torch.full((3, 4), float("nan")))
    sums = [{key: nan[key] for key in ("n", "sum_gg", "sum_tt", "sum_gt", "sum_dd")}] * 2
    agg = aggregate(to_frame(sums, TENSOR_SCHEMA)).row(0, named=True)
    assert agg == {"tensors": 2, "cosine": None, "rel_euclidean": None, "rmse": None}


def _compiled_kernels() -> list:
    """Each compiled kernel (fastkernel.KERNELS), skipped where it is not available here."""
    from tui_acc.metrics import fastkernel

    missing = {name: fastkernel.compiled(name) for name in ("c", "numba")}
    return [
        pytest.param(name, marks=pytest.mark.skipif(isinstance(why, str), reason=f"{name}: {why}"))
        for name, why in missing.items()
    ]


@pytest.fixture(autouse=True, params=_compiled_kernels())
def compiled_kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with each compiled kernel (``_both_kernels`` holds it to numpy's)."""
    monkeypatch.setenv("TUI_ACC_KERNEL", request.param)
    return str(request.param)


def _both_kernels(
    monkeypatch: pytest.MonkeyPatch, g: torch.Tensor, t: torch.Tensor, kl: bool = True
) -> tuple[dict, dict]:
    from tui_acc.metrics import fastkernel

    assert fastkernel.available()
    compiled = compare_tensors(g, t, kl=kl)
    kernel = os.environ["TUI_ACC_KERNEL"]
    monkeypatch.setenv("TUI_ACC_KERNEL", "numpy")
    reference = compare_tensors(g, t, kl=kl)
    monkeypatch.setenv("TUI_ACC_KERNEL", kernel)
    return compiled, reference


def _assert_same(compiled: dict, reference: dict) -> None:
    """Every metric of the two kernels equal: floats to 1e-9 relative, everything else exactly."""
    for key, value in reference.items():
        if isinstance(value, float):
            assert compiled[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        else:
            assert compiled[key] == value, key


@pytest.mark.parametrize("test_dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_compiled_kernel_equals_numpy_kernel(
    monkeypatch: pytest.MonkeyPatch, test_dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(9)
    g = torch.randn(37, 129, generator=gen)
    g[3, :5] = 0.0  # zero goldens: the eps rule of the thousandth ratios
    t = (g + 0.02 * torch.randn(37, 129, generator=gen)).to(test_dtype)
    t[5, 7] = float("nan")
    t[6, 1] = float("inf")
    monkeypatch.setattr(kernels, "CHUNK_ELEMENTS", 129 * 8)  # several chunks
    compiled, reference = _both_kernels(monkeypatch, g, t)
    assert compiled.keys() == reference.keys()
    _assert_same(compiled, reference)


NOTHING_FINITE = {
    "test all NaN": (None, float("nan")),
    "test all Inf": (None, float("inf")),
    "both all NaN": (float("nan"), float("nan")),
    "golden -Inf, test NaN": (float("-inf"), float("nan")),
}


@pytest.mark.parametrize("case", sorted(NOTHING_FINITE))
def test_no_finite_element_shows_no_metric_in_any_kernel(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Nothing was compared: no cosine of 1 (the empty sums' "both all zero"), no distance of 0."""
    gen = torch.Generator().manual_seed(3)
    golden_fill, test_fill = NOTHING_FINITE[case]
    g = torch.randn(4, 32, generator=gen)
    if golden_fill is not None:
        g = torch.full_like(g, golden_fill)
    t = torch.full((4, 32), test_fill, dtype=torch.bfloat16)  # logits-shaped: KL and top-k asked for
    compiled, reference = _both_kernels(monkeypatch, g, t)
    _assert_same(compiled, reference)
    for row in (compiled, reference):
        assert row["n"] == 0
        shown = ("cosine", "rel_euclidean", "abs_euclidean", "rmse", "max_abs_err", "kl", "topk_overlap")
        assert {key: row[key] for key in shown} == dict.fromkeys(shown)


def test_kl_is_only_computed_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    compiled, reference = _both_kernels(monkeypatch, g, g * 1.01, kl=False)
    assert compiled["kl"] is None and reference["kl"] is None
    assert compiled["cosine"] == pytest.approx(reference["cosine"])


def test_fast_rows_and_careful_rows_agree_with_the_numpy_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finite rows take the vectorised loop; rows with NaN/Inf or float64 giants the exact one."""
    gen = torch.Generator().manual_seed(4)
    g = torch.randn(6, 300, generator=gen, dtype=torch.float64)
    t = g + 0.01 * torch.randn(6, 300, generator=gen, dtype=torch.float64)
    t[1, 10] = float("nan")  # a careful row before the worst element
    g[2, 7] = 1e200  # squares overflow: never in the fast loop
    t[2, 7] = 1e200
    t[4, 250] = g[4, 250] + 3.0  # the worst element, in a fast row after careful ones
    t[5, 3] = g[5, 3] + 3.0  # as bad, later: the first one is reported
    compiled, reference = _both_kernels(monkeypatch, g, t)
    assert compiled["worst_index"] == 4 * 300 + 250 == reference["worst_index"]
    assert compiled["test_nan"] == 1
    _assert_same(compiled, reference)


def test_a_long_1d_tensor_is_swept_in_chunk_wide_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without KL a 1-D tensor is cut into chunk-wide rows plus a tail: same results, bounded copies."""
    monkeypatch.setattr(kernels, "CHUNK_ELEMENTS", 1000)
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(2500, generator=gen)
    t = (g + 0.01 * torch.randn(2500, generator=gen)).to(torch.bfloat16)
    t[2345] = g[2345] + 4.0  # the worst element, in the tail
    blocks = kernels._blocks(from_torch(g), from_torch(t), 2500, with_kl=False)
    assert [(b[0].shape, b[2], b[3]) for b in blocks] == [((2, 1000), 1000, 0), ((1, 500), 500, 2000)]
    compiled, reference = _both_kernels(monkeypatch, g, t, kl=False)
    assert compiled["worst_index"] == 2345 == reference["worst_index"]
    assert compiled["golden_top1"] == int(g.argmax())  # top-1 still over the tensor's own last axis
    _assert_same(compiled, reference)
