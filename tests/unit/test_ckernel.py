"""The C kernel (tui_acc/metrics/_ckernel.c): the numba kernel's state, chunk by chunk; its choice.

test_kernels.py and test_metric_properties.py run every metric through each available kernel
against the numpy kernel and a float64 reference; here the two compiled kernels' raw state is
compared directly, on the rows that take each path, and the C module's argument checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tui_acc.metrics import fastkernel, kernel_layout

C_MISSING = fastkernel.compiled("c")
NUMBA_MISSING = fastkernel.compiled("numba")
needs_c = pytest.mark.skipif(isinstance(C_MISSING, str), reason=f"C kernel not built: {C_MISSING}")
needs_both = pytest.mark.skipif(
    isinstance(C_MISSING, str) or isinstance(NUMBA_MISSING, str), reason="C or numba kernel missing"
)


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI promises a compiler")
def test_ci_builds_the_c_kernel() -> None:
    """CI installs the README's way in a fresh clone: the extension must have been built by it."""
    assert not isinstance(C_MISSING, str), C_MISSING
    assert fastkernel.kernel_name() == "c" or os.environ.get(fastkernel.ENV)


@needs_c
def test_the_c_module_has_the_state_layout_of_kernel_layout() -> None:
    from tui_acc.metrics import _ckernel

    names = [name for name in dir(kernel_layout) if name[:2] in ("S_", "M_", "C_", "N_")]
    assert len(names) == 29
    for name in [*names, "REL_FLOOR", "HUGE"]:
        assert getattr(_ckernel, name) == getattr(kernel_layout, name), name


def _state_of(kernel: str, g: np.ndarray, t: np.ndarray, kl: bool, rows_per_call: int = 0) -> tuple:
    sweep = fastkernel.compiled(kernel)
    assert not isinstance(sweep, str), sweep
    sums, counts = kernel_layout.new_state()
    step = rows_per_call or max(1, g.shape[0])
    for start in range(0, max(1, g.shape[0]), step):
        sweep(g[start : start + step], t[start : start + step], 1000 + start * g.shape[1], kl, sums, counts)
    return sums, counts


def _assert_same_state(ours: tuple, theirs: tuple) -> None:
    """Sums to 1e-9 relative (lanes may add in another order; 1e-12 absolute for a KL sum near 0,
    where rounding noise is all there is), extremes and every count exactly."""
    (s1, c1), (s2, c2) = ours, theirs
    exact = [kernel_layout.M_AMAX, kernel_layout.M_GMAX, kernel_layout.M_GMIN, kernel_layout.M_TMAX]
    exact += [kernel_layout.M_TMIN, kernel_layout.M_RELMAX, kernel_layout.M_WG, kernel_layout.M_WT]
    assert s1[exact].tolist() == s2[exact].tolist()
    np.testing.assert_allclose(s1, s2, rtol=1e-9, atol=1e-12)
    assert c1.tolist() == c2.tolist()


def _case(dtype: type, kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    g = rng.normal(size=(23, 97)).astype(dtype)
    t = (g + rng.normal(scale=0.01, size=g.shape)).astype(dtype)
    if kind == "bf16":  # a bf16 test side, widened: float32 values with 8 mantissa bits
        t = (t.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(dtype)
    g[3, :9] = 0.0  # zero goldens: eps for the thousandth ratios, no relative error
    t[3, 2] = 0.0
    g[4, 5] = 1e-8  # below the relative-error floor
    t[5, 7] = np.nan  # careful rows among fast ones
    g[6, 1] = -np.inf
    t[6, 2] = np.inf
    g[7, 0] = np.nan
    g[8, 96], t[8, 96] = 0.5, 3.5  # the worst element, twice: the first position wins
    g[12, 4], t[12, 4] = -0.25, 2.75
    t[10, 50] = g[10, 50] * (1 + 1e-3)  # near the ratio thresholds
    if dtype is np.float64:
        g[9, 3] = t[9, 3] = 1e200  # finite, but its square overflows: the careful loop
        g[11, 8], t[11, 8] = 1e151, -1e151
    return g, t


@needs_both
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["noise", "bf16"])
@pytest.mark.parametrize("kl", [True, False])
@pytest.mark.parametrize("rows_per_call", [0, 1, 5])
def test_c_state_equals_numba_state(dtype: type, kind: str, kl: bool, rows_per_call: int) -> None:
    g, t = _case(dtype, kind)
    ours = _state_of("c", g, t, kl, rows_per_call)
    _assert_same_state(ours, _state_of("numba", g, t, kl, rows_per_call))
    counts = ours[1]
    worst = (11, 8) if dtype is np.float64 else (8, 96)  # 1e151 vs -1e151, else the first 3.0
    assert counts[kernel_layout.C_WIDX] == 1000 + worst[0] * 97 + worst[1]
    assert counts[kernel_layout.C_TNAN] == 1 and counts[kernel_layout.C_GINF] == 1
    assert counts[kernel_layout.C_KLROWS] == (23 - 3 if kl else 0)  # not rows 5, 6, 7 (NaN/Inf)


@needs_both
@pytest.mark.parametrize(
    "shape",
    [(0, 1), (1, 1), (5, 1), (1, 0), (3, 0), (1, 7), (2, 1024 + 3)],
    ids=lambda s: "x".join(map(str, s)),
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_c_state_equals_numba_state_on_small_shapes(shape: tuple[int, int], dtype: type) -> None:
    rng = np.random.default_rng(3)
    g = rng.normal(size=shape).astype(dtype)
    t = (g * 1.001).astype(dtype)
    _assert_same_state(_state_of("c", g, t, True), _state_of("numba", g, t, True))


@needs_both
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ties_and_special_rows(dtype: type) -> None:
    """Equal worst differences (first wins, across rows and within one), all-NaN rows, -0.0."""
    g = np.zeros((4, 6), dtype=dtype)
    t = np.zeros((4, 6), dtype=dtype)
    t[0, 0] = -0.0
    t[1, 4] = t[1, 2] = 2.0
    t[2, 1] = -2.0
    g[3, :] = np.nan
    for kl in (True, False):
        ours = _state_of("c", g, t, kl)
        _assert_same_state(ours, _state_of("numba", g, t, kl))
        assert ours[1][kernel_layout.C_WIDX] == 1000 + 6 + 2
        assert ours[1][kernel_layout.C_GNAN] == 6


@needs_both
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kl_of_wide_rows_equals_numba(dtype: type) -> None:
    """The C kernel's own exp (vectorised) against libm's through numba: logits spread so far that
    most of a row's softmax underflows (exp below -708), and rows a shift apart (KL 0)."""
    rng = np.random.default_rng(8)
    g = rng.uniform(-900.0, 20.0, size=(9, 1000)).astype(dtype)
    t = (g + rng.normal(scale=0.5, size=g.shape)).astype(dtype)
    t[4] = g[4] + 3.0  # the same softmax
    g[5, :] = 0.0  # a uniform distribution
    ours = _state_of("c", g, t, True)
    _assert_same_state(ours, _state_of("numba", g, t, True))
    assert ours[0][kernel_layout.S_KL] > 0.1


@needs_c
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e151], ids=["nan", "inf", "-inf", "huge"])
def test_a_bad_value_at_any_position_of_a_row_sends_it_to_the_careful_loop(dtype: type, bad: float) -> None:
    """Row i holds its one bad value at column i: every vector lane and the loop's tail are checked."""
    width = 37
    g = np.linspace(1.0, 2.0, width * width).reshape(width, width).astype(dtype)
    t = g.copy()
    with np.errstate(over="ignore"):
        np.fill_diagonal(t, np.array(bad).astype(dtype))
    sums, counts = _state_of("c", g, t, True)
    finite = np.isfinite(t).all()  # -1e151 is finite in float64 (careful, counted), -inf in float32
    assert counts[kernel_layout.C_N] == width * width - (0 if finite else width)
    assert counts[kernel_layout.C_TNAN] == (width if np.isnan(bad) else 0)
    assert counts[kernel_layout.C_TINF] == (0 if finite or np.isnan(bad) else width)
    assert counts[kernel_layout.C_KLROWS] == (width if finite else 0)
    assert np.isfinite(sums[kernel_layout.S_GG]) and np.isfinite(sums[kernel_layout.S_GT])
    if not isinstance(NUMBA_MISSING, str):
        _assert_same_state((sums, counts), _state_of("numba", g, t, True))


SPECIAL = [0.0, -0.0, 1e-8, 1.0, -1.0, 1e30, -3e38, 1e151, np.nan, np.inf, -np.inf]


@needs_both
@settings(max_examples=120, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, np.float64]),
    rows=st.integers(1, 3),
    width=st.integers(1, 150),
    data=st.data(),
    kl=st.booleans(),
)
def test_c_state_equals_numba_state_on_drawn_rows(
    dtype: type, rows: int, width: int, data: st.DataObject, kl: bool
) -> None:
    """Rows long enough for every vector width and its tail, specials anywhere, either kernel's state."""
    values = st.one_of(st.floats(-1e4, 1e4, width=32), st.sampled_from(SPECIAL))
    with np.errstate(over="ignore"):
        g = data.draw(arrays(np.float64, (rows, width), elements=values)).astype(dtype)
        noise = data.draw(arrays(np.float64, (rows, width), elements=st.floats(-0.01, 0.01)))
        t = (g * (1 + noise)).astype(dtype)
    _assert_same_state(_state_of("c", g, t, kl), _state_of("numba", g, t, kl))


@needs_c
def test_elements_at_the_thresholds_count_as_true_divisions_put_them() -> None:
    """msprobe counts ``|t - g| / |g| < 1e-3``: a true division, not a multiply by a reciprocal or
    by 1000. Ratios a rounding either side of 1e-3 and 5e-3 decide the counts element by element."""
    rng = np.random.default_rng(12)
    g = rng.uniform(0.5, 4.0, size=(8, 4096)) * rng.choice([-1.0, 1.0], size=(8, 4096))
    t = g.copy()
    t[:4] += g[:4] * 1e-3
    t[4:] -= g[4:] * 5e-3
    ratios = np.abs(t - g) / np.abs(g)
    # about half of each half falls either side of its threshold (a multiply by 1 / |g| would
    # move 21 of them across)
    assert 0.3 < (ratios[:4] < 1e-3).mean() < 0.7 and 0.3 < (ratios[4:] < 5e-3).mean() < 0.7
    _, counts = _state_of("c", g, t, False)
    assert counts[kernel_layout.C_1E3] == int((ratios < 1e-3).sum())
    assert counts[kernel_layout.C_5E3] == int((ratios < 5e-3).sum())


@needs_c
@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("g", [[1.0]]), TypeError, "g must be"),
        (("g", np.zeros((2, 3), np.float16)), TypeError, "float32 or float64"),
        (("t", np.zeros((2, 3), np.int32)), TypeError, "t must be float32"),
        (("g", np.zeros((3, 2), np.float32)[:, :1]), TypeError, "C-contiguous"),
        (("g", np.zeros(6, np.float32)), ValueError, "2-D"),
        (("t", np.zeros((3, 2), np.float32)), ValueError, "same shape"),
        (("t", np.zeros((2, 3), np.float64)), TypeError, "same dtype"),
        (("t", np.zeros((2, 3), np.float32).astype(">f4")), TypeError, "float32 or float64"),
        (("sums", np.zeros(16)), ValueError, "length 17"),
        (("sums", np.zeros(17, np.float32)), TypeError, "float64"),
        (("counts", np.zeros(10, np.int32)), TypeError, "int64"),
        (("counts", np.zeros((2, 5), np.int64)), ValueError, "1-D"),
        (("sums", "not an array"), TypeError, "sums must be"),
        (("offset", "zero"), TypeError, "integer"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_bad_arguments_raise_and_never_crash(args: tuple, error: type, message: str) -> None:
    from tui_acc.metrics import _ckernel

    sums, counts = kernel_layout.new_state()
    call = {"g": np.zeros((2, 3), np.float32), "t": np.zeros((2, 3), np.float32), "offset": 0}
    call.update({"kl": True, "sums": sums, "counts": counts})
    call[args[0]] = args[1]
    with pytest.raises(error, match=message):
        _ckernel.sweep(*call.values())


@needs_c
def test_read_only_state_is_refused() -> None:
    from tui_acc.metrics import _ckernel

    sums, counts = kernel_layout.new_state()
    sums.setflags(write=False)
    one = np.zeros((1, 1), np.float32)
    with pytest.raises(TypeError, match="writable"):
        _ckernel.sweep(one, one, 0, True, sums, counts)


def test_forcing_an_unknown_or_missing_kernel_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fastkernel.ENV, "torch")
    with pytest.raises(fastkernel.KernelUnavailable, match="expected one of c, numba, numpy"):
        fastkernel.available()
    monkeypatch.setenv(fastkernel.ENV, "c")
    monkeypatch.setitem(fastkernel._loaded, "c", "ImportError: not built")
    with pytest.raises(fastkernel.KernelUnavailable, match=r"c kernel is not available here .*not built"):
        fastkernel.available()
    monkeypatch.setenv(fastkernel.ENV, "numpy")
    assert not fastkernel.available()
    monkeypatch.delenv(fastkernel.ENV)
    assert fastkernel.kernel_name() == ("numba" if not isinstance(NUMBA_MISSING, str) else "numpy")


def test_the_cli_says_once_that_a_forced_kernel_is_not_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tui_acc.cli.main import main

    monkeypatch.setenv(fastkernel.ENV, "cuda")
    assert main(["report", str(tmp_path), str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "tui-acc: error: TUI_ACC_KERNEL='cuda': expected one of c, numba, numpy"
    )


@needs_c
def test_the_c_path_never_imports_numba() -> None:
    """numba's import alone costs ~0.5 s and 140 MiB: with the C kernel there it is never loaded."""
    script = (
        "import sys, numpy as np\n"
        "from tui_acc.metrics import fastkernel, kernel_layout\n"
        "sums, counts = kernel_layout.new_state()\n"
        "g = np.ones((2, 3), np.float32)\n"
        "fastkernel.sweep(g, g * 2, 0, True, sums, counts)\n"
        "assert fastkernel.kernel_name() == 'c' and counts[kernel_layout.C_N] == 6, counts\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'llvmlite'}))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != fastkernel.ENV}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
