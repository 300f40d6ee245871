"""How numbers and verdicts look on screen (shared by every screen and widget)."""

from __future__ import annotations

import re

from rich.text import Text

PASS_STYLE = "bold green"
FAIL_STYLE = "bold red"
PENDING_STYLE = "dim"
ERROR_STYLE = "bold magenta"


def num(value: float | None, digits: int = 3) -> str:
    """Compact: 3 significant digits, scientific when small or large."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def percent(value: float | None) -> str:
    """A share as a percentage, never rounding a share below 1 up to 100%."""
    if value is None:
        return "-"
    if value >= 1.0:
        return "100%"
    return f"{min(value * 100, 99.9):.1f}%"


def cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


_LABELS = {"local": ("L", "bold red"), "contains": ("c", "red"), "inherited": ("i", "dim red")}


def output_mark(passed: bool | None, label: str | None, error: bool = False) -> Text:
    """✓, or ✗ with where the error starts: L local, c in a child, i inherited from the inputs."""
    cell = mark(passed)
    if label in _LABELS:
        letter, style = _LABELS[label]
        cell.append(letter, style=style)
    if error:
        cell.append("!", style=ERROR_STYLE)
    return cell


def input_mark(passed: bool | None, source: str | None) -> Text:
    """The inputs' verdict; a dim ``f`` when it comes from the operator that fed this one."""
    cell = mark(passed)
    if passed is not None and source not in (None, "files"):
        cell.append("f", style="dim")
    return cell


def token_verdict(verdict: str | None, pending: bool = False) -> Text:
    if pending or verdict is None:
        return Text("…", style=PENDING_STYLE)
    styles = {"pass": PASS_STYLE, "fail": FAIL_STYLE, "near-tie": "bold yellow", "error": ERROR_STYLE}
    words = {"pass": "pass", "fail": "FAIL", "near-tie": "tie", "error": "ERR"}
    return Text(words.get(verdict, verdict), style=styles.get(verdict, ""))


def mark(passed: bool | None) -> Text:
    """One-cell verdict for tree labels and the In/Out columns."""
    if passed is None:
        return Text("·", style=PENDING_STYLE)
    return Text("✓", style=PASS_STYLE) if passed else Text("✗", style=FAIL_STYLE)


def styled(text: str, passed: bool | None) -> Text:
    style = PENDING_STYLE if passed is None else ("" if passed else "red")
    return Text(text, style=style)


_MSPROBE_MODULE = re.compile(r"^Module\.(.+)\.[A-Za-z_][A-Za-z0-9_]*\.(?:forward|backward)\.\d+$")
_MSPROBE_API = re.compile(r"^[A-Za-z]+\.(.+)\.(\d+)\.(?:forward|backward)$")
_MSPROBE_SAVE = re.compile(r"^(.+\.\d+)\.debug$")  # level debug: {variable}.{count}.debug


def short_name(name: str) -> str:
    """The part of a node name that tells it from its siblings.

    ``root.model.layers.2`` -> ``layers.2``; ``root.model.layers.2.mlp`` -> ``mlp``;
    ``8_LlamaLayer/7_LinearOperation`` -> ``7_LinearOperation``;
    ``Module.model.layers.0.mlp.LlamaMLP.forward.3`` -> ``mlp``;
    ``Functional.linear.5.forward`` -> ``linear.5``; msprobe's saves ``mlp1.0.debug`` -> ``mlp1.0``.
    """
    save = _MSPROBE_SAVE.match(name)
    if save:  # the saved variable and its count are what tells it from the other saves
        return save.group(1)
    module = _MSPROBE_MODULE.match(name)
    if module:
        name = module.group(1)
    else:
        api = _MSPROBE_API.match(name)
        if api:
            return f"{api.group(1)}.{api.group(2)}"
    name = name.rsplit("/", 1)[-1]
    parts = name.split(".")
    if len(parts) >= 2 and parts[-1].isdigit():
        return ".".join(parts[-2:])
    return parts[-1]


_DTYPE_SHORT = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}


def dtypes(golden: str | None, test: str | None) -> str:
    """``f32/bf16``, or one name when both sides agree."""
    g, t = _DTYPE_SHORT.get(golden or "", golden or "?"), _DTYPE_SHORT.get(test or "", test or "?")
    return g if g == t else f"{g}/{t}"


def display_name(name: str) -> str:
    """Module names without the ``root.`` every msit name starts with."""
    return name.removeprefix("root.")
