"""The C kernel's ``sweep_bf16`` (tui_acc/metrics/_ckernel.c): a bfloat16 test chunk swept as it lies
(its uint16 bits), against a float32 or bfloat16 golden. A bfloat16 is the upper half of a float32,
so the state must be ``sweep``'s of both sides widened to float32 first (the path it replaces), on
the rows that take each of the kernel's loops; and the metrics pass must take it for such pairs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.unit.test_ckernel import SPECIAL, _assert_same_state, _case, needs_c
from tui_acc.metrics import fastkernel, kernel_layout, kernels

BF16 = np.dtype(ml_dtypes.bfloat16)


def _states(g: np.ndarray, t: np.ndarray, kl: bool, rows_per_call: int = 0) -> tuple[tuple, tuple]:
    """(sweep_bf16's state, sweep's state of the two widened to float32), a few rows per call."""
    from tui_acc.metrics import _ckernel

    bits = {"g": g.view(np.uint16) if g.dtype == BF16 else g, "t": t.view(np.uint16)}
    ours, widened = kernel_layout.new_state(), kernel_layout.new_state()
    step = rows_per_call or max(1, g.shape[0])
    for start in range(0, max(1, g.shape[0]), step):
        rows = slice(start, start + step)
        offset = 1000 + start * g.shape[1]
        _ckernel.sweep_bf16(bits["g"][rows], bits["t"][rows], offset, kl, *ours)
        wide_g, wide_t = g[rows].astype(np.float32), t[rows].astype(np.float32)
        _ckernel.sweep(wide_g, wide_t, offset, kl, *widened)
    return ours, widened


@needs_c
@pytest.mark.parametrize("golden", ["float32", "bfloat16"])
@pytest.mark.parametrize("kl", [True, False])
@pytest.mark.parametrize("rows_per_call", [0, 1, 5])
def test_sweep_bf16_is_the_sweep_of_the_widened_chunks(golden: str, kl: bool, rows_per_call: int) -> None:
    g, t = _case(np.float32, "noise")  # zeros, a value under the floor, NaN and Inf rows, ties
    g = g.astype(BF16) if golden == "bfloat16" else g
    t = t.astype(BF16)
    ours, widened = _states(g, t, kl, rows_per_call)
    _assert_same_state(ours, widened)
    counts = ours[1]
    assert counts[kernel_layout.C_WIDX] == 1000 + 8 * 97 + 96  # the first of the two worst elements
    assert counts[kernel_layout.C_TNAN] == 1 and counts[kernel_layout.C_GINF] == 1
    assert counts[kernel_layout.C_KLROWS] == (23 - 3 if kl else 0)


@needs_c
@settings(max_examples=120, deadline=None)
@given(
    rows=st.integers(1, 3),
    width=st.integers(1, 150),
    data=st.data(),
    kl=st.booleans(),
    bf16_golden=st.booleans(),
)
def test_sweep_bf16_equals_the_widened_sweep_on_drawn_rows(
    rows: int, width: int, data: st.DataObject, kl: bool, bf16_golden: bool
) -> None:
    """Rows long enough for every vector width and its tail, bfloat16's specials anywhere."""
    values = st.one_of(st.floats(-1e4, 1e4, width=32), st.sampled_from([v for v in SPECIAL if abs(v) < 1e39]))
    with np.errstate(over="ignore"):
        g = data.draw(arrays(np.float64, (rows, width), elements=values)).astype(np.float32)
        noise = data.draw(arrays(np.float64, (rows, width), elements=st.floats(-0.01, 0.01)))
        t = (g * (1 + noise)).astype(BF16)
    _assert_same_state(*_states(g.astype(BF16) if bf16_golden else g, t, kl))


@needs_c
@pytest.mark.parametrize(
    ("g", "t", "message"),
    [
        (np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), "t must be uint16 holding bfloat16"),
        (np.zeros((2, 3), np.float64), np.zeros((2, 3), np.uint16), "g float32 or bfloat16"),
        (np.zeros((2, 3), np.int16), np.zeros((2, 3), np.uint16), "float32, or uint16 holding bfloat16"),
        (np.zeros((2, 3), np.uint16), np.zeros((3, 2), np.uint16), "same shape"),
    ],
)
def test_sweep_bf16_refuses_what_it_cannot_read(g: np.ndarray, t: np.ndarray, message: str) -> None:
    from tui_acc.metrics import _ckernel

    with pytest.raises((TypeError, ValueError), match=message):
        _ckernel.sweep_bf16(g, t, 0, False, *kernel_layout.new_state())
    with pytest.raises(TypeError, match="float32 or float64"):  # sweep() takes no uint16 as bf16
        _ckernel.sweep(
            np.zeros((2, 3), np.uint16), np.zeros((2, 3), np.uint16), 0, False, *kernel_layout.new_state()
        )


@needs_c
@pytest.mark.parametrize("golden", ["float32", "bfloat16", "float16"])
def test_the_metrics_pass_sweeps_a_bf16_test_as_it_lies(monkeypatch: pytest.MonkeyPatch, golden: str) -> None:
    """A bf16 port against a float32 or bf16 golden takes sweep_bf16 (a float16 golden is widened, as
    before), and its row is the numpy kernel's."""
    from tui_acc.metrics import _ckernel

    taken: list[str] = []
    real = _ckernel.sweep_bf16
    monkeypatch.setattr(_ckernel, "sweep_bf16", lambda *args: taken.append("bf16") or real(*args))
    monkeypatch.setattr(kernels, "CHUNK_ELEMENTS", 129 * 8)  # several chunks
    rng = np.random.default_rng(4)
    g = rng.normal(size=(37, 129)).astype(golden if golden != "bfloat16" else BF16)
    t = (g.astype(np.float32) + rng.normal(scale=0.02, size=g.shape)).astype(BF16)
    t[5, 7] = np.nan
    monkeypatch.setenv(fastkernel.ENV, "c")
    ours = kernels.compare_tensors(g, t)
    assert taken == (["bf16"] * 5 if golden != "float16" else [])  # 37 rows, 8 a chunk
    monkeypatch.setenv(fastkernel.ENV, "numpy")
    reference = kernels.compare_tensors(g, t)
    for key, value in reference.items():
        if isinstance(value, float):
            assert ours[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        else:
            assert ours[key] == value, key
