"""Each tensor pair's row, made at most once: kept in memory, on disk, and judged.

A row is found in memory (``RowStore``: a pair being made by one thread is waited for, not made
again, by another), else in the disk cache (``cache.py``, across launches), else read and compared
(``pair_reading.py``). Either way it is then passed or failed by the judge it was given
(``pass_fail.py``'s thresholds and noise floor, or a dump's own checks), which gets the baseline's
row at the same golden tensor where there is a baseline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, cast

from tui_acc.metrics.cache import RowCache, identity
from tui_acc.metrics.pair_reading import PairReader
from tui_acc.metrics.schema import TensorRow
from tui_acc.pairing import Pairing, TensorPair
from tui_acc.row_store import RowStore

# A baseline row that exists but is not computed yet (a row judged against it is not known either)
NOT_KNOWN_YET = cast(TensorRow, {"error": "not known yet"})

# Sets a row's ``passed`` (and whatever columns its verdict adds), given the baseline's row at the
# same golden tensor (None without one): pass_fail.py's ``PassFail.judge``, or a dump's own checks
# (anomalies/engine.py). Called for every row, computed or found on disk, on the thread making it.
TensorJudge = Callable[[TensorPair, TensorRow, "TensorRow | None"], None]


class BaselineRows(Protocol):
    """What judging against a baseline asks of it (a ``MetricsEngine`` over the baseline run)."""

    @property
    def pairing(self) -> Pairing: ...

    def tensor_row(self, pair: TensorPair) -> TensorRow: ...

    def cached_row(self, pair: TensorPair) -> TensorRow | None: ...


class TensorRows:
    """The rows of one Pairing's tensor pairs, thread-safe."""

    def __init__(
        self,
        reader: PairReader,
        judge: TensorJudge,
        wants_kl: Callable[[TensorPair], bool],
        cache: RowCache | None = None,
        baseline: BaselineRows | None = None,
    ) -> None:
        """``judge`` sets each row's verdict, ``wants_kl`` says which pairs the KL is computed for;
        ``baseline``: the rows of GOLDEN against a clean run at the test's dtype, which ``judge``
        gets beside each row here (tolerances/noise.py)."""
        self.reader = reader
        self.judge = judge
        self.wants_kl = wants_kl
        self.cache = cache
        self.baseline = baseline
        self.from_cache = 0  # rows found on disk instead of computed
        self.computed = 0  # how many pairs were actually loaded and compared (for tests/benchmarks)
        self._rows: RowStore[TensorPair, TensorRow] = RowStore()
        self._keys: dict[TensorPair, str] = {}  # disk-cache keys, computed once (each costs stats)
        # the baseline's pair for each (golden node, slot), one token at a time, looked up once
        self._twins: dict[int, dict[tuple[str, str], TensorPair]] = {}
        self._lock = threading.Lock()

    def row(self, pair: TensorPair) -> TensorRow:
        """The metric row of one tensor pair, computed at most once."""
        return self._rows.once(pair, lambda: self._produce(pair))

    def cached_row(self, pair: TensorPair) -> TensorRow | None:
        """The row if it is known (in memory, or in the disk cache); never computes."""
        row = self._rows.get(pair)
        if row is None and self.cache is not None:
            row = self._from_cache(pair)
            if row is not None:
                row = self._rows.adopt(pair, row)
        return row

    def known_row(self, pair: TensorPair) -> TensorRow | None:
        """The row if it is in memory: no disk cache, no stat (what a UI thread may ask)."""
        return self._rows.get(pair)

    def __contains__(self, pair: TensorPair) -> bool:
        """Whether the pair's row is in memory."""
        return pair in self._rows

    def rows(self) -> list[TensorRow]:
        """Every row computed so far."""
        return self._rows.rows()

    def flush(self) -> None:
        """Save newly computed rows to the disk cache, if there is one."""
        if self.cache is not None:
            self.cache.flush()

    def compute(self, pair: TensorPair) -> tuple[TensorRow, bool]:
        """The pair's row read, compared and judged; and whether it is transient (``PairReader.compare``)."""
        row, transient = self.reader.compare(pair, kl=self.wants_kl(pair))
        self.judge(pair, row, self._baseline_row(pair, may_compute=True))
        return row, transient

    def _produce(self, pair: TensorPair) -> TensorRow:
        cached = self._from_cache(pair, may_compute=True)
        if cached is not None:
            return cached
        row, transient = self.compute(pair)
        # an error is a fact about this launch (a link refused, a permission, a file being
        # written): never kept, so --follow-links or a chmod is seen the next time
        if self.cache is not None and not transient and not row.get("error"):
            self.cache.put(self._cache_key(pair), row)
        with self._lock:
            self.computed += 1
        return row

    def _cache_key(self, pair: TensorPair) -> str:
        """The pair's key in the disk cache, found once per session: the files' identities take a
        stat each, and the views ask for every token's logits row after each computed token."""
        with self._lock:
            known = self._keys.get(pair)
        if known is not None:
            return known
        # node names too: statistics-only entries of many nodes share one file (dump.json, a csv);
        # and whether KL was computed (it is for the logits only, and --logits-node moves them)
        files = f"{pair.golden_node}:{identity(pair.golden)}=>{pair.test_node}:{identity(pair.test)}"
        key = f"{files}|kl={int(self.wants_kl(pair))}"
        with self._lock:
            self._keys[pair] = key
        return key

    def _from_cache(self, pair: TensorPair, may_compute: bool = False) -> TensorRow | None:
        """The row kept on disk, judged. Judging it needs the baseline's row where there is a
        baseline: unless ``may_compute``, a row whose baseline row is not known yet is not known."""
        if self.cache is None:
            return None
        found = self.cache.get(self._cache_key(pair))
        if found is None:
            return None
        baseline_row = self._baseline_row(pair, may_compute)
        if baseline_row is NOT_KNOWN_YET:
            return None
        stored = cast(TensorRow, found)  # as it was put: a TensorRow's stored columns
        # the tensors' names follow this session's pairing; the verdict its thresholds
        stored["token"], stored["role"] = pair.token, pair.role
        stored["golden_node"], stored["test_node"] = pair.golden_node, pair.test_node
        self.judge(pair, stored, baseline_row)
        with self._lock:
            self.from_cache += 1
        return stored

    def _baseline_row(self, pair: TensorPair, may_compute: bool) -> TensorRow | None:
        """The baseline's row at the same golden tensor, or None without a baseline or where it
        lacks the tensor. Computed here when not known yet if ``may_compute`` (a worker computing a
        test row computes its baseline row too), else ``NOT_KNOWN_YET``."""
        if self.baseline is None:
            return None
        with self._lock:
            twins = self._twins.get(pair.token)
        if twins is None:
            twins = {
                (twin.golden_node, twin.slot): twin
                for node in self.baseline.pairing.node_pairs(pair.token)
                for twin in node.tensors
            }
            with self._lock:
                self._twins[pair.token] = twins
        twin = twins.get((pair.golden_node, pair.slot))
        if twin is None:
            return None
        if may_compute:
            return self.baseline.tensor_row(twin)
        known = self.baseline.cached_row(twin)
        return NOT_KNOWN_YET if known is None else known
