"""The thresholds in force for the pair on screen, as the help and the KL strip state them.

``Thresholds`` holds bounds for every dtype; which apply depends on the dtypes of each pair of
tensors (the least precise of the two), and statistics-only rows on the least precise dtype of the
whole run (``MetricsEngine``'s floor, worked out here the same way from the indexes: no tensor read).
"""

from __future__ import annotations

from tui_acc.rows import Row
from tui_acc.session import Comparison
from tui_acc.tolerances.thresholds import AT_LEAST, DTYPES, Thresholds, precision_class

_LABELS = {"cosine": "cosine", "kl": "KL", "max_abs_err": "MaxAbsErr", "rel_euclidean": "RelEucl"}


def run_floor(cmp: Comparison) -> str | None:
    """The least precise float dtype of either run (None: the indexes know no dtype)."""
    dtypes = cmp.golden.float_dtypes | cmp.test.float_dtypes
    return precision_class(*dtypes) if dtypes else None


def run_classes(cmp: Comparison) -> list[str]:
    """The dtype classes the run's float tensors fall in, most precise first (none: the indexes do
    not know, as for torch ``.pth`` dumps, whose dtypes are only known once a tensor is read)."""
    found = {precision_class(d) for d in cmp.golden.float_dtypes | cmp.test.float_dtypes}
    return [d for d in DTYPES if d in found]


def number(value: float) -> str:
    """A bound as a user would type it: ``0.999``, ``0.03``, ``1e-5``, ``5e-3``."""
    if 0 < abs(value) < 0.01:  # as in the docs and tui-acc.toml
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def bounds_text(bounds: dict[str, float]) -> str:
    """``cosine ≥ 0.999, KL ≤ 0.03``: each metric's bound, as the help and the KL strip state them."""
    return ", ".join(
        f"{_LABELS.get(metric, metric)} {'≥' if metric in AT_LEAST else '≤'} {number(bound)}"
        for metric, bound in bounds.items()
    )


def strip_bound(row: Row, thresholds: Thresholds, floor: str | None) -> tuple[str, float | None]:
    """(what the token strip plots for ``row``, the threshold it is judged against)."""
    golden, test = row.get("golden_dtype"), row.get("test_dtype")
    if row.get("kl") is not None or not row.get("stats_only"):
        return "KL", thresholds.for_logits(golden, test, row.get("computed_in")).get("kl")
    return "NormRel", thresholds.for_stats(golden, test, floor)


def help_lines(cmp: Comparison, logits_dtypes: tuple[object, object] | None = None) -> list[str]:
    """The bounds in force for this pair, one line each. ``logits_dtypes``: the logits' own dtypes
    when a token is compared already (else every dtype class of the run is listed)."""
    thresholds = cmp.thresholds
    # dtypes unknown to the index: those of the logits stand for the run, else every class is listed
    classes = run_classes(cmp) or (
        [precision_class(*logits_dtypes)] if logits_dtypes is not None else list(DTYPES)
    )
    if cmp.single:
        return [
            "One dump checked on its own (no golden): a float tensor is anomalous when it holds NaN or Inf, "
            "a float16 one when it reaches ±65504; an output when it is all zero while its inputs are not, "
            "or when its largest magnitude is jump_factor times what its inputs allow (their largest, or "
            "what a norm's rsqrt, an exp or a sum makes of them; and at least jump_floor; [anomalies] in "
            "tui-acc.toml). Out ✗L: the anomaly starts at this operator; "
            "✗i: it came in with the inputs."
        ]
    lines = ["Each pair of tensors is judged by the less precise of its two dtypes."]
    if cmp.golden.statistics_only or cmp.test.statistics_only:
        tolerance = thresholds.for_stats(None, None, run_floor(cmp))
        lines.append(
            f"Statistics only (no data): NormRel ≤ {number(tolerance)}; MaxDiff, MinDiff, MeanDiff within "
            f"{number(tolerance)} of the golden's largest |max|, |min| ({run_floor(cmp) or 'float32'} run)."
        )
    if logits_dtypes is not None:
        logits_class = precision_class(*logits_dtypes)
        lines.append(f"Logits ({logits_class}): {bounds_text(thresholds.for_logits(*logits_dtypes))}.")
    else:
        lines += [f"Logits ({c}): {bounds_text(thresholds.for_logits(c, c))}." for c in classes]
    lines += [f"Operator tensors ({c}): {bounds_text(thresholds.for_op(c, c))}." for c in classes]
    lines += [f"Operators named {rule.pattern}: {bounds_text(rule.bounds)}." for rule in thresholds.rules]
    lines.append("Integer tensors (token ids, masks) must match exactly.")
    if cmp.baseline is not None:
        limits = "; ".join(
            f"{c}: factor {number(factor)}, epsilon {number(epsilon)}"
            for c in classes
            for factor, epsilon in [thresholds.for_noise(c, c)]
        )
        lines.append(
            f"Against the baseline {cmp.baseline.root}, where it has the tensor: a float tensor passes when "
            f"RMSE/RMS(golden) ≤ factor × the baseline's + epsilon (×noise: the ratio); {limits}."
        )
    return lines
