"""msprobe compare's layer mapping (``-lm``): which golden record each test record stands for.

The same rules as msprobe 26.2 (``msprobe/core/compare/layer_mapping/``): every record of a dump
gets a *scope*. A module call ``Module.model.layers.0.self_attn.o_proj.Linear.forward.3`` sits at
``model.layers.0.self_attn.o_proj``; an API call sits below its parent module (construct.json)
under the API's name: ``Functional.linear.5.forward`` inside ``o_proj`` at ``...o_proj.linear``,
outside every module at ``linear``. Scopes form a tree whose nodes carry the class of the module
recorded there (``Linear``), the API name, or their own name when nothing is recorded there
(``layers``, a ModuleList). A test record's scope is rewritten level by level with the rules of
the class of the test node it passes (``{Class: {test child: golden child}}``; a key may span
levels, ``a.b: c``, a value may name several, ``c: x.y``; ``Cell`` stands for the top, as
``TopLayer`` does), and its partner is the golden record at the rewritten scope in the same
position among that node's records. Where there is none, msprobe writes ``N/A``: here ``None``.

Positions are counted over the records of the index in execution order (msprobe counts
dump.json's, in completion order): the same calls on both sides give the same positions either way.
msprobe also adds the torch function an API was called from to its scope, read from
``stack.json`` by record name; 26.2 writes ``stack.json`` keyed by ids, so that lookup finds
nothing there, and it is left out here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tui_acc.dumps.model import DumpIndex

TOP = "TopLayer"
_LAYER_TYPES = ("Module", "Cell")
_DIRECTIONS = ("forward", "backward")

# class -> first level of a key -> [(whole key, golden name, levels the key spans)], longest first
LayerRules = dict[str, dict[str, list[tuple[str, str, int]]]]


def compile_rules(raw: dict[str, dict[str, str]]) -> LayerRules:
    """msprobe's ``preprocess_layer_mapping``: ``Cell`` means the top; ``name(Type)`` is ``name``."""
    raw = dict(raw)
    if "Cell" in raw:
        raw[TOP] = raw.pop("Cell")
    rules: LayerRules = {}
    for class_name, children in raw.items():
        by_prefix: dict[str, list[tuple[str, str, int]]] = {}
        for key, value in children.items():
            levels = key.split(".")
            by_prefix.setdefault(levels[0], []).append((key, value.split("(")[0], len(levels)))
        for candidates in by_prefix.values():
            candidates.sort(key=lambda c: -c[2])
        rules[class_name] = by_prefix
    return rules


@dataclass
class _Item:
    name: str
    type_name: str
    state: str
    scope: str
    position: int = 0  # among the records at its scope


@dataclass
class _Node:
    type_name: str
    items: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, _Node] = field(default_factory=dict)


def records_of(index: DumpIndex) -> list[tuple[str, str | None]]:
    """Every msprobe record in execution order, with the nearest module record above it."""
    tree = index.tree
    out = []
    for node in tree.preorder():
        if node.name == tree.root or _parse(node.name) is None:
            continue
        parent = node.parent
        while parent is not None and parent != tree.root and not is_module_record(parent):
            parent = tree.nodes[parent].parent
        out.append((node.name, parent if parent is not None and parent != tree.root else None))
    return out


def map_records(
    golden: Iterable[tuple[str, str | None]], test: Iterable[tuple[str, str | None]], rules: LayerRules
) -> dict[str, str | None]:
    """Test record -> its golden partner (None: none); records msprobe cannot place are left out."""
    golden_root, _ = _trie(golden)
    test_root, test_items = _trie(test)
    return _partners(test_items, test_root, golden_root, rules)


def is_module_record(name: str) -> bool:
    """``Module.model.layers.0.LlamaDecoderLayer.forward.0``: a call msprobe places at a layer."""
    return name.split(".", 1)[0] in _LAYER_TYPES and _parse(name) is not None


def _parse(name: str) -> tuple[str, str, str, bool] | None:
    """(type name, scope name, state, is a module) as msprobe's ``DumpDataItem.set_name`` reads them."""
    parts = name.split(".")
    if len(parts) < 4 or "parameters_grad" in parts[-2:]:
        return None  # msprobe refuses fewer than four fields; gradients belong to training
    if parts[0] in _LAYER_TYPES:
        if len(parts) < 5 or parts[-2] not in _DIRECTIONS:
            return None  # a module call names at least the module, its class, direction and call
        return parts[-3], parts[-4], parts[-2], True
    if parts[-1] not in _DIRECTIONS:
        return None
    return parts[-3], parts[-3], parts[-1], False


def _trie(records: Iterable[tuple[str, str | None]]) -> tuple[_Node, list[_Item]]:
    items: list[_Item] = []
    by_name: dict[str, _Item] = {}
    for name, parent in records:
        parsed = _parse(name)
        if parsed is None:
            continue
        type_name, scope_name, state, is_module = parsed
        if is_module:
            layer = ".".join(name.split(".")[:-4])
        elif parent:
            layer = ".".join(parent.split(".")[:-3])
        else:
            layer = TOP
        item = _Item(name, type_name, state, f"{layer}.{scope_name}")
        items.append(item)
        by_name[name] = item
    for item in items:  # msprobe's backward_pass: a backward call sits where its forward does
        parts = item.name.split(".") if item.state == "backward" else []
        if "backward" in parts[-2:]:
            twin = by_name.get(
                ".".join([*parts[:-2], *(p.replace("backward", "forward") for p in parts[-2:])])
            )
            if twin is not None:
                item.scope = twin.scope
    _renumber(items, "ParallelTransformer", "layers")
    root = _Node(TOP)
    at_scope: dict[str, _Node] = {}  # many calls share a scope: walk to it once
    for item in items:
        node = at_scope.get(item.scope, root)
        if node is root:
            for level in item.scope.split(".")[1:]:
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _Node(level)
                node = child
            at_scope[item.scope] = node
        calls = node.items.setdefault(item.state, [])
        item.position = len(calls)
        calls.append(item.name)
        node.type_name = item.type_name
    return root, items


def _renumber(items: list[_Item], type_name: str, suffix: str) -> None:
    """msprobe's ``renumber_index_pass``: pipeline stages number their layers from their first.

    Megatron's ``ParallelTransformer`` on one stage holds layers 8..15 where the other side's holds
    0..7; both are renumbered from 0.
    """
    prefixes = dict.fromkeys(f"{item.scope}.{suffix}" for item in items if item.type_name == type_name)
    patterns = {prefix: re.compile(rf"^{re.escape(prefix)}\.(\S+?)(?:\.|$)") for prefix in prefixes}
    firsts = {
        p: min((_next_number(item.scope, patterns[p]) for item in items), default=math.inf) for p in prefixes
    }
    for prefix, first in firsts.items():  # every first is found before any scope changes, as msprobe does
        pattern = patterns[prefix]
        for item in items:
            found = pattern.search(item.scope)
            relative = _next_number(item.scope, pattern) - first
            if found and math.isfinite(relative):
                item.scope = re.sub(
                    rf"^{re.escape(prefix)}\.{re.escape(found.group(1))}",
                    f"{prefix}.{int(relative)}",
                    item.scope,
                    count=1,
                )


def _next_number(scope: str, pattern: re.Pattern[str]) -> float:
    found = pattern.search(scope)
    numbers = re.findall(r"\d+", found.group(1)) if found else []
    return int(numbers[-1]) if numbers else math.inf


def _golden_scope(scope: str, test_root: _Node, golden_root: _Node, rules: LayerRules) -> _Node | None:
    """msprobe's ``convert_scope``: the golden node a test scope is renamed to (None: none there)."""
    levels = scope.split(".")
    new_scope = []
    node = test_root
    at = 0
    while at < len(levels) - 1:
        child = target = levels[at + 1]
        step = 1
        for key, golden, span in rules.get(node.type_name, {}).get(child, ()):
            if ".".join(levels[at + 1 : at + span + 1]) == key:
                target, step = golden, span
                break
        new_scope.append(target)
        for _ in range(step):
            node = node.children[levels[at + 1]]
            at += 1
    found: _Node | None = golden_root
    for level in ".".join(new_scope).split(".") if new_scope else ():
        found = found.children.get(level) if found is not None else None
    return found


def _partners(
    items: list[_Item], test_root: _Node, golden_root: _Node, rules: LayerRules
) -> dict[str, str | None]:
    """Then ``LayerTrie.query_data``: the golden record in the same position at that node."""
    scopes: dict[str, _Node | None] = {}  # many calls share a scope: rename each scope once
    partners: dict[str, str | None] = {}
    for item in items:
        if item.scope not in scopes:
            scopes[item.scope] = _golden_scope(item.scope, test_root, golden_root, rules)
        found = scopes[item.scope]
        calls = found.items.get(item.state, []) if found is not None else []
        partners[item.name] = calls[item.position] if item.position < len(calls) else None
    return partners
