"""Order, call tree, stable names and logits of an msprobe graph-mode (ACLGraph) step.

A step is one replay of the captured graph: one forward pass, so one token. What the data says
about order differs by task:

* **statistics**: ``dump.json`` lists each call when its first tensor was seen (msprobe
  ``aclgraph_dump.cpp:491-502``), so records come in call *start* order; when a call ended is not
  recorded.
* **tensor**: file names hold no order across APIs (one counter per API); the files' times do,
  since msprobe writes them one by one as the replay reaches them (``aclgraph_dump.cpp:595-610``).
  Times are used when they agree with every API's own counter; otherwise (a copy that lost them)
  by data flow (``order_by_data_flow``) where the files show it, by name where nothing does.

Modules nest by their dotted paths (``Module.model.layers.0.mlp.LlamaMLP`` holds
``Module.model.layers.0.mlp.down_proj.Linear``). API calls run only inside the root module's
forward (msprobe ``aclgraph_dumper.py:639-645``), so they sit under the root's record when it was
recorded; where file times give each call's span, under the innermost module around them.

See docs/formats.md §3.7.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from tui_acc.dumps.data_flow_order import placed_count, producer_edges, stable_topological
from tui_acc.dumps.model import Node, NodeTree, TensorRef, logical_name
from tui_acc.dumps.policy import LoadPolicy

ROOT = "model"
ROOT_SCOPE = "__root__"  # msprobe's name for the model passed to start() (aclgraph_dumper.py:352-353)
_MODULE = re.compile(r"^Module\.(?P<path>.+)\.(?P<cls>[^.]+)\.forward\.(?P<call>\d+)$")


@dataclass
class Record:
    """One call of one step, as the reader found it."""

    name: str  # msprobe's record name: ``Aten.mm.43.forward``, ``Module.model.norm.LlamaRMSNorm.forward.3``
    scope: str  # what it calls: ``Aten.mm``, ``Module.model.norm.LlamaRMSNorm``
    refs: list[TensorRef]
    first: float  # where the call starts among the step's records
    last: float | None = None  # where it ends, when known (the tensor task's file times)
    out_dims: set[int] = field(default_factory=set)  # last dimension of each output (statistics)
    table_rows: int | None = None  # an embedding's table rows (statistics), the vocabulary

    @property
    def path(self) -> str | None:
        """The module's dotted path (``model.layers.0.mlp``); None for an API call."""
        match = _MODULE.match(self.name)
        return match.group("path") if match else None


def natural_key(name: str) -> tuple[object, ...]:
    """``layers.2`` before ``layers.10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def place(records: list[Record], tree: NodeTree) -> None:
    """Add one step's records to ``tree`` under their parents, children in start order."""
    records = sorted(records, key=lambda r: r.first)
    spans = all(r.last is not None for r in records)
    parents = _by_span(records) if spans else _by_path(records)
    for record in records:
        if record.name in tree.nodes:  # the statistics task's names recur at every step
            continue
        parent = parents.get(record.name) or ROOT
        if parent not in tree.nodes:
            parent = ROOT
        depth = tree.nodes[parent].depth + 1
        tree.nodes[record.name] = Node(record.name, _type_of(record), parent, depth)
        tree.nodes[parent].children.append(record.name)


def _type_of(record: Record) -> str:
    match = _MODULE.match(record.name)
    return match.group("cls") if match else record.scope.rsplit(".", 1)[-1]


def _by_span(records: list[Record]) -> dict[str, str | None]:
    """Each call's parent is the innermost module call whose span holds it."""
    parents: dict[str, str | None] = {}
    open_modules: list[Record] = []
    for record in records:
        while open_modules and (open_modules[-1].last or 0) < record.first:
            open_modules.pop()
        parents[record.name] = open_modules[-1].name if open_modules else None
        if record.path is not None:
            open_modules.append(record)
    return parents


def _by_path(records: list[Record]) -> dict[str, str | None]:
    """Modules under the nearest module whose path is a prefix of theirs; API calls under the root's call."""
    by_path: dict[str, list[Record]] = {}
    for record in records:
        if record.path is not None:
            by_path.setdefault(record.path, []).append(record)
    root_calls = by_path.get(ROOT_SCOPE, [])
    parents: dict[str, str | None] = {}
    for record in records:
        path = record.path
        if path == ROOT_SCOPE:
            parents[record.name] = None
            continue
        candidates: list[Record] = []
        while path is not None and "." in path and not candidates:
            path = path.rsplit(".", 1)[0]
            candidates = by_path.get(path, [])
        candidates = candidates or root_calls
        started = [c for c in candidates if c.first < record.first]
        chosen = started[-1] if started else (candidates[0] if candidates else None)
        parents[record.name] = chosen.name if chosen is not None else None
    return parents


def stable_names(records: Iterable[Record]) -> dict[str, str]:
    """The same name at every step: each call numbered by its order among the step's calls of the
    same API or module (msprobe's counters run on across the tensor task's steps)."""
    stable: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for record in sorted(records, key=lambda r: r.first):
        ordinal = seen[record.scope]
        seen[record.scope] += 1
        if record.path is not None:
            base = logical_name(record.name)
            stable[record.name] = base if ordinal == 0 else f"{base}#{ordinal}"
        else:
            stable[record.name] = f"{record.scope}#{ordinal}"
    return stable


def logits_record(records: list[Record]) -> str | None:
    """The step's logits: the first call (outermost, in start order) whose output is as wide as the
    embedding table; without shapes, a module named ``lm_head``. The root's call is never it (its
    output holds the cache too)."""
    ordered = sorted(records, key=lambda r: r.first)
    vocab = next((r.table_rows for r in ordered if r.table_rows is not None), None)
    if vocab is not None:
        for record in ordered:
            if record.path != ROOT_SCOPE and vocab in record.out_dims:
                return record.name
    return next((r.name for r in ordered if (r.path or "").rsplit(".", 1)[-1] == "lm_head"), None)


def order_by_data_flow(records: list[Record], policy: LoadPolicy) -> tuple[dict[str, int], int, int] | None:
    """Where the file times are lost: the step's calls in an order the data flow between their
    files allows (``data_flow_order``), each record's ``first`` set to its place.

    Besides the data flow, an API's own calls ran in counter order (msprobe numbers them as they
    run). Where neither tells, an API's k-th call of n is put about k/n of the way through the step
    (a transformer calls each API a few times per layer, so this interleaves the APIs layer by
    layer, which name order cannot), and a module right after the call that made its input. A
    value a module returns was made by the API call inside it that returned it; without times which
    call is inside which module is unknown, so a value held by several calls' outputs orders nothing.

    Returns each call's stable name's place (to order the other steps alike without opening their
    files), how many calls the data flow and the counters place, and how many there are; None when
    no file shows what made another's input (the name order stays).
    """
    by_name = {r.name: r for r in records}
    pairs = producer_edges(
        NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "model", None, 0)}),
        {r.name: r.refs for r in records},
        policy,
        maker=lambda makers: _innermost_call(makers, by_name),
    )
    if not pairs:
        return None
    guess: dict[str, float] = {}
    calls: dict[str, list[Record]] = {}
    for record in sorted(records, key=lambda r: int(_call_number(r.name))):
        calls.setdefault(record.scope, []).append(record)
    for same_scope in calls.values():
        pairs.update(pairwise(r.name for r in same_scope))
        for ordinal, record in enumerate(same_scope):
            guess[record.name] = (ordinal + 0.5) / len(same_scope)
    modules = sorted((r for r in records if r.path is not None), key=lambda r: natural_key(r.name))
    for place_, module in enumerate(modules):
        guess[module.name] = (place_ + 0.5) / len(modules)
    for first, then in pairs:
        if by_name[then].path is not None and by_name[first].scope != by_name[then].scope:
            guess[then] = guess[first] + 1e-9
    order = stable_topological(sorted(by_name, key=lambda name: (guess[name], name)), pairs)
    for position, name in enumerate(order):
        by_name[name].first = float(position)
    stable = stable_names(records)
    return {stable[name]: i for i, name in enumerate(order)}, placed_count(order, order, pairs), len(order)


def order_like(records: list[Record], learned: dict[str, int]) -> None:
    """Another step's calls in the order ``order_by_data_flow`` found for the first step: by their
    stable names (the same operator's at every step); calls it did not see after them, by name."""
    stable = stable_names(records)
    ranked = sorted(records, key=lambda r: (learned.get(stable[r.name], len(learned)), r.first))
    for position, record in enumerate(ranked):
        record.first = float(position)


def _innermost_call(makers: set[str], records: dict[str, Record]) -> str | None:
    """The one API call among ``makers`` (a module returning a value returns an inner call's); a
    module when no call holds it, the deepest of modules nested by their paths; else None."""
    api_calls = [name for name in makers if records[name].path is None]
    if api_calls:
        return api_calls[0] if len(api_calls) == 1 else None
    nested = sorted(makers, key=lambda name: len(records[name].path or ""))
    for outer, inner in pairwise(nested):
        if not (records[inner].path or "").startswith(f"{records[outer].path}."):
            return None
    return nested[-1] if nested else None


def _call_number(name: str) -> str:
    parts = name.split(".")
    return parts[-1] if parts[-1].isdigit() else parts[-2]
