"""msprobe's construct.json (call -> the module call it ran in): read, and checked against dump.json
before the call tree is built from it (docs/formats.md §3).

Where it disagrees with dump.json (records it does not place, a parent that is an API call, a call
recorded outside its parent's call, calls nested deeper than a run can nest them), the problem names
the file and the records concerned are shown at the top level, where their own names still say which
pass they belong to. Parents in a cycle make the whole file untrusted: the calls are shown flat.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

from tui_acc.dumps.fs import not_utf8
from tui_acc.dumps.model import Problem
from tui_acc.dumps.msprobe.passes import is_module
from tui_acc.dumps.policy import LoadPolicy

# Module calls nest as Python frames (several each: __call__, _call_impl, forward), under Python's
# default recursion limit of 1000: a deeper chain is no run's call tree
MAX_CALL_DEPTH = 1000


def read_construct(path: Path, policy: LoadPolicy) -> tuple[dict[str, str | None], list[Problem]]:
    """construct.json's call -> parent, checked (``check_construct``) by the caller against dump.json,
    and the problem that left it empty, if one did."""
    try:
        raw = policy.read_json(path)
    except FileNotFoundError:
        return {}, [Problem(str(path), "missing; calls are shown flat, without their modules")]
    except (OSError, ValueError) as exc:
        return {}, [Problem(str(path), f"unreadable call tree ({exc}); calls are shown flat")]
    if not isinstance(raw, dict):
        message = f"holds a JSON {_json_kind(raw)}, not an object of call -> parent; calls are shown flat"
        return {}, [Problem(str(path), message)]
    parents = {str(k): (str(v) if v else None) for k, v in raw.items()}
    # names with an unpaired surrogate (JSON escapes; none msprobe writes): no node may carry one
    odd = [k for k, v in parents.items() if not_utf8(k) or (v is not None and not_utf8(v))]
    if not odd:
        return parents, []
    for name in odd:
        if not_utf8(name):
            del parents[name]
        else:
            parents[name] = None
    said = (
        f"{len(odd)} entries name a call with an unpaired surrogate; those calls are shown at the top level"
    )
    return parents, [Problem(str(path), said)]


def _json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (a list is an array)."""
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def check_construct(path: Path, parents: dict[str, str | None], data: dict[str, Any]) -> list[Problem]:
    """construct.json must agree with dump.json: every record placed, parents that are modules, no
    cycles, each call recorded inside its parent's call, no deeper than a run nests calls. Where it
    does not, the record is shown at the top level (its parent in ``parents`` cut; ``parents`` is
    changed in place) and the problem returned names the file."""
    problems: list[Problem] = []
    if not parents:
        return problems  # L1 writes {}; a missing file is reported where it is read
    given = dict(parents)
    unplaced = [name for name in data if name not in parents]
    if unplaced:
        problems.append(
            Problem(
                str(path),
                f"{len(unplaced)} records of dump.json are not in it (e.g. {unplaced[0]}); "
                "they are shown at the top level",
            )
        )
    not_modules = [n for n, up in parents.items() if up is not None and not is_module(up)]
    if not_modules:  # said once: a file that chains every record to the one before has hundreds
        name = not_modules[0]
        more = f" (and {len(not_modules) - 1} more)" if len(not_modules) > 1 else ""
        message = f"{name}: its parent {parents[name]} is not a module call{more}; shown at the top level"
        problems.append(Problem(str(path), message))
        parents.update(dict.fromkeys(not_modules, None))
    # msprobe lists every module it saw as a key (data_collector.py update_construct: the module stack
    # before any filter): a parent that is neither a key nor a record is no call of the run
    unknown = [n for n, up in parents.items() if up is not None and up not in parents and up not in data]
    problems += _cut(path, parents, unknown, "name a parent it does not list")
    cycles = _cycles(parents)
    if cycles:
        # No edge of a cycle can be told right, nor any edge around it: a forged or corrupted file.
        # Cutting the cycle alone left modules emptied of the calls it moved (a decoder layer
        # without its MLP reads as the error's source) and calls nested under modules of another
        # pass (a pass's forward hung under a cycle member counted in that member's pass): the
        # calls are shown flat instead, as where the file is missing, and each side paired in
        # the order its calls completed.
        problems += [Problem(str(path), _cycle_message(cycle)) for cycle in cycles]
        parents.clear()
        return problems
    # a module's record is written when it returns, after every call inside it (dump.json's order):
    # a parent recorded before its call is another pass's module, or none the call ran in
    order = {name: i for i, name in enumerate(data)}
    early = [n for n, up in parents.items() if up in order and n in order and order[up] < order[n]]
    problems += _cut(path, parents, early, "name a parent that returned before them")
    cut = {name for name, up in parents.items() if up is None and given[name] is not None}
    outside, inside = _recorded_outside_parent(parents, order, cut)
    problems += _cut(path, parents, outside, "were recorded before the module call they name began")
    if inside:  # already where the file puts them: said, as the calls it most likely misplaced
        example = f"{inside[0]}, given " + (f"{given[inside[0]]}" if given[inside[0]] else "no parent")
        message = f"{len(inside)} calls were recorded inside a module call they do not name (e.g. {example})"
        problems.append(Problem(str(path), message))
    problems += _bounded_depth(path, parents, data)
    return problems


def _recorded_outside_parent(
    parents: dict[str, str | None], order: dict[str, int], cut: set[str]
) -> tuple[list[str], list[str]]:
    """Calls recorded outside the span of the module call they name, and calls recorded inside a
    sibling module's call they do not name. Records are written as calls return, so a module call
    spans the records after its previous sibling module's and up to its own: a call moved under a
    later pass's module (which returned after it, so passes the check before) lies before that span,
    and would be counted in the wrong pass. Only modules bound the spans: an API call given no
    parent in the middle of a pass (a forged null) would else put the calls before it outside.
    A module without a record is given its parent's span: where it began is not known; nor is where
    the calls ``cut`` to the top level by the checks before ran, so they bound no span."""
    children: dict[str | None, list[str]] = {}
    for name, up in parents.items():
        children.setdefault(up, []).append(name)
    outside: list[str] = []
    inside: list[str] = []
    spans: list[tuple[str | None, int, int]] = [(None, -1, len(order))]  # module, (after, before)
    while spans:
        module, after, before = spans.pop()
        kids = children.get(module, [])
        recorded = sorted((order[k], k) for k in kids if k in order)
        began = after  # each recorded call began after its previous recorded sibling module returned
        opened: list[tuple[int, int]] = []  # each sibling module's (first recorded call in it, its own)
        for position, kid in recorded:
            if not after < position < before:
                outside.append(kid)
                continue
            below = [order[k] for k in children.get(kid, []) if k in order]
            if kid in children:
                spans.append((kid, began, position))
            if kid not in cut and is_module(kid):
                began = position
                if below:
                    opened.append((min(below), position))
        bounds = sorted(opened)
        for position, kid in recorded:
            if not is_module(kid) and kid not in cut and after < position < before:
                at = bisect.bisect_left(bounds, (position, position))
                if at and bounds[at - 1][0] < position < bounds[at - 1][1]:
                    inside.append(kid)
        spans += [(kid, after, before) for kid in kids if kid not in order and kid in children]
    return outside, inside


def _cut(path: Path, parents: dict[str, str | None], calls: list[str], what: str) -> list[Problem]:
    """``calls``' parents cut (shown at the top level), said once with a count and an example."""
    if not calls:
        return []
    example = f"{calls[0]}: {parents[calls[0]]}"
    parents.update(dict.fromkeys(calls, None))
    return [Problem(str(path), f"{len(calls)} calls {what} (e.g. {example}); shown at the top level")]


def _bounded_depth(path: Path, parents: dict[str, str | None], data: dict[str, Any]) -> list[Problem]:
    """A chain of calls deeper than a run can nest them (``MAX_CALL_DEPTH``): the modules it lists
    without records are left out (a forged chain of 200,000 of them made every later step pay for
    each), and where the records alone still nest that deep, they are shown flat."""
    deepest = _deepest(parents)
    if deepest <= MAX_CALL_DEPTH:
        return []
    for name in list(parents):
        if name not in data:
            del parents[name]
        elif parents[name] not in data:
            parents[name] = None
    said = f"nests calls {deepest:,} deep, deeper than a run nests them ({MAX_CALL_DEPTH:,}: Python frames)"
    if _deepest(parents) > MAX_CALL_DEPTH:
        parents.update(dict.fromkeys(parents, None))
        return [Problem(str(path), f"{said}; calls are shown flat")]
    return [Problem(str(path), f"{said}; the modules it lists without records are left out")]


def _deepest(parents: dict[str, str | None]) -> int:
    """The longest chain of parents (no cycles: ``check_construct`` cut them), each call's depth
    found once."""
    depth: dict[str, int] = {}
    for name in parents:
        chain: list[str] = []
        current: str | None = name
        while current is not None and current not in depth and len(chain) <= len(parents):
            chain.append(current)
            current = parents.get(current)
        below = depth.get(current, 0) if current is not None else 0
        for link in reversed(chain):
            below += 1
            depth[link] = below
    return max(depth.values(), default=0)


def _cycles(parents: dict[str, str | None]) -> list[list[str]]:
    """Each cycle of ``parents``, once, as its members and the first again; each record's chain is
    walked once: linear even for a malformed tree."""
    cycles = []
    done: set[str] = set()
    for name in parents:
        chain: dict[str, None] = {}  # the current walk, in order (a dict: ordered, and O(1) lookups)
        current: str | None = name
        while current is not None and current not in done:
            if current in chain:
                cycles.append([*list(chain)[list(chain).index(current) :], current])
                break
            chain[current] = None
            current = parents.get(current)
        done.update(chain)
    return cycles


def _cycle_message(cycle: list[str]) -> str:
    shown = cycle if len(cycle) <= 8 else [*cycle[:4], f"... {len(cycle) - 8} more ...", *cycle[-4:]]
    if len(cycle) == 2:
        return f"{cycle[0]} is its own parent; the file is not trusted: calls are shown flat"
    return f"parents form a cycle ({' -> '.join(shown)}); the file is not trusted: calls are shown flat"
