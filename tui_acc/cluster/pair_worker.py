"""The worker a pair's Ray run (``report GOLDEN TEST --ray``) places on each node: a ``NodeWorker`` (it
lists the node's rank folders the same way) that also opens a rank's index for the head, sends the
tensor files the head names to the node that computes their row, and computes a tensor pair's row
with the golden sent to it: the local comparison's own code (``PairReader.compare``), so the numbers
are a local run's to the last bit.

A plain class, as ``NodeWorker``: ``pair_run.py`` makes it a Ray actor.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from tui_acc.cluster.node_worker import NodeWorker
from tui_acc.cluster.running_sum import RunningSum, extend, finished
from tui_acc.dumps import DumpError, DumpIndex, open_dump
from tui_acc.dumps.dtypes import dtype_name, is_complex, is_float
from tui_acc.dumps.loading import FileState, changed_since, check_part, file_state, load_side, merged
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.metrics.by_rank import by_rank
from tui_acc.metrics.pair_reading import PairReader
from tui_acc.metrics.region_sums import PartSums, part_sums
from tui_acc.metrics.schema import TensorRow
from tui_acc.pairing import Pairing, TensorPair

HELD_BYTES = 128 << 20  # what a survey read, kept for the sums or the row that follow it

# run on the node before it computes a row, given the node's id and the pair: tests block a node there
BeforeCompare = Callable[[str, TensorPair], None]


class PairWorker(NodeWorker):
    """One node's worker for a pair: the test's rank folders at ``path`` on this node."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_bytes = 0  # of the rank folders' files, read here (they never leave but as asked)
        # what a survey read, kept for the call that comes next for the same files (the sums, or the
        # row): each file is read once. Oldest dropped past HELD_BYTES; taken once.
        self._held: OrderedDict[str, tuple[np.ndarray, FileState]] = OrderedDict()
        self._held_bytes = 0

    def bytes_read(self) -> int:
        """The bytes of tensors (and files the head asked for) this worker read from its disk."""
        return self.read_bytes

    def rank_index(self, name: str) -> DumpIndex:
        """The index of the rank folder ``name`` here (names only, no tensor): the head gathers the
        ranks' indexes into the test's, as a local ``--gather`` does."""
        local = self._local.index(name)
        if local == 0 and self._first is not None:
            return self._first
        return open_dump(self.path, rank=local, follow_links=self.follow_links)

    def parts(self, pair: TensorPair, paths: list[str]) -> list[np.ndarray]:
        """``pair``'s test files ``paths`` as read here, for the node that computes its row."""
        self._gate(pair)
        policy = self._policy()
        return [np.ascontiguousarray(self._take(Path(p), policy)[0]) for p in paths]

    def survey(self, pair: TensorPair, paths: list[str]) -> list[PairSurvey]:
        """What the head decides a split by, of each of ``pair``'s test files here: no tensor."""
        self._gate(pair)
        policy = self._policy()
        found = []
        for path in paths:
            state = file_state(Path(path))
            values = self._read(Path(path), policy)
            self._hold(path, values, state)
            digest = hashlib.blake2b(values.tobytes(), digest_size=16)
            digest.update(f"{dtype_name(values)}{values.shape}".encode())
            real = is_float(values) and not is_complex(values)
            found.append(PairSurvey(list(values.shape), dtype_name(values), real, digest.hexdigest()))
        return found

    def region_sums(
        self, pair: TensorPair, paths: list[str], regions: list[np.ndarray], kl: bool
    ) -> tuple[list[PartSums], str | None, bool]:
        """Each of ``pair``'s test files here against its region of the golden (sent by the head):
        its sums (``region_sums.part_sums``); or why it was not compared, and whether that is
        transient (a file that changed while it was read), as the local comparison says it."""
        self._gate(pair)
        policy = self._policy()
        before: dict[Path, FileState] = {}
        sums = []
        try:
            for path, region in zip(paths, regions, strict=True):
                values, before[Path(path)] = self._take(Path(path), policy)
                check_part(pair.test, Path(path), values)
                sums.append(part_sums(region, values, kl))
        except (TensorLoadError, DumpError) as exc:
            changed = changed_since(before)
            if changed:
                return [], f"{changed[0]}: changed while being read; compare again when it is complete", True
            return [], str(exc), False
        changed = changed_since(before)
        if changed:
            return [], f"{changed[0]}: changed while being read; compare again when it is complete", True
        return sums, None, False

    def row(
        self,
        pair: TensorPair,
        golden: np.ndarray,
        kl: bool,
        copy: str | None,
        sent_paths: list[list[str]],
        *sent: list[np.ndarray],
        before: RunningSum | None = None,
    ) -> tuple[TensorRow, bool, int]:
        """``pair``'s row, not yet judged, whether it is transient (``PairReader.compare``), and the
        bytes of the parts sent here: ``golden`` sent by the head, the test's files read here but for
        ``sent`` (each other node's files, ``sent_paths``, as that node read them); ``copy``: every
        rank's file is, bit for bit, this one here, as their digests said (it alone is read);
        ``before``: partial sums, the running sum of the ranks before this node's (``running_sum``)."""
        self._gate(pair)
        arrays = {
            Path(path): values
            for paths, group in zip(sent_paths, sent, strict=True)
            for path, values in zip(paths, group, strict=True)
        }
        reader = SentGoldenReader(self._policy(), golden, arrays, copy, before, self._take_values)
        row, transient = reader.compare(pair, kl)
        self.read_bytes += reader.read_here
        received = before.nbytes if before is not None else 0
        return row, transient, received + sum(values.nbytes for values in arrays.values())

    def running_sum(
        self, pair: TensorPair, paths: list[str], before: RunningSum | None
    ) -> tuple[RunningSum, int]:
        """Partial sums: this node's parts ``paths`` (the next ranks', in rank order), each checked
        against its rank's record, added to the running sum of the ranks before them (``before``, from
        the node holding those); and the bytes of ``before`` received."""
        self._gate(pair)
        policy = self._policy()
        parts = []
        for path in paths:
            values = load_tensor(Path(path), policy)
            self.read_bytes += values.nbytes
            check_part(pair.test, Path(path), values)
            parts.append(values)
        return extend(before, parts), before.nbytes if before is not None else 0

    def tensor(
        self, pair: TensorPair, like: np.ndarray, sent_paths: list[list[str]], *sent: list[np.ndarray]
    ) -> tuple[np.ndarray, int]:
        """The test's tensor of ``pair``, merged as the comparison merges it (what the head's error map
        and plots need whole), and the bytes of the parts sent here."""
        arrays = {
            Path(path): values
            for paths, group in zip(sent_paths, sent, strict=True)
            for path, values in zip(paths, group, strict=True)
        }
        reader = SentGoldenReader(self._policy(), like, arrays, load=self._take_values)
        values = reader.test_side(pair)
        self.read_bytes += reader.read_here
        return values, sum(part.nbytes for part in arrays.values())

    def file_part(
        self, path: str, offset: int, length: int
    ) -> tuple[bytes, int, int, tuple[int, str] | None]:
        """``length`` bytes of the file ``path`` here from ``offset`` (fewer at its end), its size and
        modification time (ns): the head's copy of a file it reads itself (cluster/node_files.py),
        opened under this node's policy (a regular file inside the folder). Where it cannot be read:
        the error's number and text, for the head to raise as this node would have."""
        try:
            with self._policy().open(Path(path)) as handle:
                status = os.fstat(handle.fileno())
                handle.seek(offset)
                data = handle.read(length)
        except OSError as exc:
            return b"", -1, 0, (exc.errno or errno.EIO, exc.strerror or str(exc))
        self.read_bytes += len(data)
        return data, status.st_size, status.st_mtime_ns, None

    def _read(self, path: Path, policy: LoadPolicy) -> np.ndarray:
        values = load_tensor(path, policy)
        self.read_bytes += values.nbytes
        return values

    def _hold(self, path: str, values: np.ndarray, state: FileState) -> None:
        """Keep what a survey read of ``path`` for the next call that needs it."""
        if path in self._held:
            self._held_bytes -= self._held.pop(path)[0].nbytes
        self._held[path] = (values, state)
        self._held_bytes += values.nbytes
        while self._held_bytes > HELD_BYTES:
            self._held_bytes -= self._held.popitem(last=False)[1][0].nbytes

    def _take(self, path: Path, policy: LoadPolicy) -> tuple[np.ndarray, FileState]:
        """``path``'s tensor, as a survey read it (and the file's state then) while the file is as it
        was, else read now (and its state before)."""
        held = self._held.pop(str(path), None)
        if held is not None:
            self._held_bytes -= held[0].nbytes
        state = file_state(path)
        if held is not None and held[1] == state:
            return held
        return self._read(path, policy), state

    def _take_values(self, path: Path) -> np.ndarray:
        return self._take(path, self._policy())[0]

    def _gate(self, pair: TensorPair) -> None:
        """A test's hook (``before_read``, given a pair here) before this node reads ``pair``'s files."""
        if self.before_read is not None:
            cast(BeforeCompare, self.before_read)(self.node_id, pair)

    def _policy(self) -> LoadPolicy:
        return LoadPolicy.for_dump(Path(self.path), self.follow_links)


@dataclass(frozen=True)
class PairSurvey:
    """One test file as a node read it: its shape, dtype, whether it is real floats, and a digest of
    its bytes (the ranks' copies of one tensor are the same where their digests are)."""

    shape: list[int]
    dtype: str
    real_float: bool
    digest: str


@dataclass(frozen=True)
class _Side:
    load_policy: LoadPolicy


@dataclass(frozen=True)
class _Sides:
    """What ``PairReader`` asks of a pairing outside ``load_pair``: the test's load policy."""

    golden: _Side
    test: _Side


class SentGoldenReader(PairReader):
    """``PairReader`` on a node: the golden is the one the head sent, the test's parts those read here
    (by ``load``: the worker's, which counts what it reads) or sent from the nodes holding them
    (``sent``, by path)."""

    def __init__(
        self,
        policy: LoadPolicy,
        golden: np.ndarray,
        sent: dict[Path, np.ndarray],
        copy: str | None = None,
        before: RunningSum | None = None,
        load: Callable[[Path], np.ndarray] | None = None,
    ) -> None:
        super().__init__(cast(Pairing, _Sides(_Side(policy), _Side(policy))))
        self.policy = policy
        self.golden = golden
        self.sent = sent
        self.copy = copy
        self.before = before  # partial sums: the running sum of the ranks before this node's
        self._parts: list[np.ndarray] | None = None
        self.read_here = 0  # bytes of the test's one-file tensors read from this node's disk
        self._load = load or (lambda path: load_tensor(path, policy))

    def load_pair(self, pair: TensorPair) -> tuple[np.ndarray, np.ndarray]:
        """The golden as sent, the test as the local comparison loads it."""
        return self.golden, self.test_side(pair)

    def test_side(self, pair: TensorPair) -> np.ndarray:
        """The test's tensor: its one file, or its parts merged (``loading.merged``)."""
        ref = pair.test
        if not ref.parts:
            values = load_side(ref, self.golden, self.policy)
            self.read_here += values.nbytes
            return values
        if self.before is not None:  # partial sums: this node's parts (the last ranks') added
            rest = ref.parts[self.before.count :]
            own = [self._load(p) for p in rest]
            for path, values in zip(rest, own, strict=True):
                check_part(ref, path, values)
            self._parts = None
            return finished(extend(self.before, own))
        if self.copy is not None:  # every rank's file is this one, bit for bit: read once, here
            same = self._load(Path(self.copy))
            self._parts = [same] * len(ref.parts)
        else:
            self._parts = [self.sent[p] if p in self.sent else self._load(p) for p in ref.parts]
        return merged(ref, self._parts, self.golden)

    def by_rank(self, golden: np.ndarray, pair: TensorPair) -> str | None:
        """Each rank's part against its region of the golden, from the parts already at hand (none for
        partial sums, as the local comparison says none)."""
        if self.before is not None:
            return None
        return by_rank(golden, pair.test, self.policy, self._parts)
