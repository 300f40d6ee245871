"""Tokens of a TorchAir dump: each run of a compiled graph, numbered in the order the runs happened.

TorchAir compiles one graph per shape (a prefill graph, a decode graph) and counts each graph's runs
on its own: the FX dump's ``graph_N/{step}``, the GE dump's ``{model}/{model_id}/{data_index}``.
A token here is one forward pass: the runs of every graph, ordered by the earliest time stamp in
their files' names (both dumps name each file with the time it was written), so that the prefill
run is token 0 and the decode graph's step s is token s + 1 in a prefill-then-decode run. Where no
file names a time, runs are ordered by graph, then step. ``DumpIndex.runs`` keeps each token's
graph and step: pairing matches the two sides' graphs by content and their runs by step, and a
re-dump names the step (``dump_step``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Run:
    """One run of one graph: its label, its step (that graph's own count), its folder, the earliest
    time its files name (None: none does), its files' names, the names files stored under a hash
    stand for (the GE dump's mapping.csv: name on disk -> original name), and what each name says."""

    graph: str
    step: int
    folder: str
    first: int | None
    names: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    # the GE dump: each name read once, (op type, op name, time) or None, in ``names``' order
    parsed: tuple[tuple[str, str, int] | None, ...] = ()

    def original(self, name: str) -> str:
        """The name a file on disk stands for."""
        return self.aliases.get(name, name)


def numbered(runs: Iterable[Run]) -> dict[int, Run]:
    """Token -> run: in time order where every run names a time, else by graph and step."""
    found = list(runs)
    if found and all(run.first is not None for run in found):
        found.sort(key=lambda run: (run.first or 0, run.graph, run.step))
    else:
        found.sort(key=lambda run: (_graph_key(run.graph), run.step))
    return dict(enumerate(found))


def described(run: Run) -> str:
    """How a note names a run: ``graph_2 step 1``."""
    return f"{run.graph} step {run.step}"


def _graph_key(label: str) -> tuple[int, str]:
    digits = "".join(ch if "0" <= ch <= "9" else " " for ch in label).split()
    return (int(digits[0][:18]) if digits else 0, label)
