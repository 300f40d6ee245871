"""When a tensor counts as matching its golden: thresholds by dtype, per-operator rules, verdicts.

Defaults, by the least precise dtype of the pair (its sources in brackets):

=========  ============  ==========  ==========  ======================================================
dtype      logits cos >=  logits KL <= op cos >=  source
=========  ============  ==========  ==========  ======================================================
float32    0.9999        1e-5        0.999       ours: fp32 vs fp32 differs only by reduction order
float16    0.999         1e-4        0.99        msit ``logitscmp`` defaults (-cs 0.999 -kl 0.0001)
bfloat16   0.999         5e-3        0.99        the project brief (bf16 carries 8 mantissa bits)
int8       0.99          1e-2        0.98        ours: quantized runs lose more, by design
=========  ============  ==========  ==========  ======================================================

Any metric can be bounded (``cosine``, ``topk_overlap`` and the thousandth ratios from below, the
others from above), for logits or operators, per dtype, and per operator-name pattern (glob).
Integer tensors (token ids) must match exactly.

Statistics-only rows (Max/Min/Mean/Norm, no data) pass when every statistic is where a tensor
whose each element lies within a relative ``d`` of the golden would put it: the norm within
``d * norm``, max, min and mean within ``d * max(|max|, |min|)`` (a statistic moves no further than
the largest element does). ``d`` by dtype, ``STATS_TOLERANCE``: 1% for float32 and float16, 3%
for bfloat16 (its tensors drift up to 2.1% after two layers on the msprobe fixtures; squaring in
RMSNorm doubles a relative error), 5% for int8. ``stats_norm_rel`` in tui-acc.toml sets one ``d``
for every dtype.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tui_acc.tolerances.masks import masked, saturates
from tui_acc.tolerances.rounding import coarser, local_bound

DTYPES = ("float32", "float16", "bfloat16", "int8")
# metrics where bigger is better: a bound on them is a minimum
AT_LEAST = frozenset({"cosine", "topk_overlap", "thousandth_ratio", "five_thousandths_ratio"})

DEFAULT_LOGITS: dict[str, dict[str, float]] = {
    "float32": {"cosine": 0.9999, "kl": 1e-5},
    "float16": {"cosine": 0.999, "kl": 1e-4},
    "bfloat16": {"cosine": 0.999, "kl": 5e-3},
    "int8": {"cosine": 0.99, "kl": 1e-2},
}
STATS_TOLERANCE: dict[str, float] = {"float32": 0.01, "float16": 0.01, "bfloat16": 0.03, "int8": 0.05}
# The noise floor (``--baseline``, tolerances/noise.py): a tensor fails when its error exceeds
# ``factor * the baseline's error + epsilon``. The factors are torch's numerical gate's
# (RMSE(result) <= k * RMSE(reference): k = 2, and 3 for float16 and bfloat16); epsilon is one
# rounding of the test's dtype (its unit roundoff), in the relative error's units, so that a tensor
# the baseline reproduces exactly may still carry its own dtype's rounding.
DEFAULT_NOISE_FACTOR: dict[str, float] = {"float32": 2.0, "float16": 3.0, "bfloat16": 3.0, "int8": 3.0}
DEFAULT_NOISE_EPSILON: dict[str, float] = {
    "float32": 2.0**-24,
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "int8": 2.0**-4,  # float8 e4m3's unit roundoff, the widest of the class's float types
}
DEFAULT_OPS: dict[str, dict[str, float]] = {
    "float32": {"cosine": 0.999},
    "float16": {"cosine": 0.99},
    "bfloat16": {"cosine": 0.99},
    "int8": {"cosine": 0.98},
}


@dataclass(frozen=True)
class Rule:
    """Bounds for operators whose golden or test name matches ``pattern`` (``*`` wildcards)."""

    pattern: str
    bounds: dict[str, float]

    def matches(self, names: tuple[str, ...]) -> bool:
        """Whether any of ``names`` (the golden's and the test's) matches ``pattern`` (case-sensitive)."""
        return any(fnmatch.fnmatchcase(name, self.pattern) for name in names)


@dataclass(frozen=True)
class Thresholds:
    """Every bound a verdict uses; ``Thresholds()`` holds the documented defaults."""

    logits: dict[str, dict[str, float]] = field(default_factory=lambda: _copy(DEFAULT_LOGITS))
    ops: dict[str, dict[str, float]] = field(default_factory=lambda: _copy(DEFAULT_OPS))
    rules: tuple[Rule, ...] = ()
    stats_norm_rel: float | None = None  # one statistics tolerance for every dtype (else by dtype)
    # logits whose top-1 flips between two near-equal candidates are a tie, not a divergence
    near_tie_gap: float = 0.1
    noise_factor: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_NOISE_FACTOR))
    noise_epsilon: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_NOISE_EPSILON))

    def for_noise(self, golden_dtype: object, test_dtype: object) -> tuple[float, float]:
        """The noise floor's ``(factor, epsilon)`` for a tensor of these dtypes."""
        precision = precision_class(golden_dtype, test_dtype)
        return self.noise_factor[precision], self.noise_epsilon[precision]

    def for_logits(self, *dtypes: object) -> dict[str, float]:
        """The logits' bounds (metric -> bound) for the least precise of the dtypes (the golden's, the
        test's, and what the logits were computed in where a Cast followed: the table itself, do not
        mutate it)."""
        return self.logits[precision_class(*dtypes)]

    def for_stats(self, golden_dtype: object, test_dtype: object, floor: str | None = None) -> float:
        """``floor``: the least precise dtype of the runs. A float32 tensor of a bfloat16 model
        (RMSNorm computes in float32) carries bfloat16 error, and its statistics drift as much."""
        if self.stats_norm_rel is not None:
            return self.stats_norm_rel
        return STATS_TOLERANCE[precision_class(golden_dtype, test_dtype, floor)]

    def for_op(
        self, golden_dtype: object, test_dtype: object, names: tuple[str, ...] = ()
    ) -> dict[str, float]:
        """An operator tensor's bounds (metric -> bound, a new dict): the less precise dtype's, then
        each rule that matches one of ``names`` over them, in the rules' order."""
        bounds = dict(self.ops[precision_class(golden_dtype, test_dtype)])
        for rule in self.rules:
            if rule.matches(names):
                bounds.update(rule.bounds)
        return bounds

    def with_bounds(
        self, logits: dict[str, float] | None = None, ops: dict[str, float] | None = None
    ) -> Thresholds:
        """The same thresholds with these bounds applied to every dtype (command-line overrides)."""
        new_logits = {d: {**b, **(logits or {})} for d, b in self.logits.items()}
        new_ops = {d: {**b, **(ops or {})} for d, b in self.ops.items()}
        return replace(self, logits=new_logits, ops=new_ops)

    def as_dict(self) -> dict[str, Any]:
        """Every bound, as the report's ``thresholds`` and the exports give them (written once per
        file: reports/export.py) (``stats_norm_rel``: the table by dtype where no single tolerance
        is set)."""
        return {
            "logits": self.logits,
            "ops": self.ops,
            "rules": [{"pattern": r.pattern, **r.bounds} for r in self.rules],
            "stats_norm_rel": self.stats_norm_rel if self.stats_norm_rel is not None else STATS_TOLERANCE,
            "near_tie_gap": self.near_tie_gap,
            "noise": {"factor": self.noise_factor, "epsilon": self.noise_epsilon},
        }


def _copy(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {k: dict(v) for k, v in table.items()}


def precision_class(*dtypes: object) -> str:
    """The least precise of the dtypes decides which bounds apply."""
    names = {str(d).removeprefix("torch.") for d in dtypes if d}
    if any(n.startswith(("int8", "uint8", "int4", "float8")) for n in names):
        return "int8"
    if "bfloat16" in names:
        return "bfloat16"
    if "float16" in names:
        return "float16"
    return "float32"


def is_float(dtype: object) -> bool:
    """Whether a dtype name (a string; anything else is not) names a float type: ``float*``,
    ``half``, ``bfloat16``, ``double``."""
    return isinstance(dtype, str) and dtype.startswith(("float", "half", "bfloat16", "double"))


def gains_non_finite(row: Mapping[str, object]) -> bool:
    """The test has NaN/Inf the golden does not: a failure whatever the other metrics say."""

    def count(side: str) -> int:
        return int(row.get(f"{side}_nan") or 0) + int(row.get(f"{side}_inf") or 0)  # type: ignore[call-overload]

    return count("test") > count("golden")


def implied_rel_euclidean(cosine: float) -> float:
    """The relative error a cosine bound allows to an error at right angles to the golden
    (``1 - cos ≈ r**2 / 2``): the same budget, given to an error in any direction, so a scale error
    (cosine exactly 1) fails where a rotation as large would."""
    return math.sqrt(2.0 * max(0.0, 1.0 - cosine))


def effective_bounds(row: Mapping[str, object], bounds: Mapping[str, float]) -> dict[str, float]:
    """The bounds that mean something for this tensor.

    Magnitude beside direction: where ``rel_euclidean`` is not bounded, the cosine's bound implies
    one (``implied_rel_euclidean``). A scalar, or a golden whose elements are all equal, has a cosine
    of 1 with anything of the same sign: its values judge it, not the cosine; a constant of several
    elements within its dtype's rounding (``rounding.local_bound``). A mask's fill values
    (float32's -3.4e38 against float16's -65504) differ by design: the cosine judges it, not the
    relative error.
    """
    found = dict(bounds)
    constant = row.get("golden_max") is not None and row.get("golden_max") == row.get("golden_min")
    numel = row.get("numel")
    if "cosine" in found and "rel_euclidean" not in found:
        found["rel_euclidean"] = implied_rel_euclidean(found["cosine"])
        if constant and isinstance(numel, int) and numel > 1:
            # a constant (a scale, a fill) is set, not accumulated: only its dtype's rounding explains
            # a difference (a 1.032 for a 1.0 is 8 bf16 ulps off, within any cosine's budget)
            found["rel_euclidean"] = local_bound(coarser(row.get("golden_dtype"), row.get("test_dtype")))
    if numel == 1 or constant:
        found.pop("cosine", None)
    if masked(row):
        found.pop("rel_euclidean", None)
    return found


def within(row: Mapping[str, object], bounds: Mapping[str, float]) -> bool:
    """Every bounded metric present in ``row`` is on the right side of its bound."""
    for metric, bound in effective_bounds(row, bounds).items():
        value = row.get(metric)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if (value < bound) if metric in AT_LEAST else (value > bound):
            return False
    return True


def stats_passed(row: Mapping[str, object], thresholds: Thresholds, floor: str | None = None) -> bool:
    """Verdict from statistics alone: equal extremes for integers; for floats, every statistic
    within the module docstring's bound. A checksum (msprobe summary_mode md5 or xor) that matches
    passes; one that differs fails when it is all there is (xor), and leaves the statistics to decide
    otherwise (md5: a golden of another dtype never has the same bits). msprobe's nan_check records
    only whether a call produced a NaN: that flag decides."""
    if row.get("error"):
        return False
    if row.get("test_is_nan") is not None:  # nan_check: a NaN only the test produced fails
        return not (row["test_is_nan"] and not row.get("golden_is_nan"))
    checksum = row.get("test_checksum")
    if checksum is not None and checksum == row.get("golden_checksum"):
        return True  # the same bits
    if checksum is not None and row.get("norm_diff") is None and row.get("max_diff") is None:
        return False  # a checksum and nothing else (summary_mode xor): different bits differ
    if _stats_gain_non_finite(row):
        return False
    golden_dtype, test_dtype = row.get("golden_dtype"), row.get("test_dtype")
    if not (is_float(golden_dtype) and is_float(test_dtype)):
        return row.get("max_diff") in (0, 0.0, None) and row.get("min_diff") in (0, 0.0, None)
    tolerance = thresholds.for_stats(golden_dtype, test_dtype, floor)
    norm = row.get("norm_rel_diff")
    if isinstance(norm, float) and not norm <= tolerance:  # NaN fails too
        return False
    # A mask fills with its dtype's lowest value (float32's -3.4e38 golden, float16's -65504 test):
    # such extremes agree whatever their digits, and say nothing about the scale of the values.
    saturated = {
        key
        for key in ("max", "min")
        if saturates(row.get(f"golden_{key}"), golden_dtype) and saturates(row.get(f"test_{key}"), test_dtype)
    }
    extremes = [
        abs(value)
        for key in ("max", "min")
        if key not in saturated and isinstance(value := row.get(f"golden_{key}"), (int, float))
    ]
    scale = max(extremes, default=0.0)
    if not math.isfinite(scale):
        return True  # -inf in the golden: its other statistics say nothing about the values
    for key in ("max", "min", "mean"):
        diff = row.get(f"{key}_diff")
        if key in saturated or not isinstance(diff, (int, float)) or not math.isfinite(diff):
            continue
        if abs(diff) > tolerance * scale:
            return False
    return True


def _stats_gain_non_finite(row: Mapping[str, object]) -> bool:
    for name in ("max", "min", "mean", "norm"):
        g, t = row.get(f"golden_{name}"), row.get(f"test_{name}")
        if (
            isinstance(t, float)
            and not math.isfinite(t)
            and not (isinstance(g, float) and not math.isfinite(g))
        ):
            return True
    return False


def tensor_passed(row: Mapping[str, object], thresholds: Thresholds, floor: str | None = None) -> bool:
    """Verdict for an operator's input or output tensor (``floor``: see ``Thresholds.for_stats``)."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds, floor)
    if row.get("error"):
        return False
    if gains_non_finite(row):
        return False
    golden_dtype, test_dtype = row.get("golden_dtype"), row.get("test_dtype")
    if not (is_float(golden_dtype) and is_float(test_dtype)):
        return row.get("max_abs_err") in (0, 0.0, None)
    names = tuple(str(row[k]) for k in ("golden_node", "test_node") if row.get(k))
    return within(row, thresholds.for_op(golden_dtype, test_dtype, names))


def logits_passed(
    row: Mapping[str, object], thresholds: Thresholds, floor: str | None = None, computed_in: str = ""
) -> bool:
    """Verdict for a token: its logits against the golden logits. ``computed_in``: the dtype the test
    computed them in where a Cast to a wider one followed (TorchAir's Cast of the logits)."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds, logits_floor(floor, computed_in))
    if row.get("error") or gains_non_finite(row):
        return False
    if not isinstance(row.get("cosine"), float):
        return False
    return within(row, thresholds.for_logits(row.get("golden_dtype"), row.get("test_dtype"), computed_in))


def logits_floor(floor: str | None, computed_in: str) -> str | None:
    """The floor a token's logits' statistics are judged at: ``floor`` (the runs' least precise dtype)
    or, where less precise, the dtype the logits were computed in before a Cast widened them: their
    statistics drift as that dtype's do."""
    return precision_class(floor, computed_in) if computed_in else floor


def near_tie(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """The top-1 tokens differ, but each is in the other's top-k and the golden barely prefers its own.

    Such a flip is rounding deciding between two near-equal candidates, not a real divergence.
    """
    if row.get("golden_top1") is None or row.get("golden_top1") == row.get("test_top1"):
        return False
    gap, mutual = row.get("top1_logprob_gap"), row.get("top1_mutual")
    cosine = row.get("cosine")
    op_bound = thresholds.for_op(row.get("golden_dtype"), row.get("test_dtype")).get("cosine", 0.0)
    return (
        bool(mutual)
        and isinstance(gap, float)
        and gap <= thresholds.near_tie_gap
        and isinstance(cosine, float)
        and cosine >= op_bound
    )
