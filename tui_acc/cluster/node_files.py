"""The test's files the head itself reads in a pair's Ray run, brought from the node that holds them.

The rows are computed on the nodes (``pair_run.py``), but the verdicts replay an operator from its
dumped inputs at the head (``verdicts/local.py``, ``replay/dumped_call.py``): its input and output
tensors, its record in the rank's dump.json, an ATB operator's parameters. Those files are on the
disk of the node holding their rank folder, and the head cannot open them by path (only a shared
file system, or a test's cluster on one machine, would let it). ``ReadThroughNodes`` is the gathered
test's load policy at the head: every reader already asks its policy before opening a file
(``LoadPolicy.check``), and this policy answers with a copy here of a file on another node, fetched
once from that node's worker (``PairWorker.file_part``: the node opens it under its own policy, a
regular file inside its folder) in parts of ``PART_BYTES``, its modification time kept (a settled
file is mapped, as at home). The copies are in a folder of the run's, removed when it ends; a file
another names beside it (an ATB header's ``data=``) is found by its path on the node, as at home.

What the copies cost crosses the network once per file, counted with the results that came back.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tui_acc.cluster.workers import CallFailed, Workers
from tui_acc.dumps.policy import LoadPolicy

PART_BYTES = 64 << 20  # a file is fetched this much at a time: no node holds a whole large one twice


class NodeFiles:
    """Copies here of the test files held on other nodes than the head's, each fetched once."""

    def __init__(self, workers: Workers, owner: Callable[[Path], int | None]) -> None:
        """``owner``: the place (``workers.places``) holding a file, None for one no rank folder holds."""
        self.workers = workers
        self.owner = owner
        self.folder = Path(tempfile.mkdtemp(prefix="tui-acc-ray-files-"))
        self.fetched = 0  # files brought here
        self.fetched_bytes = 0
        self._lock = threading.Lock()  # the engine's worker threads replay at once
        self._fetching: dict[Path, threading.Lock] = {}  # one fetch per file, however many ask

    def copy_of(self, path: Path) -> Path | None:
        """Where to read ``path`` here: a copy fetched from the node holding it; None where this
        machine reads it itself (no rank folder holds it, or the head's own node does). OSError where
        its node is lost or cannot give it (the readers name the file with the reason)."""
        path = self.original(path) or path
        place = self.owner(path)
        workers = self.workers
        if place is None or workers.places[place].node.node_id == workers.connection.head:
            return None
        copy = self.folder / str(place) / path.relative_to(path.anchor)
        with self._lock:
            fetching = self._fetching.setdefault(copy, threading.Lock())
        with fetching:
            if not copy.exists():
                self._fetch(place, path, copy)
        return copy

    def original(self, path: Path) -> Path | None:
        """The path on its node of a copy here (or of a file an ATB header names beside one); None
        for any other path."""
        try:
            place, *parts = path.relative_to(self.folder).parts
        except ValueError:
            return None
        return Path("/", *parts) if parts and place.isdigit() else None

    def _fetch(self, place: int, path: Path, copy: Path) -> None:
        """``path`` from the worker of ``place``, part by part, into ``copy`` (whole or not at all)."""
        workers = self.workers
        if place in workers.lost:
            raise _not_here(path, f"its node {workers.states[place].label} was lost ({workers.lost[place]})")
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(f".{copy.name}.part")
        offset, size, mtime_ns = 0, None, 0
        try:
            with partial.open("wb") as out:
                while size is None or offset < size:
                    call = workers.actors[place].file_part.remote(str(path), offset, PART_BYTES)
                    try:
                        data, size, mtime_ns = workers.result(place, call)
                    except CallFailed as exc:
                        raise _not_here(path, str(exc)) from exc
                    if not data:
                        break  # cut short while read: what there is, as a reader here would find it
                    out.write(data)
                    offset += len(data)
            os.utime(partial, ns=(mtime_ns, mtime_ns))
            partial.replace(copy)
        finally:
            partial.unlink(missing_ok=True)
        with self._lock:
            self.fetched += 1
            self.fetched_bytes += offset

    def close(self) -> None:
        """Remove every copy."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _not_here(path: Path, why: str) -> OSError:
    return OSError(errno.EIO, f"not read from its node: {why}", str(path))


@dataclass(frozen=True)
class ReadThroughNodes(LoadPolicy):
    """The gathered test's policy at the head: a file on another node read from its copy here
    (``NodeFiles``; that node's worker confined the read to its folder), any other as ``LoadPolicy``."""

    files: NodeFiles = field(compare=False, hash=False, repr=False, kw_only=True)

    def check(self, path: Path, what: str = "links to") -> Path:
        """Where to read ``path``: its copy here where another node holds it, else ``path`` itself if
        this policy allows it (OutsideDump where not)."""
        copy = self.files.copy_of(path)
        return copy if copy is not None else super().check(path, what)
