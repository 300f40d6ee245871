"""What a Ray run tells about itself: each node's state (its ranks, how far it got, why it stopped) and
the bytes that crossed between nodes, for ``--json``, stderr and the ranks screen's node line.

Bytes are counted where they leave one node for another: a group's running inputs passed on to the
node that adds the next ranks (``partial_sums``), the finished reduction sent to each other node that
judges ranks of the group (``goldens``), inputs sent as they were read where there is nothing to sum
(all-gather, all-to-all: ``inputs``), each counted once for every node it is sent to; and what came
back to the head from the other nodes (listings, summaries, rows: ``results``, as pickled). The
tensors each node read from its own disk (``read``) never leave it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("partial_sums", "goldens", "inputs", "results")


@dataclass
class PlaceState:
    """How one node's worker is doing."""

    label: str
    node_id: str
    path: str
    ranks: list[str] = field(default_factory=list)
    state: str = "listing"  # listing, empty (holds no rank folder), working, done, lost
    reason: str | None = None  # why it is empty or lost
    collectives: int = 0  # collectives it read
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    def line(self) -> str:
        """The line stderr gets when it finishes (or is lost, or holds nothing)."""
        held = ", ".join(self.ranks) or "no ranks"
        seconds = f"{(self.ended or time.monotonic()) - self.started:.1f} s"
        if self.state == "lost":
            return f"node {self.label}: lost after {self.collectives} collectives ({held}): {self.reason}"
        if self.state == "empty":
            return f"node {self.label}: no rank folder here ({self.reason})"
        return f"node {self.label}: {self.state}: {held}, {self.collectives} collectives read, {seconds}"

    def brief(self) -> str:
        """As a view's line of nodes gives it: its label, ranks and state (and why, where said)."""
        held = f"{self.ranks[0]}..{self.ranks[-1]}" if len(self.ranks) > 2 else ",".join(self.ranks)
        return f"{self.label} {held} {self.state}" + (f" ({self.reason})" if self.reason else "")

    def said(self) -> dict[str, Any]:
        """As ``--json``'s ``ray.nodes`` gives it."""
        return {
            "node": self.label,
            "node_id": self.node_id,
            "path": self.path,
            "ranks": list(self.ranks),
            "state": self.state,
            "reason": self.reason,
            "collectives": self.collectives,
        }


@dataclass
class Traffic:
    """Bytes that crossed between nodes, by what they were, and the bytes the nodes read locally."""

    partial_sums: int = 0
    goldens: int = 0
    inputs: int = 0
    results: int = 0
    read: int = 0
    # a pair's rows are computed on the engine's worker threads, each counting what its calls moved
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, category: str, nbytes: int) -> None:
        """Count ``nbytes`` more of ``category`` (one of CATEGORIES), from any thread."""
        with self._lock:
            setattr(self, category, getattr(self, category) + nbytes)

    @property
    def crossed(self) -> int:
        """Every byte that crossed between nodes."""
        return sum(getattr(self, c) for c in CATEGORIES)

    def said(self) -> dict[str, int]:
        """As ``--json``'s ``ray.bytes`` gives it."""
        return {
            "crossed": self.crossed,
            **{c: getattr(self, c) for c in CATEGORIES},
            "read_on_nodes": self.read,
        }

    def line(self) -> str:
        """The summary line stderr gets at the end."""
        parts = ", ".join(f"{c.replace('_', ' ')} {_size(getattr(self, c))}" for c in CATEGORIES)
        crossed = _size(self.crossed)
        read = f"; the nodes read {_size(self.read)} from their own disks" if self.read else ""
        return f"ray: {crossed} crossed between nodes ({parts}){read}"


def _size(nbytes: int) -> str:
    """Bytes as a person reads them: 980 B, 12.3 kB, 4.5 MB."""
    value = float(nbytes)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{nbytes} B"
