"""The metrics engine: lazy, cached, thread-safe answers about a Pairing.

Nothing is computed before it is asked for, and nothing twice: each tensor pair's row is kept
(``RowStore``, and the disk cache across launches), and a pair being computed by one thread is
waited for, not recomputed, by another. Many rows are computed by the engine-wide ``Scheduler``,
what is on screen first. Node rows are derived from the tensor rows (``node_frame.py``) and
judged by ``tui_acc.verdicts`` above it (the engine computes, the judge judges); files are read
under each dump's ``LoadPolicy``
(``dumps/loading.py``). Long calls take ``should_stop`` (checked between tensors) so a UI can
cancel them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, cast

import numpy as np
import polars as pl

from tui_acc.dumps.loading import FileState, changed_since, file_states, load_side
from tui_acc.dumps.model import DumpError, Stats, TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.metrics.aggregate import within_each_module
from tui_acc.metrics.cache import RowCache, identity
from tui_acc.metrics.node_frame import node_frame
from tui_acc.metrics.scheduling import Preference, Scheduler, StopCheck
from tui_acc.metrics.schema import (
    NODE_META_SCHEMA,
    TENSOR_SCHEMA,
    TOKEN_SCHEMA,
    NodeRow,
    TensorRow,
    TokenRow,
    to_frame,
)
from tui_acc.pairing import NodePair, Pairing, TensorPair
from tui_acc.row_store import RowStore
from tui_acc.tolerances.noise import judged, noise_fields
from tui_acc.tolerances.thresholds import Thresholds, logits_passed, near_tie, precision_class, tensor_passed

Item = TypeVar("Item")

# A pair whose files together exceed this is compared alone (see MetricsEngine._one_large_pair).
LARGE_PAIR_BYTES = 64 << 20
# Node rows are derived this many at a time as their tensors complete (one frame each): fewer
# frames than nodes, and rows still reach the screen as soon as the next node would make it wait.
NODE_CHUNK = 64


# A baseline row that exists but is not computed yet (a row judged against it is not known either)
NOT_KNOWN_YET = cast(TensorRow, {"error": "not known yet"})


class Cancelled(Exception):
    """Raised inside a long computation when its ``should_stop`` says so."""


def _never() -> bool:
    return False


class MetricsEngine:
    """Computes and caches metric rows for the tensor pairs of a Pairing."""

    def __init__(
        self,
        pairing: Pairing,
        thresholds: Thresholds | None = None,
        workers: int | None = None,
        cache: RowCache | None = None,
        baseline: MetricsEngine | None = None,
    ) -> None:
        """``baseline``: GOLDEN against a clean run at the test's dtype (``--baseline``); its rows set
        the noise floor every tensor here is judged against (tolerances/noise.py)."""
        self.pairing = pairing
        self.baseline = baseline
        # the baseline's pair for each (golden node, slot), one token at a time, looked up once
        self._twins: dict[int, dict[tuple[str, str], TensorPair]] = {}
        self.cache = cache
        self.from_cache = 0  # rows found on disk instead of computed
        self.thresholds = thresholds or Thresholds()
        # the compiled kernel releases the GIL, so worker threads scale with the cores
        # (scripts/bench_7b.py: 2 threads on 2 cores, 2.1x faster than 1)
        self.scheduler = Scheduler(workers if workers is not None else usable_cores())
        self._rows: RowStore[TensorPair, TensorRow] = RowStore()
        self._keys: dict[TensorPair, str] = {}  # disk-cache keys, computed once (each costs stats)
        self._lock = threading.Lock()
        # Large pairs are compared one at a time: memory stays a small multiple of the largest
        # pair, not of the largest pair times the worker count.
        self._one_large_pair = threading.Lock()
        self.computed = 0  # how many pairs were actually loaded and compared (for tests/benchmarks)
        # The logits module's outputs (and any enclosing module's, which end in them) are judged
        # as logits, so the operator view never passes what the token view fails.
        run_dtypes = pairing.golden.float_dtypes | pairing.test.float_dtypes
        self.stats_floor = precision_class(*run_dtypes) if run_dtypes else None
        self._logits_holders = _logits_holders(pairing)

    @property
    def workers(self) -> int:
        """How many worker threads compute rows (``workers``, or the usable cores)."""
        return self.scheduler.workers

    def close(self) -> None:
        """Let the worker threads end (they would otherwise wait for work for as long as the process
        lives): the comparison is being replaced. Rows already known stay readable."""
        self.scheduler.close()
        if self.baseline is not None:
            self.baseline.close()

    # --- tensors ------------------------------------------------------------------------------

    def tensor_row(self, pair: TensorPair) -> TensorRow:
        """The metric row of one tensor pair, computed at most once."""
        return self._rows.once(pair, lambda: self._produce(pair))

    def _produce(self, pair: TensorPair) -> TensorRow:
        cached = self._from_cache(pair, may_compute=True)
        if cached is not None:
            return cached
        row, transient = self._compute(pair)
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
        key = f"{files}|kl={int(self._wants_kl(pair))}"
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
        self._judge(pair, stored, baseline_row)
        with self._lock:
            self.from_cache += 1
        return stored

    def flush(self) -> None:
        """Save newly computed rows to the disk cache (if any), the baseline's too."""
        if self.cache is not None:
            self.cache.flush()
        if self.baseline is not None:
            self.baseline.flush()

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

    def cached_rows(self) -> list[TensorRow]:
        """Every row computed so far."""
        return self._rows.rows()

    def _compute(self, pair: TensorPair) -> tuple[TensorRow, bool]:
        """The pair's row, and whether it is transient: the files changed while they were read (a
        dump still being written or copied), so it is not kept in the disk cache and the next
        launch reads them again."""
        # Deferred so that opening a dump (and the UI) never waits for the kernel to load.
        from tui_acc.metrics.kernels import ShapeMismatch, compare_tensors
        from tui_acc.metrics.stats import compare_stats

        transient = False
        row: TensorRow = {
            "token": pair.token,
            "golden_node": pair.golden_node,
            "test_node": pair.test_node,
            "slot": pair.slot,
            "role": pair.role,
            "golden_path": str(pair.golden.path),
            "test_path": str(pair.test.path),
            "error": None,
        }
        try:
            if pair.golden.has_data and pair.test.has_data:
                before = file_states(pair.golden, pair.test)
                with self._alone_if_large(before):
                    golden, test = self.load_pair(pair)
                    metrics = compare_tensors(golden, test, kl=self._wants_kl(pair))
                    del golden, test  # the mapped files go before the next large pair comes in
                changed = changed_since(before)
                if changed:  # a dump still being written (or copied): these numbers mix two versions
                    transient = True
                    raise DumpError(
                        f"{changed[0]}: changed while being read; compare again when it is complete"
                    )
            else:
                metrics = compare_stats(
                    _stats(pair.golden, self.pairing.golden.load_policy),
                    _stats(pair.test, self.pairing.test.load_policy),
                )
        except (TensorLoadError, DumpError) as exc:
            row["error"] = str(exc)
        except ShapeMismatch as exc:
            row["error"] = f"{pair.golden_node}/{pair.slot}: {exc}"
        except Exception as exc:  # one odd pair (a sparse tensor, a record torch chokes on) is its own error
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            row["error"] = f"{pair.test.path} against {pair.golden.path}: {type(exc).__name__}: {first}"
        else:
            metrics["golden_shape"] = _shape(metrics["golden_shape"])
            metrics["test_shape"] = _shape(metrics["test_shape"])
            row.update(cast(TensorRow, metrics))
            row.setdefault("stats_only", False)
        self._judge(pair, row, self._baseline_row(pair, may_compute=True))
        return row, transient

    def load_pair(self, pair: TensorPair) -> tuple[np.ndarray, np.ndarray]:
        """Both tensors of ``pair``, each under its dump's load policy (links may not leave a dump
        unless --follow-links): every reader of a comparison's tensor data goes through here."""
        golden = load_side(pair.golden, None, self.pairing.golden.load_policy)
        same_file = pair.test.location == pair.golden.location and not pair.golden.parts
        if self.pairing.golden is self.pairing.test and same_file:
            return golden, golden  # one dump checked on its own (anomalies/): each file read once
        return golden, load_side(pair.test, golden.shape, self.pairing.test.load_policy)

    @contextmanager
    def held_pair(self, pair: TensorPair) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``load_pair``'s tensors for a reader besides the rows (the error map): a large pair is held
        alone, as the rows' computation holds it, and a file that changed while it was read raises
        DumpError when the block ends (what was computed from it mixes two versions)."""
        before = file_states(pair.golden, pair.test)
        with self._alone_if_large(before):
            yield self.load_pair(pair)
        if changed := changed_since(before):
            raise DumpError(f"{changed[0]}: changed while being read; look again when it is complete")

    def _alone_if_large(self, before: dict[Path, FileState]) -> contextlib.AbstractContextManager[object]:
        """The lock large pairs are read under, one at a time (memory), or nothing for a small one."""
        large = sum(state[0] for state in before.values() if state) > LARGE_PAIR_BYTES
        return self._one_large_pair if large else contextlib.nullcontext()

    def _wants_kl(self, pair: TensorPair) -> bool:
        """KL is a logits metric: computed for the logits module's outputs and for single files."""
        if self.pairing.golden.format == "tensor":
            return True
        return self._holds_logits(pair)

    def _holds_logits(self, pair: TensorPair) -> bool:
        stable = self.pairing.golden.stable_name(pair.golden_node)
        return pair.role == "output" and stable in self._logits_holders

    def _judge(self, pair: TensorPair, row: TensorRow, baseline_row: TensorRow | None) -> None:
        """Set the row's verdict: against the noise floor where a baseline row judges it, else
        against the thresholds (for the logits, the logits' own)."""
        against_noise = None
        if self.baseline is not None:
            row.update(noise_fields(row, baseline_row))
            against_noise = judged(row, baseline_row, self.thresholds)
        if against_noise is not None:
            row["passed"] = against_noise
        elif self._holds_logits(pair):
            row["passed"] = logits_passed(row, self.thresholds, self.stats_floor)
        else:
            row["passed"] = tensor_passed(row, self.thresholds, self.stats_floor)

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

    def tensors_frame(self, token: int, should_stop: StopCheck = _never) -> pl.DataFrame:
        """Every paired tensor of ``token`` as a TENSOR_SCHEMA frame, one row each in node order;
        rows not known yet are computed now, on the workers and the calling thread (tensors loaded:
        not the UI thread). A pair that cannot be read or compared is a row whose ``error`` says why.

        Raises:
            Cancelled: ``should_stop`` said so before every row was known.
        """
        pairs = [pair for node in self.pairing.node_pairs(token) for pair in node.tensors]
        with self._ahead(pairs, should_stop) as row_of:
            rows = [row_of(pair) for pair in _checked(pairs, should_stop)]
        return to_frame(rows, TENSOR_SCHEMA)

    # --- tokens -------------------------------------------------------------------------------

    def token_row(self, token: int) -> TokenRow:
        """The token's logits verdict and metrics."""
        pair = self.pairing.logits_pair(token)
        if pair is None:
            return {  # judged "error": it is compared (and says why), not left pending
                "token": token,
                "passed": None,
                "verdict": "error",
                "node": self.pairing.logits_node,
                "error": f"token {token}: {self.pairing.logits_node} has no output on both sides (no logits)",
            }
        return self._token_row_from(token, self.tensor_row(pair))

    def cached_token_row(self, token: int) -> TokenRow | None:
        """The token's row if its logits row is known (in memory or the disk cache); None where it
        is not, or where the token is not paired yet (this never pairs a token or computes)."""
        if not self.pairing.is_paired(token):
            return None  # known not to be computed, and asking would list the token's files
        pair = self.pairing.logits_pair(token)
        if pair is None:
            return None
        row = self.cached_row(pair)
        return None if row is None else self._token_row_from(token, row)

    def _token_row_from(self, token: int, tensor: TensorRow) -> TokenRow:
        row = cast(TokenRow, {key: tensor.get(key) for key in TOKEN_SCHEMA})
        row["token"] = token
        row["node"] = tensor["golden_node"]
        row["test_node"] = tensor["test_node"]
        row["shape"] = tensor.get("golden_shape")
        passed = (
            bool(tensor.get("passed"))  # judged against the noise floor, or as logits: see _judge
            if self.baseline is not None
            else logits_passed(tensor, self.thresholds, self.stats_floor)
        )
        if tensor.get("error"):
            row["verdict"] = "error"
        elif passed and near_tie(tensor, self.thresholds):
            row["verdict"] = "near-tie"  # the argmax flipped between near-equal candidates
        else:
            row["verdict"] = "pass" if passed else "fail"
        row["passed"] = passed
        return row

    def token_rows(
        self,
        tokens: Iterable[int] | None = None,
        should_stop: StopCheck = _never,
        on_row: Callable[[TokenRow], None] | None = None,
    ) -> list[TokenRow]:
        """The rows of ``tokens`` (default: every paired token), in the order given, each computed
        where not known (the logits of every token loaded ahead on the workers: not the UI thread).
        ``on_row`` gets each row as it is known, in that order.

        Raises:
            Cancelled: ``should_stop`` said so; the rows ``on_row`` got stay valid.
        """
        wanted = list(self.pairing.tokens if tokens is None else tokens)
        pairs = [p for t in wanted if (p := self.pairing.logits_pair(t)) is not None]
        rows = []
        with self._ahead(pairs, should_stop):
            for token in _checked(wanted, should_stop):
                row = self.token_row(token)
                rows.append(row)
                if on_row:
                    on_row(row)
        return rows

    def tokens_frame(self, should_stop: StopCheck = _never) -> pl.DataFrame:
        """Every token's row (``token_rows``) as a TOKEN_SCHEMA frame; Cancelled as there."""
        return to_frame(self.token_rows(should_stop=should_stop), TOKEN_SCHEMA)

    def first_failing_token(self, should_stop: StopCheck = _never) -> int | None:
        """The first token whose logits fail; computes tokens in order and stops there."""
        for token in _checked(self.pairing.tokens, should_stop):
            if self.token_row(token)["passed"] is False:
                return token
        return None

    # --- nodes --------------------------------------------------------------------------------

    def node_rows(
        self,
        token: int,
        should_stop: StopCheck = _never,
        on_row: Callable[[NodeRow], None] | None = None,
        prefer: Preference | None = None,
        on_node: Callable[[NodePair, list[TensorRow]], None] | None = None,
    ) -> list[NodeRow]:
        """One row per paired node of ``token``, in execution order: its metrics and its tensors'
        verdicts against the thresholds (not yet judged: ``tui_acc.verdicts`` does that), and for a
        module the sums of every output inside it.

        With ``on_row``, each row as soon as it and the rows before it are known (in execution
        order), then the modules' rows again with their sums; with ``prefer`` (the nodes on screen),
        those are computed first and ``on_row`` gets each of them early as a *provisional* row
        (``provisional`` True), before the rows ahead of it. ``on_node`` runs on the worker that
        completes a node's last tensor, with the node's tensor rows (the judge replays it there).

        Raises:
            Cancelled: ``should_stop`` said so; the rows ``on_row`` got stay valid.
        """
        nodes = self.pairing.node_pairs(token)
        done: dict[str, NodeRow] = {}
        owner = {pair: (order, node) for order, node in enumerate(nodes) for pair in node.tensors}

        def early(pair: TensorPair) -> None:  # on a worker thread, once the pair's node is whole
            order, node = owner[pair]
            rows = [self._rows.get(p) for p in node.tensors]
            if not all(row is not None for row in rows):
                return
            known = [r for r in rows if r is not None]
            if on_node is not None:
                on_node(node, known)
            if on_row is not None and prefer is not None and node.golden in prefer():
                raw = self._raw_node_rows([(order, node)], known)[0]
                on_row({**raw, "provisional": True})

        chunk: list[tuple[int, NodePair]] = []

        def settle() -> None:  # the rows of the nodes whose tensors are all in, in execution order
            rows = [self.tensor_row(p) for _, node in chunk for p in node.tensors]  # known: no wait
            for row in self._raw_node_rows(chunk, rows):
                done[row["golden_node"]] = row
                if on_row:
                    on_row(row)
            chunk.clear()

        pairs = [pair for node in nodes for pair in node.tensors]
        with self._ahead(pairs, should_stop, prefer, early) as row_of:
            for order, node in enumerate(nodes):
                # the next node may make us wait: what is ready reaches the screen first (without a
                # screen, one frame of every node at the end: each costs polars a dozen ms)
                waiting = chunk and not all(p in self._rows for p in node.tensors)
                if on_row is not None and (len(chunk) >= NODE_CHUNK or waiting):
                    settle()
                for pair in _checked(node.tensors, should_stop):
                    row_of(pair)
                chunk.append((order, node))
            settle()
        summed = self._add_within(done, [self.tensor_row(p) for p in pairs])
        if on_row:  # the sums of what is inside each module, known now that their insides are
            for row in summed:
                on_row(row)
        return list(done.values())

    def _add_within(self, judged: dict[str, NodeRow], tensor_rows: Sequence[TensorRow]) -> list[NodeRow]:
        """Each module's aggregate of every output inside it (``*_within``); returns those rows."""
        within = within_each_module(to_frame(tensor_rows, TENSOR_SCHEMA), self.pairing.golden.tree)
        changed = []
        for sums in within.iter_rows(named=True):
            row = judged.get(sums.pop("golden_node"))
            if row is not None:
                row.update(cast(NodeRow, sums))
                changed.append(row)
        return changed

    def _raw_node_rows(
        self, nodes: Sequence[tuple[int, NodePair]], tensor_rows: Sequence[TensorRow]
    ) -> list[NodeRow]:
        """Node rows (metrics, output verdict; not yet judged) of ``nodes`` from their tensors' rows."""
        meta = to_frame(
            [
                {
                    "token": node.token,
                    "order": order,
                    "depth": node.depth,
                    "golden_node": node.golden,
                    "test_node": node.test,
                    "golden_type": node.golden_type,
                    "test_type": node.test_type,
                }
                for order, node in nodes
            ],
            NODE_META_SCHEMA,
        )
        return cast(list[NodeRow], node_frame(to_frame(tensor_rows, TENSOR_SCHEMA), meta).to_dicts())

    def cached_node_rows(self, token: int, disk: bool = True) -> list[NodeRow]:
        """The rows of ``token``'s nodes whose tensors are all computed already (nothing is computed),
        in execution order, with the modules' sums once every node is known; with ``disk`` False,
        from the rows in memory only (what a UI thread may ask)."""
        lookup = self.cached_row if disk else self.known_row
        complete: list[tuple[int, NodePair]] = []
        rows: list[TensorRow] = []
        nodes = self.pairing.node_pairs(token)
        for order, node in enumerate(nodes):
            known = [lookup(pair) for pair in node.tensors]
            if all(row is not None for row in known):
                complete.append((order, node))
                rows.extend(row for row in known if row is not None)
        if not complete:
            return []
        found = {row["golden_node"]: row for row in self._raw_node_rows(complete, rows)}
        if len(found) == len(nodes):
            self._add_within(found, rows)
        return list(found.values())

    @contextmanager
    def _ahead(
        self,
        pairs: list[TensorPair],
        should_stop: StopCheck,
        prefer: Preference | None = None,
        on_done: Callable[[TensorPair], None] | None = None,
    ) -> Iterator[Callable[[TensorPair], TensorRow]]:
        """Compute ``pairs`` on the scheduler's workers while the caller consumes rows in its own order.

        Yields ``row_of(pair)``: while the pair the caller needs is not done, the caller's thread
        works too (on the newest batch: what is on screen), and the caller's order only decides
        when rows are *reported*. ``on_done`` runs after each pair computed here. Leaving (done or
        cancelled) stops the workers taking more of these pairs.
        """
        todo = [p for p in pairs if self.cached_row(p) is None]
        if self.workers < 2 or len(todo) < 2:
            yield self.tensor_row
            return

        def compute(pair: TensorPair) -> None:
            self.tensor_row(pair)
            if on_done is not None:
                on_done(pair)

        def node_of(pair: TensorPair) -> str:
            return pair.golden_node

        with self.scheduler.batch(todo, compute, should_stop, node_of, prefer):

            def row_of(pair: TensorPair) -> TensorRow:
                while pair not in self._rows and not should_stop() and self.scheduler.help():
                    pass
                if should_stop() and pair not in self._rows:
                    raise Cancelled  # not one more pair for a caller that has gone
                return self.tensor_row(pair)  # done, in flight on a worker (waited for), or computed now

            yield row_of


def _logits_holders(pairing: Pairing) -> set[str]:
    """Stable names of the logits module, the call inside it that made the logits, and every module
    enclosing it (their outputs end in the logits)."""
    tree = pairing.golden.tree
    holder: str | None = pairing.logits_node if pairing.logits_node in tree.nodes else None
    holders: set[str] = set()
    inner = holder
    while inner is not None and tree.children(inner):  # the call inside that made the logits
        inner = tree.children(inner)[-1]  # (msprobe mix: lm_head's F.linear, its last child)
        holders.add(pairing.golden.stable_name(inner))
    while holder is not None:
        holders.add(pairing.golden.stable_name(holder))
        holder = tree.nodes[holder].parent
    return holders


def usable_cores() -> int:
    """The cores this process may run on (taskset, a container's cpuset), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _stats(ref: TensorRef, policy: LoadPolicy) -> Stats:
    """A side's statistics: as recorded, or computed from its tensor when the other side has only those."""
    if ref.stats is not None:
        return ref.stats
    from tui_acc.metrics.stats import stats_of

    return stats_of(load_side(ref, None, policy))


def _checked(items: Iterable[Item], should_stop: StopCheck) -> Iterator[Item]:
    """``items``, raising Cancelled before each one once ``should_stop`` says so."""
    for item in items:
        if should_stop():
            raise Cancelled
        yield item


def _shape(dims: object) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if isinstance(dims, list) else str(dims)
