"""Where each rank's own calls go in a gathered expert-parallel test: the golden ran one loop over
every expert in the order of their ids, each rank a loop over its own (dumps/rank_alignment.py).

Expert ids are read from module paths (``model.layers.1.mlp.experts.3``), and, for an iteration that
ran no expert module (no token routed to it), from its first call's first integer argument
(``chosen == 3``) where that names the module in every iteration that did run one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import pairwise

from tui_acc.dumps.model import logical_name
from tui_acc.dumps.msprobe.passes import api_of, is_module

_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def call_kind(name: str) -> str:
    """What a record is, without its counter: ``Functional.linear``, a module's path."""
    return api_of(name) or logical_name(name)


def experts_of(runs: Iterable[tuple[int, list[str]]]) -> dict[int, set[int]]:
    """The expert ids each rank ran modules of, anywhere (ownership does not change from token to
    token: a rank that ran no expert in one layer still owns its experts)."""
    found: dict[int, set[int]] = {}
    for rank, calls in runs:
        for name in calls:
            match = _EXPERT.search(name)
            if match is not None and is_module(name):
                found.setdefault(rank, set()).add(int(match.group(1)))
    return found


def interleaved(experts: dict[int, set[int]]) -> str | None:
    """Why the ranks' expert loops cannot be placed whole, one after another, in the golden's order of
    expert ids (round-robin ownership: rank 0 experts 0 and 3, rank 1 experts 1 and 4), or None."""
    spans = sorted((min(ids), max(ids), rank) for rank, ids in experts.items() if ids)
    for (_, last, rank), (first, _, other) in pairwise(spans):
        if first < last:
            return (
                f"rank {rank} ran experts {sorted(experts[rank])[:6]} and rank {other} "
                f"{sorted(experts[other])[:6]}: their experts interleave (round-robin placement), so no "
                "rank's loop can be placed whole in the golden's order of expert ids"
            )
    return None


def placed_whole(runs: list[tuple[int, list[str]]], lowest: dict[int, int]) -> list[tuple[int, str]]:
    """Each rank's own calls of one gap, run by run, in the order of the ranks' lowest expert ids
    (then by rank): rank 1 owning experts 0-3 comes before rank 0 owning 4-7."""
    ordered = sorted(runs, key=lambda item: (lowest.get(item[0], float("inf")), item[0]))
    return [(rank, name) for rank, run in ordered for name in run]


def iterations(
    runs: list[tuple[int, list[str]]], first_int: Callable[[int, str], int | None]
) -> list[tuple[int, str]] | None:
    """Every rank's own calls of one gap cut into its loop's iterations (each starts with the call
    its first one is: ``chosen == e``) and ordered by expert id, as the golden's one loop ran them:
    round-robin placement (rank 0 experts 0 and 3) interleaves them. An iteration's id is its expert
    module's, else its first call's first integer argument, trusted only where it names the module
    in every iteration that ran one (``first_int(rank, call)``). None where some iteration has no id."""
    found: list[tuple[int | None, int, list[str]]] = []
    for rank, run in runs:
        if not run:
            continue
        starts = [i for i, name in enumerate(run) if call_kind(name) == call_kind(run[0])] + [len(run)]
        for begin, end in pairwise(starts):
            calls = run[begin:end]
            modules = [int(m.group(1)) for n in calls if is_module(n) and (m := _EXPERT.search(n))]
            argument = first_int(rank, calls[0])
            if modules and argument is not None and argument != min(modules):
                return None  # the first argument is not the expert's id
            found.append((min(modules) if modules else argument, rank, calls))
    if any(number is None for number, _, _ in found):
        return None
    found.sort(key=lambda item: (item[0] or 0, item[1]))
    return [(rank, name) for _, rank, calls in found for name in calls]
