"""A comparison session: two indexed dumps, their pairing, and the metrics engine over them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui_acc.dumps import DumpIndex, open_dump
from tui_acc.metrics import MetricsEngine, Thresholds
from tui_acc.pairing import Pairing, pair_dumps


@dataclass
class Comparison:
    """What every front end works from."""

    golden: DumpIndex
    test: DumpIndex
    pairing: Pairing
    engine: MetricsEngine


def open_comparison(
    golden: str | Path,
    test: str | Path,
    logits_node: str | None = None,
    thresholds: Thresholds | None = None,
) -> Comparison:
    """Index both dumps and pair them; no tensor is loaded yet. Raises DumpError on bad roots."""
    golden_index = open_dump(golden)
    test_index = open_dump(test)
    if logits_node is not None and logits_node not in golden_index.tree.nodes:
        from tui_acc.dumps import DumpError

        raise DumpError(
            f"{golden_index.data_dir}: --logits-node {logits_node!r} is not a module of this dump"
        )
    pairing = pair_dumps(golden_index, test_index, logits_node)
    return Comparison(golden_index, test_index, pairing, MetricsEngine(pairing, thresholds))
