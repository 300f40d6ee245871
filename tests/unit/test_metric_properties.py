"""Property tests: every metric, both kernels, against a plain float64 reference written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.metrics import fastkernel
from tui_acc.metrics.kernels import compare_tensors

EPS = 1.1920928955078125e-07
SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, -3.3e38, 65504.0, float("nan"), float("inf"), float("-inf")]


def reference(g: np.ndarray, t: np.ndarray, kl: bool) -> dict[str, object]:
    """The definitions of kernels.py, element by element in float64, no cleverness."""
    g = g.astype(np.float64)
    t = t.astype(np.float64)
    ok = np.isfinite(g) & np.isfinite(t)
    gf, tf = g[ok], t[ok]
    n = gf.size
    d = tf - gf
    ng, nt = math.sqrt(float(gf @ gf)), math.sqrt(float(tf @ tf))
    cosine = 1.0 if ng == 0 and nt == 0 else 0.0 if ng == 0 or nt == 0 else float(gf @ tf) / (ng * nt)
    if not n:  # nothing finite on both sides: nothing compared
        cosine = None
    masked = np.abs(gf) > EPS
    rel = np.abs(d[masked]) / np.abs(gf[masked])
    ratio = np.abs(d) / np.where(gf == 0, EPS, np.abs(gf))
    out: dict[str, object] = {
        "cosine": cosine,
        "max_abs_err": float(np.abs(d).max()) if n else None,
        "mean_abs_err": float(np.abs(d).mean()) if n else None,
        "max_rel_err": float(rel.max()) if rel.size else None,
        "mean_rel_err": float(rel.mean()) if rel.size else None,
        "rel_euclidean": (
            math.sqrt(float(d @ d)) / ng if ng > 0 else (0.0 if float(d @ d) == 0 else math.inf)
        )
        if n
        else None,
        "abs_euclidean": math.sqrt(float(d @ d)) if n else None,
        "rmse": math.sqrt(float(d @ d) / n) if n else None,
        "thousandth_ratio": float((ratio < 1e-3).sum()) / n if n else None,
        "five_thousandths_ratio": float((ratio < 5e-3).sum()) / n if n else None,
        "golden_max": float(gf.max()) if n else None,
        "test_min": float(tf.min()) if n else None,
        "golden_nan": int(np.isnan(g).sum()),
        "test_inf": int(np.isinf(t).sum()),
    }
    if kl:
        per_row = []
        for gr, tr in zip(g, t, strict=True):
            if np.isfinite(gr).all() and np.isfinite(tr).all():
                lp = gr - gr.max() - math.log(np.exp(gr - gr.max()).sum())
                lq = tr - tr.max() - math.log(np.exp(tr - tr.max()).sum())
                per_row.append(max(0.0, float((np.exp(lp) * (lp - lq)).sum())))
        out["kl"] = float(np.mean(per_row)) if per_row else None
    return out


def _close(ours: object, theirs: object) -> bool:
    if theirs is None or ours is None:
        return ours is theirs
    assert isinstance(ours, (int, float)) and isinstance(theirs, (int, float))
    if math.isinf(theirs) or math.isinf(ours):
        return ours == theirs
    return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12 * max(1.0, abs(theirs)))


values = st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from(SPECIAL))
shapes = st.tuples(st.integers(1, 4), st.integers(1, 9))


@st.composite
def pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, torch.dtype]:
    shape = draw(shapes)
    g = draw(arrays(np.float32, shape, elements=values))
    mode = draw(st.sampled_from(["noise", "equal", "constant", "independent"]))
    if mode == "equal":
        t = g.copy()
    elif mode == "constant":
        t = np.full(shape, draw(values), dtype=np.float32)
    elif mode == "independent":
        t = draw(arrays(np.float32, shape, elements=values))
    else:
        noise = draw(arrays(np.float32, shape, elements=st.floats(-0.0078125, 0.0078125, width=32)))
        with np.errstate(all="ignore"):
            t = (g * (1 + noise)).astype(np.float32)
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
    return g, t, dtype


@pytest.mark.parametrize(
    "kernel",
    [
        *(
            pytest.param(name, marks=pytest.mark.skipif(isinstance(why, str), reason=f"{name}: {why}"))
            for name, why in ((name, fastkernel.compiled(name)) for name in ("c", "numba"))
        ),
        "numpy",
    ],
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=pairs(), kl=st.booleans())
def test_every_metric_matches_the_reference(
    monkeypatch: pytest.MonkeyPatch, kernel: str, case, kl: bool
) -> None:
    monkeypatch.setenv("TUI_ACC_KERNEL", kernel)
    g, t, dtype = case
    test = torch.from_numpy(t).to(dtype)  # fp16 overflows to inf and bf16 rounds, as a real test run would
    ours = compare_tensors(g, from_torch(test), kl=kl)
    theirs = reference(g, test.double().numpy(), kl)
    for key, value in theirs.items():
        assert _close(ours[key], value), (key, ours[key], value)
    golden64, test64 = g.astype(np.float64).reshape(-1), test.double().numpy().reshape(-1)
    ok = np.isfinite(golden64) & np.isfinite(test64)
    if not ok.any():
        assert ours["worst_index"] is None
    else:
        d = np.where(ok, np.abs(np.where(ok, test64, 0.0) - np.where(ok, golden64, 0.0)), -1.0)
        assert ok[ours["worst_index"]] and d[ours["worst_index"]] == d.max()


@given(value=st.sampled_from([0.0, 1.0, -2.5, 1e30]), size=st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_identical_and_constant_tensors(value: float, size: int) -> None:
    g = np.full((size,), value, dtype=np.float32)
    row = compare_tensors(g, g.copy())
    assert row["cosine"] == 1.0 and row["max_abs_err"] == 0.0 and row["thousandth_ratio"] == 1.0
    assert row["rel_euclidean"] == 0.0
