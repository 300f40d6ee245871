"""msprobe L1's API calls grouped by the layer that made them, from ``stack.json`` and execution order.

An L1 dump records API calls only (``Functional.linear.43.forward``), and its ``construct.json`` is
empty: the call tree is flat, one row per call. ``stack.json`` holds each call's Python stack, one
entry per distinct stack (every layer's ``q_proj`` shares one), so a stack alone cannot say which
layer a call was in; the order can. Where two calls in a row pass through the same call site and
the function below it starts again at an earlier line (a decoder layer's ``forward`` back at its
first line), a new call of that function began: a new layer. The call site repeated most is the
layer loop (``hidden_states = decoder_layer(...)`` names the layers ``decoder_layer.0``, ``.1``...);
within a layer, the line of its ``forward`` a call came from names its module (``self.mlp(...)``:
``mlp``), and so do the lines of the function holding the loop for calls outside the layers
(``self.embed_tokens(...)``).

The groups are for reading only: a tree to look at (``grouped_tree``), never the tree pairing and
judging use. Whatever the stacks do not say stays where it was, under the root.

See docs/formats.md §3.3.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

from tui_acc.dumps.model import DumpIndex, Node, NodeTree
from tui_acc.dumps.policy import LoadPolicy

_FRAME = re.compile(r"^File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,]+),\s*(?P<code>.*)$", re.S)
_MODULE = re.compile(r"\bself\.(\w+)\(")  # self.mlp(...): the module a line calls
_NAMED_CALL = re.compile(r"=\s*(?:self\.)?(\w+)\(")  # hidden_states = decoder_layer(...)


@dataclass(frozen=True)
class Frame:
    """One frame of a call's Python stack, as stack.json writes it (``code``: the line's source)."""

    file: str
    line: int
    func: str
    code: str

    @property
    def where(self) -> tuple[str, str]:
        """The function it is in, as (file, function name): the same for every line of one call."""
        return self.file, self.func


Stacks = Mapping[str, tuple[Frame, ...]]


def read_stacks(path: Path, policy: LoadPolicy) -> dict[str, tuple[Frame, ...]]:
    """Each API call's frames, outermost first, from an msprobe ``stack.json`` (empty when it is
    missing, unreadable or not as msprobe writes it: the calls then stay ungrouped)."""
    try:
        stat = policy.check(path).stat()
        return _read(str(path), stat.st_size, stat.st_mtime_ns, policy)
    except (OSError, ValueError):
        return {}


@lru_cache(maxsize=4)
def _read(path: str, _size: int, _mtime: int, policy: LoadPolicy) -> dict[str, tuple[Frame, ...]]:
    """Read once per file version (size and time in the key): every token's screen asks again."""
    raw = json.loads(policy.read_text(Path(path)))
    stacks: dict[str, tuple[Frame, ...]] = {}
    for entry in raw.values() if isinstance(raw, dict) else ():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
            continue
        names, lines = entry
        frames = tuple(reversed([f for f in map(_frame, lines) if f is not None]))
        for name in names if isinstance(names, list) else ():
            stacks[str(name)] = frames
    return stacks


def _frame(text: object) -> Frame | None:
    match = _FRAME.match(str(text))
    if match is None:
        return None
    return Frame(match["file"], int(match["line"]), match["func"].strip(), match["code"].strip())


@dataclass(frozen=True)
class _Loop:
    """The layer loop: the frames down to its call site, and the depth of each layer's function."""

    site: tuple[Frame, ...]  # the frames above the layers' function, the call site last
    depth: int  # where the layer's own function sits in a stack
    name: str  # what the call site calls the layers (decoder_layer)
    outer: int  # the depth of the frame that names them (the function holding the loop)


def call_groups(order: Sequence[str], stacks: Stacks) -> dict[str, tuple[str, ...]]:
    """Each call's groups, outermost first (``("decoder_layer.1", "decoder_layer.1.mlp")``), for the
    calls of one forward pass in execution order; none where no layer loop shows in the stacks."""
    frames = [stacks.get(name) for name in order]
    loop = _find_loop(frames)
    if loop is None:
        return {}
    groups: dict[str, tuple[str, ...]] = {}
    layer, last_inside = -1, None
    for name, stack in zip(order, frames, strict=True):
        if not stack:
            continue
        if _in_loop(stack, loop):
            if last_inside is None or _restarts(last_inside, stack, loop.depth):
                layer += 1
            last_inside = stack
            prefix = f"{loop.name}.{layer}"
            module = _module(stack, loop.depth)
            groups[name] = (prefix, f"{prefix}.{module}") if module else (prefix,)
        else:
            module = _module(stack, loop.outer) if _under(stack, loop) else None
            groups[name] = (module,) if module else ()
    return _runs(order, groups)


def _find_loop(frames: Sequence[tuple[Frame, ...] | None]) -> _Loop | None:
    """The call site most often seen starting its function again, and what it calls the layers."""
    restarts: dict[tuple[Frame, ...], int] = {}
    for before, after in pairwise(frames):
        if not before or not after:
            continue
        common = _common(before, after)
        if common < 1 or common >= min(len(before), len(after)):
            continue
        a, b = before[common], after[common]
        if a.where == b.where and b.line < a.line:
            site = after[:common]
            restarts[site] = restarts.get(site, 0) + 1
    if not restarts:
        return None
    # the outermost: a loop inside the layers (a mixture of experts') restarts more often
    site = min(restarts, key=lambda s: (len(s), -restarts[s]))
    for outer in range(len(site) - 1, -1, -1):  # past the wrappers: the line that names the layers
        named = _NAMED_CALL.search(site[outer].code)
        if named:
            return _Loop(site, len(site), named.group(1), outer)
    return None


def _common(a: Sequence[Frame], b: Sequence[Frame]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _in_loop(stack: tuple[Frame, ...], loop: _Loop) -> bool:
    return len(stack) > loop.depth and stack[: loop.depth] == loop.site


def _restarts(before: tuple[Frame, ...], after: tuple[Frame, ...], depth: int) -> bool:
    """Whether ``after`` is in a new call of the layer function (back at an earlier line)."""
    return before[depth].where == after[depth].where and after[depth].line < before[depth].line


def _under(stack: tuple[Frame, ...], loop: _Loop) -> bool:
    """Made by the function holding the loop (the model's forward), outside the layers."""
    depth = loop.outer
    return (
        len(stack) > depth + 1
        and stack[:depth] == loop.site[:depth]
        and stack[depth].where == (loop.site[depth].where)
    )


def _module(stack: tuple[Frame, ...], depth: int) -> str | None:
    """The module the frame at ``depth`` calls (``self.mlp(...)``), where the call went deeper."""
    if len(stack) <= depth + 1:
        return None  # the API call is on that line itself (a residual add): no module between
    found = _MODULE.search(stack[depth].code)
    return found.group(1) if found else None


def _runs(order: Sequence[str], groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """A group holds calls in a row: one met again after others is another group, ``name#2``."""
    result: dict[str, tuple[str, ...]] = {}
    runs: dict[str, int] = {}
    before: tuple[str, ...] = ()
    before_named: tuple[str, ...] = ()
    for name in order:
        path = groups.get(name, ())
        named: list[str] = []
        going_on = True
        for level, group in enumerate(path):
            going_on = going_on and level < len(before) and before[level] == group
            if going_on:
                named.append(before_named[level])
                continue
            runs[group] = runs.get(group, 0) + 1
            named.append(group if runs[group] == 1 else f"{group}#{runs[group]}")
        result[name] = tuple(named)
        before, before_named = path, tuple(named)
    return result


def grouped_tree(index: DumpIndex, order: Sequence[str]) -> NodeTree | None:
    """A tree to read one forward pass by: its calls (``order``, in execution order) under the
    groups ``call_groups`` finds; None where there is nothing to group (the calls have modules
    already, or the stacks show no layer loop)."""
    tree = index.tree
    if not order or any(tree.nodes[name].parent != tree.root for name in order if name in tree.nodes):
        return None
    groups = call_groups(order, read_stacks(index.data_dir / "stack.json", index.load_policy))
    if not any(groups.values()):
        return None
    view = NodeTree(tree.root, {tree.root: Node(tree.root, tree.nodes[tree.root].type, None, 0)})
    for name in order:
        parent = tree.root
        for group in groups.get(name, ()):
            if group not in view.nodes:
                view.nodes[group] = Node(group, "", parent, view.nodes[parent].depth + 1)
                view.nodes[parent].children.append(group)
            parent = group
        node = tree.nodes[name]
        view.nodes[name] = Node(name, node.type, parent, view.nodes[parent].depth + 1)
        view.nodes[parent].children.append(name)
    return view
