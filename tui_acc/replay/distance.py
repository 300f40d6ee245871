"""How far a dumped output is from its replay, in float64, over the elements replayed."""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np

from tui_acc.numbers import number


class Distance(TypedDict):
    """The replay is the reference: relative errors are relative to it."""

    numel: int
    cosine: float | None
    max_abs_err: float | None
    mean_abs_err: float | None
    max_rel_err: float | None
    rel_euclidean: float | None
    dumped_nan: int
    dumped_inf: int
    replay_nan: int
    replay_inf: int


def distance(replay: np.ndarray, dumped: np.ndarray) -> Distance:
    """The distance between two arrays of one shape (integers compare exactly, as float64 of them).
    Norms and the cosine are dot products (BLAS) and NaN and Inf are counted only where some value
    is not finite (a squared norm that is not): a replayed elementwise output of millions of values
    takes a few passes, not a dozen."""
    r = np.asarray(replay, dtype=np.float64).reshape(-1)
    d = np.asarray(dumped, dtype=np.float64).reshape(-1)
    found = Distance(
        numel=int(r.size),
        cosine=None,
        max_abs_err=None,
        mean_abs_err=None,
        max_rel_err=None,
        rel_euclidean=None,
        dumped_nan=0,
        dumped_inf=0,
        replay_nan=0,
        replay_inf=0,
    )
    # the squared norms first: finite, they prove every value finite (NaN and Inf are looked for only
    # where one is not, or where a square overflows)
    rr, dd = float(np.dot(r, r)), float(np.dot(d, d))
    if not math.isfinite(rr + dd):
        finite_r, finite_d = np.isfinite(r), np.isfinite(d)
        if not (finite_r.all() and finite_d.all()):
            found["dumped_nan"], found["dumped_inf"] = int(np.isnan(d).sum()), int(np.isinf(d).sum())
            found["replay_nan"], found["replay_inf"] = int(np.isnan(r).sum()), int(np.isinf(r).sum())
            finite = finite_r & finite_d
            r, d = r[finite], d[finite]
            rr, dd = float(np.dot(r, r)), float(np.dot(d, d))
    if not r.size:
        return found
    diff = d - r
    np.abs(diff, out=diff)
    norm_r, norm_d, norm_diff = math.sqrt(rr), math.sqrt(dd), math.sqrt(float(np.dot(diff, diff)))
    relative = np.abs(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        # where the replay is 0: inf for any difference, NaN (0 / 0) where there is none, left out
        # (fmax skips NaN; all NaN is no relative error at all)
        np.divide(diff, relative, out=relative)
    largest = float(np.fmax.reduce(relative))
    found["cosine"] = float(np.dot(r, d) / (norm_r * norm_d)) if norm_r > 0 and norm_d > 0 else None
    found["max_abs_err"] = float(diff.max())
    found["mean_abs_err"] = float(diff.mean())
    found["max_rel_err"] = 0.0 if math.isnan(largest) else largest
    found["rel_euclidean"] = norm_diff / norm_r if norm_r > 0 else (0.0 if norm_diff == 0 else float("inf"))
    return found


def rounding_noise(integers: np.ndarray) -> float:
    """The relative rms error of values rounded to these integers (one step, rms 1/sqrt(12) per
    element) against their size: what a quantisation to them carries; 0 for all zeros."""
    values = np.asarray(integers, dtype=np.float64).reshape(-1)
    size = float(np.linalg.norm(values))
    return math.sqrt(values.size / 12.0) / size if size > 0 else 0.0


def within_steps(unrounded: np.ndarray, dumped: np.ndarray, slack: float) -> tuple[bool, str, float]:
    """An integer output against the values a correct kernel rounds: consistent where every element
    is one of the integers next to its unrounded value, either of them only where that value is
    within ``slack`` (relative) of a tie. Also the relative error rounding alone gives (an rms of
    1/sqrt(12) per element), the expected local error."""
    exact = np.asarray(unrounded, dtype=np.float64).reshape(-1)
    got = np.asarray(dumped, dtype=np.float64).reshape(-1)
    off = np.abs(got - exact)
    allowed = 0.5 + slack * np.abs(exact) + 1e-9
    beyond = int(np.count_nonzero(~(off <= allowed)))  # NaN counts as beyond
    expected = rounding_noise(exact)
    if beyond:
        largest = float(np.nanmax(off)) if off.size else 0.0
        return (
            False,
            f"{beyond} of {exact.size} elements beyond their rounding step (up to {number(largest)})",
            expected,
        )
    ties = int(np.count_nonzero(np.abs(got - np.round(exact)) >= 1))
    said = f" ({ties} one step off at a tie)" if ties else ""
    return True, f"every element within its rounding step{said}", expected
