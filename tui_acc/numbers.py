"""How a metric's value is written, on screen and in the text report: one rule everywhere.

Two notations, each kept to one kind of quantity so that a column never mixes them:

- ``cosine``: a similarity bounded by 1 and read by its distance from 1, in fixed notation with six
  decimals (``0.999981``): the digits that decide a verdict against 0.99 or 0.999 are always there.
- ``number``: every other metric (errors, KL, relative norms, statistics' differences), whose scale
  spans decades from one row to the next: four significant digits in scientific notation
  (``1.720e-02``), always, trailing zeros kept, so a column's digits line up whatever the magnitude.
  An exact zero is ``0``.

A third, ``ratio``, is for how many times one error is another (``--baseline``'s noise ratio):
``0.4x``, ``12.3x``, ``2.1e+04x``: read against the factor of 2 or 3 the verdict uses.
"""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 4
COSINE_DECIMALS = 6


def number(value: float | None) -> str:
    """``1.720e-02``: four significant digits, scientific notation; ``-`` when there is no value."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)  # nan, inf, -inf
    if value == 0:
        return "0"
    return f"{value:.{SIGNIFICANT_DIGITS - 1}e}"


def cosine(value: float | None) -> str:
    """``0.999981``: fixed notation, six decimals; ``-`` when there is no value."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{COSINE_DECIMALS}f}"


def ratio(value: float | None) -> str:
    """``12.3x``: one decimal, scientific from 1000 on; ``-`` when there is no value."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return f"{value}x"  # infx: the baseline reproduces the golden exactly, the test does not
    return f"{value:.1f}x" if value < 1000 else f"{value:.1e}x"


def as_finite(value: object) -> float | None:
    """``value`` as a finite float where it is an int or float (not a bool) that is one; None for
    anything else, an integer past float's range included (float() raises OverflowError on a
    400-digit integer, as math.isfinite does)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def shown_value(value: object) -> str:
    """``value`` for a message, short, whatever it is: repr() of an integer over 4,300 digits raises
    ValueError (Python's limit on converting one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 14_000:  # some 4,200 digits
            return f"an integer of some {int(value.bit_length() * math.log10(2)) + 1} digits"
        unit = "digits"
    else:
        unit = "characters"
    try:
        text = repr(value)
    except ValueError:  # a list or table holding such an integer (tomllib reads hex ones past the limit)
        return f"a {type(value).__name__} holding an integer of over 4,300 digits"
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} {unit})"
