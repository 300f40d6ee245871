"""The noise floor: TEST's error judged against what a clean run at TEST's dtype makes of GOLDEN.

A bf16 port differs from an fp32 reference at every operator, by as much as bf16's rounding makes
it differ; a fixed threshold either flags that noise or misses a real bug of the same size. Given a
baseline run (the same model at the test's dtype, on a trusted device), each tensor of TEST against
GOLDEN is judged by torch's numerical gate for low-precision results::

    error(test, golden) <= factor * error(baseline, golden) + epsilon

The error is the relative Euclidean distance, ``RMSE / RMS(golden)``: over one golden tensor the
ratio of two of them is the ratio of their RMSEs, which is what torch's gate compares. For
statistics-only rows it is the norms' relative difference. ``factor`` and ``epsilon`` come from
``Thresholds.for_noise`` (2, and 3 for float16/bfloat16; one unit roundoff of the dtype).

A non-finite value the golden lacks, an unreadable file and an integer tensor that differs fail as
they do without a baseline: no baseline makes them noise. Where the baseline lacks the tensor, or
could not be read, the fixed thresholds judge it (``judged`` returns None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tui_acc.rows import NoiseFloor
from tui_acc.tolerances.errors import relative_error
from tui_acc.tolerances.thresholds import Thresholds, gains_non_finite, is_float


def noise_fields(test: Mapping[str, Any], baseline: Mapping[str, Any] | None) -> NoiseFloor:
    """The baseline's own metrics at this tensor and the test's error over the baseline's."""
    if baseline is None:
        return {}
    fields: NoiseFloor = {
        "baseline_cosine": baseline.get("cosine"),
        "baseline_rel_euclidean": baseline.get("rel_euclidean"),
        "baseline_rmse": baseline.get("rmse"),
        "noise_ratio": None,
    }
    test_error, base_error = relative_error(test), relative_error(baseline)
    if test_error is not None and base_error is not None:
        if base_error > 0:
            fields["noise_ratio"] = test_error / base_error
        else:  # the baseline reproduces the golden exactly: any error is infinitely above it
            fields["noise_ratio"] = 0.0 if test_error == 0 else math.inf
    return fields


def judged(
    test: Mapping[str, Any], baseline: Mapping[str, Any] | None, thresholds: Thresholds
) -> bool | None:
    """Whether ``test`` passes against the noise floor ``baseline`` sets, or None when the noise
    floor cannot judge it (no baseline row, an unreadable baseline, an integer tensor): the fixed
    thresholds do then."""
    if test.get("error") or gains_non_finite(test):
        return False
    golden_dtype, test_dtype = test.get("golden_dtype"), test.get("test_dtype")
    stats_only = bool(test.get("stats_only"))
    if not stats_only and not (is_float(golden_dtype) and is_float(test_dtype)):
        return None  # token ids and masks must match exactly, whatever the baseline does
    if baseline is None:
        return None
    test_error, base_error = relative_error(test), relative_error(baseline)
    if test_error is None or base_error is None:
        return None
    factor, epsilon = thresholds.for_noise(golden_dtype, test_dtype)
    return test_error <= factor * base_error + epsilon
