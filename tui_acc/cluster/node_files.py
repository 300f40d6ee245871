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
    """Copies here of the test files held on other nodes than the head's, each fetched once.

    A copy's name is never made from the node's path: each folder of the node's files a copy is asked
    for gets a numbered folder here (``folder/N/``) and the copy its file name alone, so no path a
    dump names (``..``, a link) can lead a copy outside ``folder``, nor two files share one copy."""

    def __init__(self, workers: Workers, owner: Callable[[Path], int | None]) -> None:
        """``owner``: the place (``workers.places``) holding a file, None for one no rank folder holds."""
        self.workers = workers
        self.owner = owner
        self.folder = Path(tempfile.mkdtemp(prefix="tui-acc-ray-files-"))
        self.fetched = 0  # files brought here
        self.fetched_bytes = 0
        self._lock = threading.Lock()  # the engine's worker threads replay at once
        self._folders: dict[tuple[int, Path], Path] = {}  # (place, a folder on it) -> its folder here
        self._origins: dict[Path, tuple[int, Path]] = {}  # and back
        self._fetching: dict[Path, threading.Lock] = {}  # one fetch per file, however many ask

    def copy_of(self, path: Path) -> Path | None:
        """Where to read ``path`` here: a copy fetched from the node holding it; None where this
        machine reads it itself (no rank folder holds it, or the head's own node does). OSError where
        its node is lost or cannot give it, FileNotFoundError where the node has no such file (the
        readers name the file with the reason)."""
        path = self.original(path) or path
        place = self.owner(path)
        workers = self.workers
        if place is None or workers.places[place].node.node_id == workers.connection.head:
            return None
        if not path.name or not path.is_absolute():
            raise OSError(errno.EINVAL, "not a file's path on its node", str(path))
        with self._lock:
            here = self._folders.get((place, path.parent))
            if here is None:
                here = self.folder / str(len(self._folders))
                here.mkdir()
                self._folders[(place, path.parent)] = here
                self._origins[here] = (place, path.parent)
            copy = here / path.name
            fetching = self._fetching.setdefault(copy, threading.Lock())
        with fetching:
            if not copy.exists():
                self._fetch(place, path, copy)
        return copy

    def original(self, path: Path) -> Path | None:
        """The path on its node of a copy here (or of a file an ATB header names beside one); None
        for any other path (one through ``..`` included)."""
        with self._lock:
            origin = self._origins.get(path.parent)
        if origin is None or path.name in ("", ".", ".."):
            return None
        return origin[1] / path.name

    def holder(self, path: Path) -> Path | None:
        """The folder (as the node names it) of the place on the head's own node holding ``path``:
        what a file there is confined to, as that place's worker confines it."""
        place = self.owner(path)
        workers = self.workers
        if place is None or workers.places[place].node.node_id != workers.connection.head:
            return None
        return Path(workers.places[place].path)

    def is_file(self, path: Path) -> bool | None:
        """Whether the node holding ``path`` has it, as a file (fetched, then); None where this
        machine reads it itself."""
        try:
            return self.copy_of(path) is not None or None
        except FileNotFoundError:
            return False
        except OSError:
            return True  # there, but not readable: the reader that reads it says why

    def _fetch(self, place: int, path: Path, copy: Path) -> None:
        """``path`` from the worker of ``place``, part by part, into ``copy`` (whole or not at all):
        a file whose size or time changes between parts is refused as changed while read."""
        workers = self.workers
        if place in workers.lost:
            raise _not_here(path, f"its node {workers.states[place].label} was lost ({workers.lost[place]})")
        handle, partial_name = tempfile.mkstemp(dir=self.folder, suffix=".part")
        partial = Path(partial_name)
        offset, first = 0, None
        try:
            with os.fdopen(handle, "wb") as out:
                while first is None or offset < first[0]:
                    call = workers.actors[place].file_part.remote(str(path), offset, PART_BYTES)
                    try:
                        data, size, mtime_ns, failure = workers.result(place, call)
                    except CallFailed as exc:
                        raise _not_here(path, str(exc)) from exc
                    if failure is not None:
                        raise OSError(failure[0], failure[1], str(path))  # FileNotFoundError...
                    if first is not None and (size, mtime_ns) != first:
                        raise OSError(errno.EIO, "changed while being read from its node", str(path))
                    first = (size, mtime_ns)
                    if not data:
                        break  # cut short while read: what there is, as a reader here would find it
                    out.write(data)
                    offset += len(data)
            if first is not None:
                os.utime(partial, ns=(first[1], first[1]))
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
    (``NodeFiles``; that node's worker confined the read to its folder), a file of a rank folder on
    the head's own node confined to that place's folder, as its worker would (the ranks' folders may
    share no parent), any other as ``LoadPolicy``."""

    files: NodeFiles = field(compare=False, hash=False, repr=False, kw_only=True)

    def check(self, path: Path, what: str = "links to") -> Path:
        """Where to read ``path``: its copy here where another node holds it, else ``path`` itself if
        this policy allows it (OutsideDump where not)."""
        copy = self.files.copy_of(path)
        if copy is not None:
            return copy
        holder = self.files.holder(path)
        if holder is not None and self.root is not None:
            return LoadPolicy.inside(holder).check(path, what)
        return super().check(path, what)

    def is_file(self, path: Path) -> bool:
        """Whether ``path`` is a file, on the node that holds it."""
        found = self.files.is_file(path)
        return path.is_file() if found is None else found
