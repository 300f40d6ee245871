"""From a comparison and what the user points at to a re-dump plan (no UI here)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from tui_acc.dumps.model import ATB_FORMATS, TORCHAIR_FORMATS
from tui_acc.redump.plan import RedumpPlan, build_plan, new_folder
from tui_acc.redump.selection import Selection, graph_runs
from tui_acc.redump.settings import RedumpSettings, runs_dir
from tui_acc.session import Comparison


def selection_for(comparison: Comparison, side: str, token: int, golden_node: str | None) -> Selection:
    """Token ``token`` of ``side``; with ``golden_node``, only that node's subtree (in that side's names).

    On a torch side the logits module is added to a subtree, so the new dump still has the
    token's verdict.
    """
    index = comparison.golden if side == "golden" else comparison.test
    atb = index.format in ATB_FORMATS
    nodes: list[str] = []
    if golden_node is not None:
        pair = next((n for n in comparison.pairing.node_pairs(token) if n.golden == golden_node), None)
        name = golden_node if side == "golden" or pair is None else pair.test
        inside = _torchair_module_ops(comparison, token, golden_node, side) if pair is None else []
        # an op GE inserted has no FX node: the golden side dumps what the token's logits need
        inserted_on_golden = pair is not None and pair.inserted and side == "golden"
        # a gathered rank's own call (an expert it owns): the name its rank's records give it
        nodes += inside or ([] if inserted_on_golden else [index.origins.get(name, (0, name))[1]])
        for holder in comparison.pairing.logits_nodes(token, side) if not atb else ():
            if holder not in nodes and not any(holder.startswith(n + ".") for n in nodes):
                nodes.append(holder)
    step = index.exec_counts.get(token, token)
    return Selection(side, token, step, tuple(nodes), atb, runs=graph_runs(index))


def _torchair_module_ops(comparison: Comparison, token: int, golden_node: str, side: str) -> list[str]:
    """A module of a TorchAir graph (the pairing nests FX nodes under their modules, which no dump
    holds): the side's ops paired inside it at ``token``, what its dump settings name; empty for
    anything else (a graph stays a graph: every op of it)."""
    tree = comparison.pairing.golden.tree
    found = tree.nodes.get(golden_node)
    if comparison.golden.format not in TORCHAIR_FORMATS or found is None or found.depth < 2:
        return []
    inside = {node.name for node in tree.preorder(golden_node)}
    pairs = [p for p in comparison.pairing.node_pairs(token) if p.golden in inside]
    return [p.golden if side == "golden" else p.test for p in pairs]


def plan_for(
    comparison: Comparison,
    settings: RedumpSettings,
    side: str,
    token: int,
    golden_node: str | None,
    now: datetime,
    base_dir: Path | None = None,
    typed_exec: str | None = None,
) -> RedumpPlan:
    """The plan for the selection, into a new folder under ``[redump] out_dir`` (or ``base_dir``, else
    ``./tui-acc-runs``)."""
    selection = selection_for(comparison, side, token, golden_node)
    index = comparison.golden if side == "golden" else comparison.test
    side_settings = settings.side(side).for_format(index.format)
    if typed_exec:  # typed in the dialog: wins over tui-acc.toml
        side_settings = replace(side_settings, exec=typed_exec)
    protected = [
        comparison.golden.root,
        comparison.test.root,
        comparison.golden.data_dir,
        comparison.test.data_dir,
    ]
    base = settings.out_dir or base_dir or runs_dir()
    folder = new_folder(base, selection, now, protected)
    return build_plan(selection, side_settings, folder)
