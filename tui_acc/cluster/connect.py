"""Joining a Ray cluster for ``--ray ADDRESS``, and where on it the dump is: which alive node reads
which folder.

``DUMP`` alone is the same path on every node; ``HOST:PATH`` arguments name the folder on each node
(HOST a node's hostname, its IP address or its Ray node id, full or its first 8 hex digits; a HOST that
matches several nodes names each of them).
"""

from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tui_acc.errors import TuiAccError, UsageError

RAY_EXTRA = "pip install 'tui-acc[ray]'"
# what ray.init takes as an address: auto / local, ray://..., host:port, [ipv6]:port
_ADDRESS = re.compile(r"^(auto|local|ray://.+|[^/:\[\]]+:\d+|\[[0-9A-Fa-f:.]+\]:\d+)$")
_HOST_PATH = re.compile(r"^([^/:]+):(.+)$")
_HOST_PORT = re.compile(r"^([^/:\[\]]+|\[[0-9A-Fa-f:.]+\]):(\d+)$")
CONNECT_SECONDS = 10  # a head that does not take a TCP connection in this long is not there


class RayMissing(TuiAccError, ImportError):
    """``--ray`` where Ray is not installed: the message names the extra that brings it."""


class ClusterError(TuiAccError, RuntimeError):
    """The cluster cannot be used (no cluster at the address, no node with that name)."""


def import_ray() -> ModuleType:
    """Ray, imported now (only the --ray path calls this); RayMissing naming the extra without it."""
    try:
        import ray
    except ImportError as exc:
        raise RayMissing(f"--ray needs Ray, an optional extra: {RAY_EXTRA} ({exc})") from exc
    return ray


def is_address(text: str) -> bool:
    """Whether ``text`` is what ray.init takes as an address rather than a dump's path."""
    return bool(_ADDRESS.match(text))


@dataclass(frozen=True)
class Node:
    """An alive node of the cluster, as ``ray.nodes()`` describes it."""

    node_id: str
    hostname: str
    ip: str

    @property
    def label(self) -> str:
        """How the output names it: its hostname and the start of its id (several nodes of a test
        cluster share one host)."""
        return f"{self.hostname or self.ip} [{self.node_id[:8]}]"


@dataclass(frozen=True)
class Place:
    """A folder on a node: where one worker lists and reads rank folders."""

    node: Node
    path: str

    @property
    def label(self) -> str:
        """The node's label and the path."""
        return f"{self.node.label}:{self.path}"


class Connection:
    """A session on a Ray cluster: joined here (and left by ``close``) unless this process had
    already joined one (a test's cluster), which is then left as it was."""

    def __init__(self, address: str | None) -> None:
        self.ray = import_ray()
        self.address = address or "auto"
        self._joined = False
        if not self.ray.is_initialized():
            _reachable(self.address)
            try:
                self.ray.init(
                    address=self.address,
                    logging_level=logging.WARNING,
                    log_to_driver=False,  # a worker's prints are not the report's
                    include_dashboard=False,
                )
            except Exception as exc:  # ray raises ConnectionError, ValueError, RuntimeError and its own
                raise ClusterError(
                    f"--ray {self.address}: no Ray cluster to join ({first_line(exc)})"
                ) from exc
            self._joined = True
        self.head = str(self.ray.get_runtime_context().get_node_id())

    def alive_nodes(self) -> list[Node]:
        """The cluster's alive nodes, in the order Ray lists them."""
        nodes: list[dict[str, Any]] = self.ray.nodes()
        return [
            Node(
                str(n["NodeID"]),
                str(n.get("NodeManagerHostname") or ""),
                str(n.get("NodeManagerAddress") or ""),
            )
            for n in nodes
            if n.get("Alive")
        ]

    def close(self) -> None:
        """Leave the cluster where this session joined it."""
        if self._joined and self.ray.is_initialized():
            self.ray.shutdown()
            self._joined = False


def _reachable(address: str) -> None:
    """A head at ``host:port`` (or RAY_ADDRESS's, for auto) that answers: ray.init would retry an
    address nobody listens at for minutes; ClusterError at once instead."""
    target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    found = _HOST_PORT.match(target)
    if found is None:  # ray://, local, or auto without RAY_ADDRESS: ray.init says itself, at once
        return
    host, port = found.group(1).strip("[]"), int(found.group(2))
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        said = f" (RAY_ADDRESS={target})" if target != address else ""
        raise ClusterError(f"--ray {address}{said}: no Ray head answers at {target} ({exc})") from exc


def places_of(arguments: list[str], nodes: list[Node]) -> list[Place]:
    """Where each node's worker reads: one path on every alive node, or each ``HOST:PATH``'s node."""
    pairs = [_HOST_PATH.match(a) for a in arguments]
    if len(arguments) == 1 and pairs[0] is None:
        return [Place(node, arguments[0]) for node in nodes]
    if any(p is None for p in pairs):
        plain = next(a for a, p in zip(arguments, pairs, strict=True) if p is None)
        raise UsageError(
            f"{plain}: give one DUMP (the same path on every node) or HOST:PATH for each node, not both"
        )
    places: list[Place] = []
    for pair in pairs:
        assert pair is not None
        host, path = pair.group(1), pair.group(2)
        named = [n for n in nodes if host in (n.hostname, n.ip, n.node_id) or _id_prefix(host, n)]
        if not named:
            alive = ", ".join(n.label for n in nodes) or "none"
            raise UsageError(f"{host}:{path}: no alive Ray node is named {host} (alive: {alive})")
        places += [Place(node, path) for node in named if Place(node, path) not in places]
    return places


def _id_prefix(host: str, node: Node) -> bool:
    return len(host) >= 8 and all(c in "0123456789abcdef" for c in host) and node.node_id.startswith(host)


def first_line(exc: BaseException) -> str:
    """An exception's first line, without the terminal colours Ray puts in its messages."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]
