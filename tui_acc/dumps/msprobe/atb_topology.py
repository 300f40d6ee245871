"""The ``info/`` topology msprobe's ATB probe writes beside its data (docs/formats.md §2.8).

``info/model/{dev}_{pid}/{Model}_{Stage}.json`` (atb_probe.cpp:2116-2133): the model's
top-level nodes, each ``opName`` suffixed with ``_{n}``, a counter over every model of the
process (:369), which is the node's id in the data folders; ``opType`` is the name the node had
(:368); ``nodes`` are its operations from the layer graph, in graph order (:411-418).
``info/layer/{dev}_{pid}/{opName}.json`` (:1892-1909): one layer graph, ``opName``, ``opType``,
``param`` and its ``nodes`` (:1849-1881).

Both give an operation's type by its position: the folder ``{id}_{name}`` of a child is the
child's index in its graph's ``nodes``. A file that does not parse is a Problem; the types fall
back to the folder names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui_acc.dumps.atb.executions import Topology
from tui_acc.dumps.model import Problem
from tui_acc.dumps.policy import LoadPolicy

IdChain = tuple[int, ...]


@dataclass
class ProbeTopology:
    models: Topology = field(default_factory=lambda: Topology([]))
    types: dict[IdChain, str] = field(default_factory=dict)  # (layer id, op index, ...) -> opType


def read_topology(info: Path, device: str, policy: LoadPolicy) -> tuple[ProbeTopology, list[Problem]]:
    """What ``info/model/{device}`` and ``info/layer/{device}`` say (empty where they are absent), and
    the files that could not be used."""
    topology = ProbeTopology()
    problems: list[Problem] = []
    models = []
    for file in _json_files(info / "model" / device):
        raw, unread = _load(file, policy)
        problems += unread
        nodes = raw.get("nodes") if isinstance(raw, dict) else None
        if not isinstance(nodes, list) or not nodes:
            if raw is not None:
                problems.append(Problem(str(file), "model topology without nodes; not used"))
            continue
        ids = [_suffix_id(node) for node in nodes]
        if ids[0] is None:
            problems.append(Problem(str(file), "its first node's opName has no _{id} suffix; not used"))
            continue
        models.append((str(raw.get("modelName", file.stem)), ids[0], len(nodes)))
        for node, node_id in zip(nodes, ids, strict=True):
            if node_id is not None:
                _collect(node, (node_id,), topology.types)
    models.sort(key=lambda m: m[1])
    topology.models = Topology(models)
    for file in _json_files(info / "layer" / device):
        raw, unread = _load(file, policy)
        problems += unread
        if raw is None:
            continue
        layer_id = _suffix_id(raw) if isinstance(raw, dict) else None
        if layer_id is None:
            problems.append(Problem(str(file), "layer topology whose opName has no _{id} suffix; not used"))
            continue
        layer_types: dict[IdChain, str] = {}
        _collect(raw, (layer_id,), layer_types)
        for chain, kind in layer_types.items():
            topology.types.setdefault(chain, kind)  # the model file, merged by the probe, comes first
    return topology, problems


def _json_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _load(file: Path, policy: LoadPolicy) -> tuple[Any, list[Problem]]:
    """A topology file's JSON (None where it cannot be read), and the problem that made it None."""
    try:
        # the probe's JSON library writes NaN as null, but a hand-edited file may hold NaN
        return policy.read_json(file, parse_constant=lambda _c: None), []
    except (OSError, ValueError) as exc:
        return None, [Problem(str(file), f"unreadable topology ({exc}); node types from folder names")]


def _suffix_id(node: Any) -> int | None:
    name = node.get("opName") if isinstance(node, dict) else None
    suffix = str(name).rsplit("_", 1)[-1] if isinstance(name, str) and "_" in name else ""
    # 18 digits at most: an id, not a number past Python's limit on converting digits (ValueError)
    return int(suffix) if suffix.isascii() and suffix.isdigit() and len(suffix) <= 18 else None


def _collect(node: dict[str, Any], chain: IdChain, types: dict[IdChain, str]) -> None:
    kind = node.get("opType")
    if isinstance(kind, str) and kind:
        types[chain] = kind
    children = node.get("nodes")
    if isinstance(children, list):
        for index, child in enumerate(children):
            if isinstance(child, dict):
                _collect(child, (*chain, index), types)
