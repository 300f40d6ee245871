"""What makes one tensor anomalous, from the facts its row holds (data or recorded statistics).

- ``nan``, ``inf``: it holds NaN or Inf (counted where the data was read; a statistics dump says so
  through its max/min or its NaN flag);
- ``overflow``: a float16 tensor at the format's limit, +65504 (an NPU saturates there), or Inf:
  float16 overflowed (an accumulation kept in float16, a missing rescale); -65504 alone is
  ``torch.finfo(float16).min``, the value attention masks are filled with, and is not counted;
- ``zeros``: a non-empty float output that is all zero (a kernel that wrote nothing, a lost buffer);
- ``jump``: an output whose largest magnitude is ``jump_factor`` times what its inputs allow, and
  at least ``jump_floor``: a scale error (a dequantisation scale applied twice, a missing
  1/sqrt(d)). What the inputs allow is their largest float magnitude, except for the operators
  whose arithmetic makes large values from small ones by design (arithmetic.py: a norm's rsqrt of
  its variance, a softmax's exp, a reciprocal, a power, a sum, a mask's fill), judged against the
  bound their inputs' statistics predict (rsqrt's 1/sqrt(min x)); an extreme at the dtype's limit
  is a mask's fill (tolerances/masks.py), not a magnitude; integer inputs (token ids, positions) say
  nothing of scale and are not counted.

Whether an anomaly started at its operator or came in with its inputs is the judge's question
(verdicts/walk.py: an output that fails while the inputs pass is local), as for a pair.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tui_acc.anomalies.calls import Expected
from tui_acc.errors import TuiAccError
from tui_acc.numbers import as_finite, shown_value
from tui_acc.tolerances.masks import saturates

FLOAT16_MAX = 65504.0
KINDS = ("nan", "inf", "overflow", "zeros", "jump")


class AnomalySettingsError(TuiAccError, ValueError):
    """An ``[anomalies]`` table that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class AnomalySettings:
    jump_factor: float = 1e3
    jump_floor: float = 1.0

    @classmethod
    def from_table(cls, table: Any, where: str) -> AnomalySettings:
        """``[anomalies]`` of tui-acc.toml: ``jump_factor``, ``jump_floor``."""
        if table is None:
            return cls()
        if not isinstance(table, dict):
            raise AnomalySettingsError(f"{where}: [anomalies] must be a table")
        unknown = set(table) - {"jump_factor", "jump_floor"}
        if unknown:
            raise AnomalySettingsError(
                f"{where}: [anomalies]: unknown keys {sorted(unknown)}; known: jump_factor, jump_floor"
            )
        values = {}
        for key, value in table.items():
            finite = as_finite(value)
            if finite is None or not finite > 0:
                raise AnomalySettingsError(
                    f"{where}: anomalies.{key} must be a positive number, not {shown_value(value)}"
                )
            values[key] = finite
        return cls(**values)


def largest_magnitude(row: Mapping[str, Any]) -> float | None:
    """max(|max|, |min|) of the tensor (None when neither is known)."""
    known = [abs(v) for v in (row.get("test_max"), row.get("test_min")) if isinstance(v, (int, float))]
    return max(known) if known else None


def is_float(row: Mapping[str, Any]) -> bool:
    """Whether the row's test tensor has a floating dtype (float*, bfloat*, half, double); an unknown dtype
    is not."""
    dtype = str(row.get("test_dtype") or "")
    return dtype.startswith(("float", "bfloat", "half", "double"))


@dataclass(frozen=True)
class Inputs:
    """What an output's own dumped inputs say: whether any was dumped, the largest magnitude of the
    float ones (None: no float input, as a mask built from booleans or an embedding of token ids),
    and what the operator's arithmetic expects of its output from them (arithmetic.py; None: the
    largest input is the bound)."""

    dumped: bool
    largest: float | None
    expected: Expected | None = None


def anomaly(
    row: Mapping[str, Any], inputs: Inputs | None, settings: AnomalySettings
) -> tuple[str, float] | None:
    """``(kind, figure)``: the first of KINDS the tensor shows (the figure: a count, the value at
    the limit, or the jump's ratio), or None. ``inputs``: an output's inputs (None for an input).

    NaN is always an anomaly. Inf and float16's limit are anomalies when produced from finite inputs
    below the limit, or where no input was dumped to tell: a mask filled with -inf or float16's
    minimum from boolean inputs is what it is meant to be, and a tensor built from one carries it.
    """
    if not is_float(row):
        return None
    nan = int(row.get("test_nan") or 0) + (1 if row.get("test_is_nan") else 0)
    extremes = [v for v in (row.get("test_max"), row.get("test_min")) if isinstance(v, (int, float))]
    if nan or any(math.isnan(v) for v in extremes):
        return "nan", float(max(nan, 1))
    if (
        inputs is None
    ):  # an input: its NaN is what makes its operator's NaN inherited; the rest is its producer's
        return None
    inf = int(row.get("test_inf") or 0) + sum(1 for v in extremes if math.isinf(v))
    largest = largest_magnitude(row)
    dtype = str(row.get("test_dtype"))
    float16 = dtype in ("float16", "half")
    limit = FLOAT16_MAX if float16 else math.inf
    produced = not inputs.dumped or (inputs.largest is not None and inputs.largest < limit)
    expected = inputs.expected or Expected()
    # what the operator writes by design: masked_fill(-inf), full(-inf), where(cond, 0, finfo.min)
    filled_inf = any(math.isinf(f) for f in expected.fills)
    filled_limit = any(f >= FLOAT16_MAX for f in expected.fills)
    # -65504 alone is torch.finfo(float16).min, what attention masks are filled with (a scalar argument,
    # never dumped as an input); saturation reaches +65504 too, and arithmetic beyond it gives Inf
    top = row.get("test_max")
    at_limit = isinstance(top, (int, float)) and top >= FLOAT16_MAX and not filled_limit
    inf_made = bool(inf) and not filled_inf
    if float16 and (inf_made or at_limit) and produced:
        return "overflow", float(largest) if largest is not None else math.inf
    if inf_made and produced:
        return "inf", float(inf)
    numel = row.get("numel")
    all_zero = extremes and all(v == 0 for v in extremes) and row.get("test_norm") in (None, 0, 0.0)
    # zeros in, zeros out is not here, nor zeros(), a fill with 0 or a product with 0
    if all_zero and (numel is None or numel > 0) and inputs.largest != 0 and not expected.zeros:
        return "zeros", float(numel or 0)
    magnitude = _unfilled_magnitude(extremes, dtype, expected.fills)
    bound = expected.magnitude if expected.magnitude is not None else inputs.largest
    if magnitude is not None and bound and magnitude >= settings.jump_floor:
        ratio = magnitude / bound
        if math.isfinite(ratio) and ratio >= settings.jump_factor:
            return "jump", ratio
    return None


def _unfilled_magnitude(extremes: list[float], dtype: str, fills: tuple[float, ...]) -> float | None:
    """The largest finite |extreme| that is not a fill: a value at the dtype's limit is a mask's
    (tolerances/masks.py: float32's -3.4e38, float16's -65504), as is a value the operator fills with."""
    values = [abs(v) for v in extremes if math.isfinite(v) and not saturates(v, dtype) and v not in fills]
    return max(values) if values else None


def anomaly_text(kind: str | None, figure: float | None) -> str:
    """An anomaly's figure as words: ``3 elements``, ``|x| = 65504``, ``1.2e+03x what its inputs allow``."""
    if figure is None or kind is None:
        return "-"
    if kind in ("nan", "inf"):
        return f"{int(figure)} elements"
    if kind == "zeros":
        return f"all {int(figure)} elements"
    if kind == "overflow":
        return f"|x| = {figure:g}"
    return f"{figure:.3g}x what its inputs allow"
