"""How numbers and verdicts look on screen (shared by every screen and widget)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.text import Text

from tui_acc import numbers

PENDING_STYLE = "dim"


@dataclass(frozen=True)
class Palette:
    """The styles that carry a verdict. Failures stand out most, with colour or without."""

    passed: str
    failed: str  # the ✗ mark, FAIL, an error
    failed_text: str  # a failing row's name and deciding metric
    suspect: str  # ◆: the first operator whose inputs pass and output fails; "error starts here"
    child: str  # the error starts in a child
    inherited: str  # the inputs were already off
    error: str
    near_tie: str


COLOUR = Palette(
    passed="bold green",
    failed="bold red",
    failed_text="red",
    suspect="bold red reverse",
    child="red",
    inherited="dim red",
    error="bold magenta",
    near_tie="bold yellow",
)

# NO_COLOR: textual turns every colour into its grey (Monochrome filter), and red on the dark
# background becomes grey on grey (contrast about 1.5:1). Without colour, weight and reverse video
# say what colour said: failures in reverse or bold, in the foreground colour; passes plain.
MONOCHROME = Palette(
    passed="",
    failed="bold reverse",
    failed_text="bold",
    suspect="bold reverse",
    child="bold",
    inherited="",
    error="bold reverse",
    near_tie="bold",
)

_palette = COLOUR


def use_monochrome(monochrome: bool) -> None:
    """Pick the styles for the app about to run (``App.no_color``: NO_COLOR was set)."""
    global _palette
    _palette = MONOCHROME if monochrome else COLOUR


def palette() -> Palette:
    """The styles in force (colour, or monochrome under NO_COLOR: ``use_monochrome``)."""
    return _palette


def num(value: float | None) -> str:
    """Every metric but cosine: the report's rule (tui_acc.numbers), four significant digits."""
    return numbers.number(value)


def percent(value: float | None) -> str:
    """A share as a percentage, never rounding a share below 1 up to 100%."""
    if value is None:
        return "-"
    if value >= 1.0:
        return "100%"
    return f"{min(value * 100, 99.9):.1f}%"


def cosine(value: float | None) -> str:
    """A cosine as every screen shows it: six decimals, ``-`` when there is none (tui_acc.numbers)."""
    return numbers.cosine(value)


def ratio(value: float | None) -> str:
    """The noise ratio (``--baseline``): ``12.3x``."""
    return numbers.ratio(value)


def output_mark(passed: bool | None, label: str | None, error: bool = False) -> Text:
    """✓, or ✗ with where the error starts: L local, c in a child, i inherited from the inputs."""
    cell = mark(passed)
    labels = {"local": ("L", _palette.suspect), "contains": ("c", _palette.child)}
    labels["inherited"] = ("i", _palette.inherited)
    if label in labels:
        letter, style = labels[label]
        cell.append(letter, style=style)
    if error:
        cell.append("!", style=_palette.error)
    return cell


def input_mark(passed: bool | None, source: str | None) -> Text:
    """The inputs' verdict; a dim ``f`` when it comes from the operator that fed this one."""
    cell = mark(passed)
    if passed is not None and source not in (None, "files"):
        cell.append("f", style="dim")
    return cell


def token_verdict(verdict: str | None, pending: bool = False) -> Text:
    """A token's verdict cell: pass, FAIL, tie (near-tie), ERR, or a dim ``…`` while ``pending``."""
    if pending or verdict is None:
        return Text("…", style=PENDING_STYLE)
    p = _palette
    styles = {"pass": p.passed, "fail": p.failed, "near-tie": p.near_tie, "error": p.error}
    words = {"pass": "pass", "fail": "FAIL", "near-tie": "tie", "error": "ERR"}
    return Text(words.get(verdict, verdict), style=styles.get(verdict, ""))


def mark(passed: bool | None) -> Text:
    """One-cell verdict for tree labels and the In/Out columns."""
    if passed is None:
        return Text("·", style=PENDING_STYLE)
    return Text("✓", style=_palette.passed) if passed else Text("✗", style=_palette.failed)


def suspect(text: str) -> Text:
    """The first failing operator's marker (◆) and "error starts here"."""
    return Text(text, style=_palette.suspect)


def failing(text: str, failed: bool = True) -> Text:
    """Text that says something failed (a NaN count, a checksum that differs)."""
    return Text(text, style=_palette.failed_text if failed else "")


def figure(text: str, passed: bool | None = True) -> Text:
    """A number in a table column: right-aligned so that the digits line up, styled by the verdict."""
    cell = styled(text, passed)
    cell.justify = "right"
    return cell


def styled(text: str, passed: bool | None) -> Text:
    """``text`` styled by a verdict: dim when None (pending), plain when passed, the failure style when
    not."""
    style = PENDING_STYLE if passed is None else ("" if passed else _palette.failed_text)
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


_WHOLE_MODEL = ("model", "transformer")


def qualified_name(name: str, parent: str = "") -> str:
    """What tells a row from every other row of the token: its layer's index and its own name.

    ``root.model.layers.2.mlp.down_proj`` -> ``2.mlp.down_proj`` (the ModuleList's name and the
    model's own are the same in every row); ``root.model.layers.2`` -> ``layers.2``;
    ``Module.model.layers.0.mlp.LlamaMLP.forward.3`` -> ``0.mlp``; an API call or a save is named by
    its module, ``parent`` (already qualified): ``0.mlp`` + ``Functional.linear.5.forward`` ->
    ``0.mlp.linear.5``; ATB's ``3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation`` stays whole.
    """
    if not _MSPROBE_MODULE.match(name) and (_MSPROBE_API.match(name) or _MSPROBE_SAVE.match(name)):
        leaf = short_name(name)
        return f"{parent}.{leaf}" if parent and parent not in _WHOLE_MODEL else leaf
    module = _MSPROBE_MODULE.match(name)
    name = module.group(1) if module else display_name(name)
    if "/" in name:
        return name
    parts = name.split(".")
    # a container followed by an index and more: layers.2.mlp -> 2.mlp
    kept = [p for i, p in enumerate(parts) if not (i + 2 < len(parts) and parts[i + 1].isdigit())]
    if len(kept) > 1 and kept[0] in _WHOLE_MODEL:
        kept = kept[1:]
    return ".".join(kept)


def compact_path(name: str) -> str:
    """An ATB path with its ancestors cut to their index, its leaf whole:
    ``3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation`` -> ``3/3/3_LinearOperation``. Every row of a
    token still differs (the leaf alone, ``3_LinearOperation``, is in every layer)."""
    *ancestors, leaf = display_name(name).split("/")
    short = [part.split("_", 1)[0] if part.split("_", 1)[0].isdigit() else part for part in ancestors]
    return "/".join([*short, leaf])


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


def elide_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, its middle replaced by ``…``: both ends tell things apart.

    The end gets the larger share: a path's or a name's last part says the most (``down_proj``, ``.1``).
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 3
    tail = width - 1 - head
    return f"{text[:head]}…{text[len(text) - tail :]}"


def sides_title(golden: str, test: str, width: int) -> str:
    """``golden G  test T`` in ``width`` cells, each path elided in its middle if it must be."""
    words = len("golden   test ")
    room = max(width - words, 8)
    if len(golden) + len(test) > room:
        short = min(len(golden), len(test), room // 2)  # the shorter keeps what it needs, up to half
        g_room = short if len(golden) <= len(test) else room - short
        golden, test = elide_middle(golden, g_room), elide_middle(test, room - g_room)
    return f"golden {golden}  test {test}"
