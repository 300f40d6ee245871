"""A single dump opened for its own check: the dump paired with itself, judged by ``rules.py``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tui_acc.anomalies.rules import AnomalySettings
from tui_acc.dumps import open_dump
from tui_acc.pairing import pair_dumps
from tui_acc.session import Comparison
from tui_acc.tolerances.thresholds import Thresholds

if TYPE_CHECKING:
    from tui_acc.anomalies.engine import AnomalyEngine
    from tui_acc.metrics.engine import MetricsEngine
    from tui_acc.verdicts.judge import Judge


def open_single(
    path: str | Path,
    settings: AnomalySettings | None = None,
    thresholds: Thresholds | None = None,
    logits_node: str | None = None,
    token_offset: int | None = None,
    rank: int | None = None,
    follow_links: bool = False,
) -> Comparison:
    """Index ``path`` and pair it with itself; nothing is read yet (its ``engine`` is an AnomalyEngine).

    Raises:
        DumpError: the dump cannot be used; the message names it.
    """
    index = open_dump(path, token_offset=token_offset, rank=rank, follow_links=follow_links)
    pairing = pair_dumps(index, index, logits_node)
    thresholds = thresholds or Thresholds()
    rules = settings or AnomalySettings()

    def build_engine() -> AnomalyEngine:
        from tui_acc.anomalies.engine import AnomalyEngine

        return AnomalyEngine(pairing, thresholds, rules)

    return Comparison(index, index, pairing, thresholds, build_engine, build_judge=_own_judge)


def _own_judge(engine: MetricsEngine) -> Judge:
    """The AnomalyEngine's own judge (its token rows are judged by it)."""
    from tui_acc.anomalies.engine import AnomalyEngine

    assert isinstance(engine, AnomalyEngine)  # build_engine's
    return engine.judge
