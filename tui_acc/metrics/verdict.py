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
Integer tensors (token ids) must match exactly. Statistics-only rows pass when L2 norms differ
by at most ``stats_norm_rel``.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

DTYPES = ("float32", "float16", "bfloat16", "int8")
# metrics where bigger is better: a bound on them is a minimum
AT_LEAST = frozenset({"cosine", "topk_overlap", "thousandth_ratio", "five_thousandths_ratio"})

DEFAULT_LOGITS: dict[str, dict[str, float]] = {
    "float32": {"cosine": 0.9999, "kl": 1e-5},
    "float16": {"cosine": 0.999, "kl": 1e-4},
    "bfloat16": {"cosine": 0.999, "kl": 5e-3},
    "int8": {"cosine": 0.99, "kl": 1e-2},
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
        return any(fnmatch.fnmatchcase(name, self.pattern) for name in names)


@dataclass(frozen=True)
class Thresholds:
    """Every bound a verdict uses; ``Thresholds()`` holds the documented defaults."""

    logits: dict[str, dict[str, float]] = field(default_factory=lambda: _copy(DEFAULT_LOGITS))
    ops: dict[str, dict[str, float]] = field(default_factory=lambda: _copy(DEFAULT_OPS))
    rules: tuple[Rule, ...] = ()
    stats_norm_rel: float = 0.01
    # logits whose top-1 flips between two near-equal candidates are a tie, not a divergence
    near_tie_gap: float = 0.1

    def for_logits(self, golden_dtype: object, test_dtype: object) -> dict[str, float]:
        return self.logits[precision_class(golden_dtype, test_dtype)]

    def for_op(
        self, golden_dtype: object, test_dtype: object, names: tuple[str, ...] = ()
    ) -> dict[str, float]:
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
        return {
            "logits": self.logits,
            "ops": self.ops,
            "rules": [{"pattern": r.pattern, **r.bounds} for r in self.rules],
            "stats_norm_rel": self.stats_norm_rel,
            "near_tie_gap": self.near_tie_gap,
        }


def _copy(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {k: dict(v) for k, v in table.items()}


def precision_class(golden_dtype: object, test_dtype: object) -> str:
    """The least precise of the two dtypes decides which bounds apply."""
    names = {str(d) for d in (golden_dtype, test_dtype) if d}
    if any(n.startswith(("int8", "uint8", "int4", "float8")) for n in names):
        return "int8"
    if "bfloat16" in names:
        return "bfloat16"
    if "float16" in names:
        return "float16"
    return "float32"


def _is_float(dtype: object) -> bool:
    return isinstance(dtype, str) and dtype.startswith(("float", "half", "bfloat16", "double"))


def _gains_non_finite(row: Mapping[str, object]) -> bool:
    """The test has NaN/Inf the golden does not: a failure whatever the other metrics say."""

    def count(side: str) -> int:
        return int(row.get(f"{side}_nan") or 0) + int(row.get(f"{side}_inf") or 0)  # type: ignore[call-overload]

    return count("test") > count("golden")


def within(row: Mapping[str, object], bounds: Mapping[str, float]) -> bool:
    """Every bounded metric present in ``row`` is on the right side of its bound."""
    for metric, bound in bounds.items():
        value = row.get(metric)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if (value < bound) if metric in AT_LEAST else (value > bound):
            return False
    return True


def stats_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict from statistics alone: equal extremes for integers, close L2 norms for floats."""
    if row.get("error"):
        return False
    if _stats_gain_non_finite(row):
        return False
    if not (_is_float(row.get("golden_dtype")) and _is_float(row.get("test_dtype"))):
        return row.get("max_diff") in (0, 0.0, None) and row.get("min_diff") in (0, 0.0, None)
    norm = row.get("norm_rel_diff")
    return norm is None or (isinstance(norm, float) and norm <= thresholds.stats_norm_rel)


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


def tensor_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict for an operator's input or output tensor."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds)
    if row.get("error"):
        return False
    if _gains_non_finite(row):
        return False
    golden_dtype, test_dtype = row.get("golden_dtype"), row.get("test_dtype")
    if not (_is_float(golden_dtype) and _is_float(test_dtype)):
        return row.get("max_abs_err") in (0, 0.0, None)
    names = tuple(str(row[k]) for k in ("golden_node", "test_node") if row.get(k))
    return within(row, thresholds.for_op(golden_dtype, test_dtype, names))


def logits_passed(row: Mapping[str, object], thresholds: Thresholds) -> bool:
    """Verdict for a token: its logits against the golden logits."""
    if row.get("stats_only"):
        return stats_passed(row, thresholds)
    if row.get("error") or _gains_non_finite(row):
        return False
    if not isinstance(row.get("cosine"), float):
        return False
    return within(row, thresholds.for_logits(row.get("golden_dtype"), row.get("test_dtype")))


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
