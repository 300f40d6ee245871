"""The metrics engine: lazy, cached, thread-safe answers about a Pairing (the facade every caller uses).

Nothing is computed before it is asked for, and nothing twice: each tensor pair's row is made once
by ``TensorRows`` (``tensor_rows.py``: memory, the disk cache, the baseline's row; read and compared
by ``pair_reading.py``, passed or failed by ``pass_fail.py``). The engine answers for tokens (their
logits' rows) and nodes (``node_frame.py`` over a token's tensor rows), and schedules many pairs on
the engine-wide ``Scheduler``'s workers, what is on screen first. Node rows are judged by
``tui_acc.verdicts`` above it (the engine computes, the judge judges). Long calls take
``should_stop`` (checked between tensors) so a UI can cancel them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar, cast

import numpy as np
import polars as pl

from tui_acc.metrics.cache import RowCache
from tui_acc.metrics.node_frame import add_within, node_rows_of
from tui_acc.metrics.pair_reading import PairReader
from tui_acc.metrics.pass_fail import PassFail
from tui_acc.metrics.scheduling import Preference, Scheduler, StopCheck
from tui_acc.metrics.schema import TENSOR_SCHEMA, TOKEN_SCHEMA, NodeRow, TensorRow, TokenRow, to_frame
from tui_acc.metrics.tensor_rows import TensorJudge, TensorRows
from tui_acc.pairing import NodePair, Pairing, TensorPair
from tui_acc.tolerances.thresholds import Thresholds

Item = TypeVar("Item")

# Node rows are derived this many at a time as their tensors complete (one frame each): fewer
# frames than nodes, and rows still reach the screen as soon as the next node would make it wait.
NODE_CHUNK = 64


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
        judge_tensor: TensorJudge | None = None,
        reader: Callable[[Pairing], PairReader] | None = None,
    ) -> None:
        """``baseline``: GOLDEN against a clean run at the test's dtype (``--baseline``); its rows set
        the noise floor every tensor here is judged against (tolerances/noise.py). ``judge_tensor``:
        what passes or fails each tensor row instead of the thresholds and the noise floor (a dump
        checked on its own: anomalies/engine.py). ``reader``: what loads and compares a pair, given the
        pairing (default ``PairReader``; ``--ray``'s computes each row on the node holding its files)."""
        self.pairing = pairing
        self.baseline = baseline
        self.pass_fail = PassFail(pairing, thresholds or Thresholds(), noise_floor=baseline is not None)
        self.reader = (reader or PairReader)(pairing)
        self.tensors = TensorRows(
            self.reader, judge_tensor or self.pass_fail.judge, self.pass_fail.wants_kl, cache, baseline
        )
        # the compiled kernel releases the GIL, so worker threads scale with the cores
        # (scripts/bench_7b.py: 2 threads on 2 cores, 2.1x faster than 1)
        self.scheduler = Scheduler(workers if workers is not None else usable_cores())

    @property
    def workers(self) -> int:
        """How many worker threads compute rows (``workers``, or the usable cores)."""
        return self.scheduler.workers

    @property
    def thresholds(self) -> Thresholds:
        """The thresholds each tensor and token is judged by."""
        return self.pass_fail.thresholds

    @property
    def stats_floor(self) -> str | None:
        """The run's precision class (``precision_class`` of its float dtypes; None without any)."""
        return self.pass_fail.stats_floor

    @property
    def cache(self) -> RowCache | None:
        """The disk cache of rows, shared across launches (None with ``--no-cache``)."""
        return self.tensors.cache

    @property
    def computed(self) -> int:
        """How many pairs were actually loaded and compared (for tests and benchmarks)."""
        return self.tensors.computed

    @property
    def from_cache(self) -> int:
        """How many rows were found on disk instead of computed."""
        return self.tensors.from_cache

    def close(self) -> None:
        """Let the worker threads end (they would otherwise wait for work for as long as the process
        lives): the comparison is being replaced. Rows already known stay readable."""
        self.scheduler.close()
        if self.baseline is not None:
            self.baseline.close()

    # --- tensors ------------------------------------------------------------------------------

    def tensor_row(self, pair: TensorPair) -> TensorRow:
        """The metric row of one tensor pair, computed at most once."""
        return self.tensors.row(pair)

    def cached_row(self, pair: TensorPair) -> TensorRow | None:
        """The row if it is known (in memory, or in the disk cache); never computes."""
        return self.tensors.cached_row(pair)

    def known_row(self, pair: TensorPair) -> TensorRow | None:
        """The row if it is in memory: no disk cache, no stat (what a UI thread may ask)."""
        return self.tensors.known_row(pair)

    def cached_rows(self) -> list[TensorRow]:
        """Every row computed so far."""
        return self.tensors.rows()

    def flush(self) -> None:
        """Save newly computed rows to the disk cache (if any), the baseline's too."""
        self.tensors.flush()
        if self.baseline is not None:
            self.baseline.flush()

    def load_pair(self, pair: TensorPair) -> tuple[np.ndarray, np.ndarray]:
        """Both tensors of ``pair``, each under its dump's load policy (``PairReader.load_pair``)."""
        return self.reader.load_pair(pair)

    def held_pair(self, pair: TensorPair) -> AbstractContextManager[tuple[np.ndarray, np.ndarray]]:
        """``load_pair``'s tensors for a reader besides the rows (the error map), a large pair held
        alone; DumpError when the block ends if a file changed meanwhile (``PairReader.held_pair``)."""
        return self.reader.held_pair(pair)

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
        """The token's row from its logits' row: their metrics and the logits' verdict."""
        row = cast(TokenRow, {key: tensor.get(key) for key in TOKEN_SCHEMA})
        row["token"] = token
        held = self.pairing.logits_at.get(token)  # GE's Cast of the logits: the golden's are its op's
        row["node"] = held.golden[-1] if held is not None else tensor["golden_node"]
        row["test_node"] = tensor["test_node"]
        row["shape"] = tensor.get("golden_shape")
        row["computed_in"] = self.pass_fail.computed_in(tensor) or None
        row["passed"], row["verdict"] = self.pass_fail.token_verdict(tensor)
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
            rows = [self.tensors.known_row(p) for p in node.tensors]
            if not all(row is not None for row in rows):
                return
            known = [r for r in rows if r is not None]
            if on_node is not None:
                on_node(node, known)
            if on_row is not None and prefer is not None and node.golden in prefer():
                raw = node_rows_of([(order, node)], known)[0]
                on_row({**raw, "provisional": True})

        chunk: list[tuple[int, NodePair]] = []

        def settle() -> None:  # the rows of the nodes whose tensors are all in, in execution order
            rows = [self.tensor_row(p) for _, node in chunk for p in node.tensors]  # known: no wait
            for row in node_rows_of(chunk, rows):
                done[row["golden_node"]] = row
                if on_row:
                    on_row(row)
            chunk.clear()

        pairs = [pair for node in nodes for pair in node.tensors]
        with self._ahead(pairs, should_stop, prefer, early) as row_of:
            for order, node in enumerate(nodes):
                # the next node may make us wait: what is ready reaches the screen first (without a
                # screen, one frame of every node at the end: each costs polars a dozen ms)
                waiting = chunk and not all(p in self.tensors for p in node.tensors)
                if on_row is not None and (len(chunk) >= NODE_CHUNK or waiting):
                    settle()
                for pair in _checked(node.tensors, should_stop):
                    row_of(pair)
                chunk.append((order, node))
            settle()
        summed = add_within(done, [self.tensor_row(p) for p in pairs], self.pairing.golden.tree)
        if on_row:  # the sums of what is inside each module, known now that their insides are
            for row in summed:
                on_row(row)
        return list(done.values())

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
        found = {row["golden_node"]: row for row in node_rows_of(complete, rows)}
        if len(found) == len(nodes):
            add_within(found, rows, self.pairing.golden.tree)
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
                while pair not in self.tensors and not should_stop() and self.scheduler.help():
                    pass
                if should_stop() and pair not in self.tensors:
                    raise Cancelled  # not one more pair for a caller that has gone
                return self.tensor_row(pair)  # done, in flight on a worker (waited for), or computed now

            yield row_of


def usable_cores() -> int:
    """The cores this process may run on (taskset, a container's cpuset), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _checked(items: Iterable[Item], should_stop: StopCheck) -> Iterator[Item]:
    """``items``, raising Cancelled before each one once ``should_stop`` says so."""
    for item in items:
        if should_stop():
            raise Cancelled
        yield item
