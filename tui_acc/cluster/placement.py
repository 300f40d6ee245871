"""Which node reads which rank: the rank folders every node listed, merged into the run's ranks.

Ranks are numbered as a local run numbers them (``rank_sort_key``: msprobe's ``rank{N}`` are global
ranks). A folder found on several nodes (a shared file system) is read on one of them: runs of
consecutive ranks stay on one node where they can (a group's running sum then makes fewer hops), the
work shared out evenly. msprobe's numbering also tells a rank that no node holds (``rank2`` missing
between ``rank1`` and ``rank3``): it keeps its number and is named as not compared. (msit ATB's
``{device}_{pid}`` numbers devices per host, so nothing is inferred from gaps there; nor from a rank
above the highest one found, which no name tells.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tui_acc.dumps.model import rank_sort_key

_NUMBERED = re.compile(r"^(\D*)(\d+)$")  # rank3, or a bare number


@dataclass
class Layout:
    """Every rank of the run: its folder name, the place that reads it, or why none does."""

    names: list[str]
    reader: dict[int, int]  # rank -> index of the place (node and path) that reads it
    absent: dict[int, str]  # rank -> why no place reads it
    notes: list[str] = field(default_factory=list)

    def ranks_of(self, place: int) -> list[int]:
        """The ranks ``place`` reads, in rank order."""
        return [rank for rank, where in sorted(self.reader.items()) if where == place]


def lay_out(listings: list[list[str]], labels: list[str]) -> Layout:
    """The run's ranks from what each place lists (``listings[i]``: the folders at place ``labels[i]``)."""
    holders: dict[str, list[int]] = {}
    for place, names in enumerate(listings):
        for name in names:
            holders.setdefault(name, []).append(place)
    names = sorted(holders, key=rank_sort_key)
    absent: dict[int, str] = {}
    for missing in _gaps(names):
        names.append(missing)
    names.sort(key=rank_sort_key)
    held = [label for label, listed in zip(labels, listings, strict=True) if listed]
    for rank, name in enumerate(names):
        if name not in holders:
            absent[rank] = (
                f"rank {rank} ({name}) not compared: no node holds this rank folder "
                f"(found: {', '.join(held) or 'none'})"
            )
    reader = _assign(names, holders, len(listings))
    notes = []
    shared = [name for name in names if len(holders.get(name, ())) > 1]
    if shared:
        notes.append(
            f"{len(shared)} rank folders are on several nodes (a shared file system): each is read on one"
        )
    return Layout(names, reader, absent, notes)


def _gaps(names: list[str]) -> list[str]:
    """The rank folders missing from an msprobe-style numbering (``rank0`` .. ``rank{max}``)."""
    matches = [_NUMBERED.match(name) for name in names]
    if not names or any(m is None for m in matches):
        return []
    prefixes = {m.group(1) for m in matches if m is not None}
    numbers = {int(m.group(2)) for m in matches if m is not None}
    if len(prefixes) != 1 or len(numbers) != len(names):
        return []
    prefix = prefixes.pop()
    return [f"{prefix}{n}" for n in range(max(numbers) + 1) if n not in numbers]


def _assign(names: list[str], holders: dict[str, list[int]], places: int) -> dict[int, int]:
    """Each held rank's reader: its only holder, else the previous rank's reader while that one holds
    it and has less than its share, else the holder with the fewest ranks so far."""
    counted = sum(1 for name in names if name in holders)
    share = math.ceil(
        counted / max(1, sum(1 for p in range(places) if any(p in h for h in holders.values())))
    )
    load = [0] * places
    reader: dict[int, int] = {}
    previous: int | None = None
    for rank, name in enumerate(names):
        candidates = holders.get(name)
        if not candidates:
            previous = None
            continue
        if previous in candidates and load[previous] < share:
            chosen = previous
        else:
            chosen = min(candidates, key=lambda p: (load[p], p))
        reader[rank] = chosen
        load[chosen] += 1
        previous = chosen
    return reader
