"""The metrics engine: lazy, cached, thread-safe answers about a Pairing.

Nothing is computed before it is asked for, and nothing twice: each tensor pair's row is
cached, and a pair being computed by one thread is waited for, not recomputed, by another.
Long calls take ``should_stop`` (checked between tensors) so a UI can cancel them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tui_acc.dumps.model import DumpError, Stats, TensorRef
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.metrics.backlog import Backlog, Preference
from tui_acc.metrics.cache import RowCache, identity
from tui_acc.metrics.schema import METRIC_COLUMNS, NODE_SCHEMA, TENSOR_SCHEMA, TOKEN_SCHEMA, to_frame
from tui_acc.metrics.verdict import Thresholds, logits_passed, near_tie, precision_class, tensor_passed
from tui_acc.pairing import NodePair, Pairing, TensorPair

Row = dict[str, Any]

# A pair whose files together exceed this is compared alone (see MetricsEngine._one_large_pair).
LARGE_PAIR_BYTES = 64 << 20
StopCheck = Callable[[], bool]


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
        follow_links: bool = False,
    ) -> None:
        self.pairing = pairing
        # Links inside a dump may not lead out of it, unless the user allows it (--follow-links).
        self._within: dict[str, Path | None] = {
            "golden": None if follow_links else _containing_folder(pairing.golden.root),
            "test": None if follow_links else _containing_folder(pairing.test.root),
        }
        self.cache = cache
        self.from_cache = 0  # rows found on disk instead of computed
        self.thresholds = thresholds or Thresholds()
        # the compiled kernel releases the GIL, so worker threads scale with the cores
        # (scripts/bench_7b.py: 2 threads on 2 cores, 2.1x faster than 1)
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self._executor: ThreadPoolExecutor | None = None
        self._rows: dict[TensorPair, Row] = {}
        self._keys: dict[TensorPair, str] = {}  # disk-cache keys, computed once (each costs stats)
        self._in_flight: dict[TensorPair, threading.Event] = {}
        self._lock = threading.Lock()
        # Large pairs are compared one at a time: memory stays a small multiple of the largest
        # pair, not of the largest pair times the worker count.
        self._one_large_pair = threading.Lock()
        self.computed = 0  # how many pairs were actually loaded and compared (for tests/benchmarks)
        # The logits module's outputs (and any enclosing module's, which end in them) are judged
        # as logits, so the operator view never passes what the token view fails.
        run_dtypes = pairing.golden.float_dtypes | pairing.test.float_dtypes
        self._stats_floor = precision_class(*run_dtypes) if run_dtypes else None
        tree = pairing.golden.tree
        holder: str | None = pairing.logits_node if pairing.logits_node in tree.nodes else None
        self._logits_holders: set[str] = set()
        inner = holder
        while inner is not None and tree.children(inner):  # the call inside that made the logits
            inner = tree.children(inner)[-1]  # (msprobe mix: lm_head's F.linear, its last child)
            self._logits_holders.add(pairing.golden.stable_name(inner))
        while holder is not None:
            self._logits_holders.add(pairing.golden.stable_name(holder))
            holder = tree.nodes[holder].parent

    # --- tensors ------------------------------------------------------------------------------

    def tensor_row(self, pair: TensorPair) -> Row:
        """The metric row of one tensor pair, computed at most once."""
        while True:
            with self._lock:
                if pair in self._rows:
                    return self._rows[pair]
                event = self._in_flight.get(pair)
                if event is None:
                    event = self._in_flight[pair] = threading.Event()
                    break
            event.wait()
        try:
            row = self._from_cache(pair)
            if row is None:
                row = self._compute(pair)
                transient = row.pop("_transient", False)
                # an error is a fact about this launch (a link refused, a permission, a file being
                # written): never kept, so --follow-links or a chmod is seen the next time
                if self.cache is not None and not transient and not row.get("error"):
                    self.cache.put(self._cache_key(pair), row)
                with self._lock:
                    self.computed += 1
            with self._lock:
                self._rows[pair] = row
            return row
        finally:
            with self._lock:
                del self._in_flight[pair]
            event.set()

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

    def _from_cache(self, pair: TensorPair) -> Row | None:
        if self.cache is None:
            return None
        stored = self.cache.get(self._cache_key(pair))
        if stored is None:
            return None
        # the tensors' names follow this session's pairing; the verdict its thresholds
        stored.update(
            token=pair.token, golden_node=pair.golden_node, test_node=pair.test_node, role=pair.role
        )
        stored["passed"] = self._verdict(pair, stored)
        with self._lock:
            self.from_cache += 1
        return stored

    def flush(self) -> None:
        """Save newly computed rows to the disk cache (if any)."""
        if self.cache is not None:
            self.cache.flush()

    def cached_row(self, pair: TensorPair) -> Row | None:
        """The row if it is known (in memory, or in the disk cache); never computes."""
        with self._lock:
            row = self._rows.get(pair)
        if row is None and self.cache is not None:
            row = self._from_cache(pair)
            if row is not None:
                with self._lock:
                    self._rows.setdefault(pair, row)
        return row

    def _known(self, pair: TensorPair) -> bool:
        """Whether the pair's row is in memory (cheap: no disk cache lookup)."""
        with self._lock:
            return pair in self._rows

    def cached_rows(self) -> list[Row]:
        """Every row computed so far."""
        with self._lock:
            return list(self._rows.values())

    def _compute(self, pair: TensorPair) -> Row:
        # Deferred so that opening a dump (and the UI) never waits for torch to import.
        from tui_acc.metrics.kernels import ShapeMismatch, compare_tensors
        from tui_acc.metrics.stats import compare_stats

        row: Row = {
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
                before = _file_states(pair)
                large = sum(state[0] for state in before.values() if state) > LARGE_PAIR_BYTES
                with self._one_large_pair if large else contextlib.nullcontext():
                    golden, test = self.load_pair(pair)
                    metrics = compare_tensors(golden, test, kl=self._wants_kl(pair))
                    del golden, test  # the mapped files go before the next large pair comes in
                changed = [path for path, state in before.items() if _file_state(path) != state]
                if changed:  # a dump still being written (or copied): these numbers mix two versions
                    row["_transient"] = True  # not kept in the disk cache: the next launch reads it again
                    raise DumpError(
                        f"{changed[0]}: changed while being read; compare again when it is complete"
                    )
            else:
                metrics = compare_stats(
                    _stats(pair.golden, self._within["golden"]), _stats(pair.test, self._within["test"])
                )
        except (TensorLoadError, DumpError) as exc:
            row["error"] = str(exc)
        except ShapeMismatch as exc:
            row["error"] = f"{pair.golden_node}/{pair.slot}: {exc}"
        except Exception as exc:  # one odd pair (a sparse tensor, a header torch chokes on) is its own error
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            row["error"] = f"{pair.test.path} against {pair.golden.path}: {type(exc).__name__}: {first}"
        else:
            metrics["golden_shape"] = _shape(metrics["golden_shape"])
            metrics["test_shape"] = _shape(metrics["test_shape"])
            row.update(metrics)
            row.setdefault("stats_only", False)
        row["passed"] = self._verdict(pair, row)
        return row

    def load_pair(self, pair: TensorPair) -> tuple[Any, Any]:
        """Both tensors of ``pair`` under this comparison's path policy (links may not leave a dump
        unless --follow-links): every reader of tensor data goes through here."""
        golden = load_side(pair.golden, None, self._within["golden"])
        return golden, load_side(pair.test, golden.shape, self._within["test"])

    def _wants_kl(self, pair: TensorPair) -> bool:
        """KL is a logits metric: computed for the logits module's outputs and for single files."""
        if self.pairing.golden.format == "tensor":
            return True
        return self._holds_logits(pair)

    def _holds_logits(self, pair: TensorPair) -> bool:
        stable = self.pairing.golden.stable_name(pair.golden_node)
        return pair.role == "output" and stable in self._logits_holders

    def _verdict(self, pair: TensorPair, row: Row) -> bool:
        if self._holds_logits(pair):
            return logits_passed(row, self.thresholds, self._stats_floor)
        return tensor_passed(row, self.thresholds, self._stats_floor)

    def tensors_frame(self, token: int, should_stop: StopCheck = _never) -> pl.DataFrame:
        rows = []
        for node in self.pairing.node_pairs(token):
            for pair in node.tensors:
                _check(should_stop)
                rows.append(self.tensor_row(pair))
        return to_frame(rows, TENSOR_SCHEMA)

    # --- tokens -------------------------------------------------------------------------------

    def token_row(self, token: int) -> Row:
        """The token's logits verdict and metrics."""
        pair = self.pairing.logits_pair(token)
        if pair is None:
            return {
                "token": token,
                "passed": None,
                "node": self.pairing.logits_node,
                "error": f"token {token}: {self.pairing.logits_node} has no output on both sides (no logits)",
            }
        return self._token_row_from(token, self.tensor_row(pair))

    def cached_token_row(self, token: int) -> Row | None:
        if not self.pairing.is_paired(token):
            return None  # known not to be computed, and asking would list the token's files
        pair = self.pairing.logits_pair(token)
        if pair is None:
            return None
        row = self.cached_row(pair)
        return None if row is None else self._token_row_from(token, row)

    def _token_row_from(self, token: int, tensor: Row) -> Row:
        row = {key: tensor.get(key) for key in TOKEN_SCHEMA}
        row["token"] = token
        row["node"] = tensor["golden_node"]
        row["test_node"] = tensor["test_node"]
        row["shape"] = tensor.get("golden_shape")
        passed = logits_passed(tensor, self.thresholds, self._stats_floor)
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
        on_row: Callable[[Row], None] | None = None,
    ) -> list[Row]:
        wanted = list(self.pairing.tokens if tokens is None else tokens)
        pairs = [p for t in wanted if (p := self.pairing.logits_pair(t)) is not None]
        rows = []
        with self._ahead(pairs, should_stop):
            for token in wanted:
                _check(should_stop)
                row = self.token_row(token)
                rows.append(row)
                if on_row:
                    on_row(row)
        return rows

    def tokens_frame(self, should_stop: StopCheck = _never) -> pl.DataFrame:
        return to_frame(self.token_rows(should_stop=should_stop), TOKEN_SCHEMA)

    def first_failing_token(self, should_stop: StopCheck = _never) -> int | None:
        """The first token whose logits fail; computes tokens in order and stops there."""
        for token in self.pairing.tokens:
            _check(should_stop)
            if self.token_row(token)["passed"] is False:
                return token
        return None

    # --- nodes --------------------------------------------------------------------------------

    def _raw_node_row(
        self,
        node: NodePair,
        should_stop: StopCheck = _never,
        row_of: Callable[[TensorPair], Row] | None = None,
    ) -> Row:
        rows = []
        for pair in node.tensors:
            _check(should_stop)
            rows.append((row_of or self.tensor_row)(pair))
        return self._node_row_from(node, rows)

    def _cached_raw_node_row(self, node: NodePair) -> Row | None:
        rows = [self.cached_row(pair) for pair in node.tensors]
        if any(row is None for row in rows):
            return None
        return self._node_row_from(node, [row for row in rows if row is not None])

    def _node_row_from(self, node: NodePair, rows: list[Row]) -> Row:
        inputs = [r for r in rows if r["role"] == "input"]
        outputs = [r for r in rows if r["role"] == "output"]
        params = [r for r in rows if r["role"] == "param"]
        worst = min(outputs, key=_badness, default=None)
        row: Row = {
            "token": node.token,
            "depth": node.depth,
            "golden_node": node.golden,
            "test_node": node.test,
            "golden_type": node.golden_type,
            "test_type": node.test_type,
            # an input that could not be read says nothing about what came in: the others, or what fed it, do
            "inputs_passed": all(r["passed"] for r in readable)
            if (readable := _without_errors(inputs))
            else None,
            "outputs_passed": all(r["passed"] for r in outputs) if outputs else None,
            # weights are reported, not counted as inputs: a wrong weight makes its op the suspect
            "params_passed": all(r["passed"] for r in params) if params else None,
            "input_cosine": min((r.get("cosine") or 0.0 for r in inputs), default=None),
            "worst_output": worst["slot"] if worst else None,
            "in_place": _in_place(inputs, outputs),
            "error": next((r["error"] for r in rows if r.get("error")), None),
            # its outputs fail only because a file could not be read or compared: no evidence
            # either way, so it is neither a suspect nor what judges the operator after it
            "outputs_unknown": bool(outputs)
            and all(r.get("error") for r in outputs if not r["passed"])
            and not all(r["passed"] for r in outputs),
        }
        for key in _FROM_WORST_OUTPUT:
            row[key] = worst.get(key) if worst else None
        row["shape"] = worst.get("golden_shape") if worst else None
        return row

    def node_rows(
        self,
        token: int,
        should_stop: StopCheck = _never,
        on_row: Callable[[Row], None] | None = None,
        prefer: Preference | None = None,
    ) -> list[Row]:
        """One row per paired node of ``token``, in execution order, with input feeds and labels.

        With ``prefer`` (the nodes on screen), those are computed first and ``on_row`` gets each
        of them early as a *provisional* row (``provisional`` True: metrics and output verdict,
        no input verdict or label yet, as those need every node before it); the final rows follow
        in execution order.
        """
        nodes = self.pairing.node_pairs(token)
        judged: dict[str, Row] = {}
        early = None
        if on_row is not None and prefer is not None:
            owner = {pair: node for node in nodes for pair in node.tensors}

            def early(pair: TensorPair) -> None:  # on a worker thread, as soon as its node is whole
                raw = self._cached_raw_node_row(owner[pair])
                if raw is not None and on_row is not None:
                    on_row({**raw, "provisional": True})

        pairs = [pair for node in nodes for pair in node.tensors]
        with self._ahead(pairs, should_stop, prefer, early) as row_of:
            for order, node in enumerate(nodes):
                row = self._judge(self._raw_node_row(node, should_stop, row_of), judged)
                row["order"] = order
                judged[node.golden] = row
                if on_row:
                    on_row(row)
        for row in self._mark_containers(judged):
            if on_row:
                on_row(row)  # its label changed now that its children are known
        return list(judged.values())

    def _mark_containers(self, judged: dict[str, Row]) -> list[Row]:
        """A failing module whose error starts in one of its children is labelled "contains"."""
        tree = self.pairing.golden.tree
        changed = []
        for name, row in judged.items():
            if row["label"] != "local":
                continue
            parent = tree.nodes[name].parent
            while parent is not None:
                above = judged.get(parent)
                if above is not None and above["label"] == "local":
                    above["label"] = "contains"
                    changed.append(above)
                parent = tree.nodes[parent].parent
        return changed

    def cached_node_rows(self, token: int) -> list[Row]:
        """The rows of ``token`` whose tensors are all computed already (nothing is computed)."""
        judged: dict[str, Row] = {}
        for order, node in enumerate(self.pairing.node_pairs(token)):
            raw = self._cached_raw_node_row(node)
            if raw is not None:
                row = self._judge(raw, judged)
                row["order"] = order
                judged[node.golden] = row
        self._mark_containers(judged)
        return list(judged.values())

    def _judge(self, row: Row, earlier: dict[str, Row]) -> Row:
        """Effective input verdict, suspect flag and local/inherited label, from the rows before it.

        Where a node's inputs were not dumped (ATB child ops, modules called with keyword
        arguments), its input is what fed it: the outputs of the previous sibling that has
        outputs, or for a first child, its parent's input.
        """
        row["inputs_effective"], row["inputs_from"] = row["inputs_passed"], "files"
        if row["inputs_passed"] is None or row.get("in_place"):
            # An in-place op's dumped input is its output (the hook ran after it): what fed it decides.
            fed, source = self._feed(row["golden_node"], earlier)
            if fed is not None or row["inputs_passed"] is None:
                row["inputs_effective"], row["inputs_from"] = fed, source
        failing = row["outputs_passed"] is False and not row.get("outputs_unknown")
        row["suspect"] = failing and row["inputs_effective"] is not False
        # "local": the error starts here; "inherited": its inputs were already bad; "contains"
        # (set once its children are known): the error starts in one of its children
        row["label"] = ("local" if row["suspect"] else "inherited") if failing else None
        return row

    def _feed(self, name: str, earlier: dict[str, Row]) -> tuple[bool | None, str | None]:
        tree = self.pairing.golden.tree
        current = name
        while True:
            parent = tree.nodes[current].parent
            if parent is None:
                return None, None
            siblings = tree.children(parent)
            for previous in reversed(siblings[: siblings.index(current)]):
                row = earlier.get(previous)
                if row is not None and row["outputs_passed"] is not None and not row.get("outputs_unknown"):
                    return bool(row["outputs_passed"]), previous
            parent_row = earlier.get(parent)
            if parent_row is not None and parent_row.get("inputs_effective") is not None:
                return bool(parent_row["inputs_effective"]), parent
            current = parent  # a parent with no rows (a container): look one level up

    @contextmanager
    def _ahead(
        self,
        pairs: list[TensorPair],
        should_stop: StopCheck,
        prefer: Preference | None = None,
        on_done: Callable[[TensorPair], None] | None = None,
    ) -> Iterator[Callable[[TensorPair], Row]]:
        """Compute ``pairs`` on the worker threads while the caller consumes rows in its own order.

        Yields ``row_of(pair)``: while the pair the caller needs is not done, the caller works
        through the backlog too, so every thread takes the pairs of the nodes ``prefer`` names
        first (what is on screen), and the caller's order only decides when rows are *reported*.
        The in-flight table makes sure no pair is computed twice; ``on_done`` runs after each pair
        computed here. Leaving (done or cancelled) stops the workers taking more. The kernels
        release the GIL, so threads use every core.
        """
        todo = [p for p in pairs if self.cached_row(p) is None]
        if self.workers < 2 or len(todo) < 2:
            yield self.tensor_row
            return
        backlog = Backlog(todo, prefer)

        def compute(pair: TensorPair) -> None:
            self.tensor_row(pair)
            if on_done is not None:
                on_done(pair)

        def work() -> None:
            while not should_stop() and (pair := backlog.take()) is not None:
                compute(pair)

        def row_of(pair: TensorPair) -> Row:
            while not self._known(pair) and not should_stop() and (other := backlog.take()):
                compute(other)
            return self.tensor_row(pair)  # done, in flight on a worker (waited for), or computed now

        for _ in range(self.workers - 1):  # the caller's thread is the last worker
            self._pool().submit(work)
        try:
            yield row_of
        finally:
            backlog.close()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix="tui-acc-metrics"
                )
            return self._executor

    def nodes_frame(self, token: int, should_stop: StopCheck = _never) -> pl.DataFrame:
        return to_frame(self.node_rows(token, should_stop), NODE_SCHEMA)

    def first_failing_op(self, token: int, should_stop: StopCheck = _never) -> Row | None:
        """The innermost, earliest node whose output fails while its inputs pass.

        Walks the golden tree in execution order. A module and its child can both qualify
        (the parent's output fails because the child's does); the child is the answer.
        """
        rows = {row["golden_node"]: row for row in self.node_rows(token, should_stop)}
        return first_suspect(self.pairing.golden.tree, rows)


def _without_errors(rows: list[Row]) -> list[Row]:
    return [r for r in rows if not r.get("error")]


# A node row shows its worst output: these columns are copied from that output's row.
_FROM_WORST_OUTPUT = (
    *METRIC_COLUMNS,
    "stats_only",
    "norm_rel_diff",
    "max_diff",
    "min_diff",
    "mean_diff",
    "golden_dtype",
    "test_dtype",
)


def first_suspect(tree: Any, rows: dict[str, Row]) -> Row | None:
    """Earliest qualifying node in execution order, preferring descendants over ancestors."""

    def search(name: str) -> Row | None:
        for child in tree.children(name):
            found = search(child)
            if found is not None:
                return found
        row = rows.get(name)
        return row if row is not None and row["suspect"] else None

    return search(tree.root)


def load_side(ref: TensorRef, like: Any, within: Path | None = None) -> Any:
    """A tensor, merged from its ranks when it was gathered (shaped like the golden where that decides).

    ``within``: the dump's root, which links may not leave (None: follow them anywhere).
    """
    if not ref.parts:
        return load_tensor(ref.path, within)
    from tui_acc.dumps.gather import merge_parts

    return merge_parts([load_tensor(p, within) for p in ref.parts], ref.merge, like, ref.path)


def _file_state(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _file_states(pair: TensorPair) -> dict[Path, tuple[int, int] | None]:
    paths = [p for ref in (pair.golden, pair.test) for p in (ref.parts or (ref.path,))]
    return {path: _file_state(path) for path in paths}


def _containing_folder(root: Path) -> Path:
    """The folder a dump's files must stay in: the root given, or a single file's folder."""
    return root if root.is_dir() else root.parent


def _stats(ref: TensorRef, within: Path | None) -> Stats:
    """A side's statistics: as recorded, or computed from its tensor when the other side has only those."""
    if ref.stats is not None:
        return ref.stats
    from tui_acc.metrics.stats import stats_of

    return stats_of(load_side(ref, None, within))


def _in_place(inputs: list[Row], outputs: list[Row]) -> str | None:
    """``"input_0=output (golden)"`` when a dumped input is its op's output, bit for bit.

    That is what an in-place op (``SiLU(inplace=True)``, ``add_``) leaves in a dump, because the
    input is saved after the op ran: comparing those "inputs" repeats the output comparison, so an
    error starting in the op would look inherited. Equal shape, dtype, min, max, mean and L2 norm
    (on a tensor that is not constant) identify the same data.
    """
    for side in ("golden", "test"):
        for tensor_in in inputs:
            seen = _fingerprint(tensor_in, side)
            if seen is None:
                continue
            for tensor_out in outputs:
                if _fingerprint(tensor_out, side) == seen:
                    return f"{tensor_in['slot']}={tensor_out['slot']} ({side})"
    return None


def _fingerprint(row: Row, side: str) -> tuple[object, ...] | None:
    stats = tuple(row.get(f"{side}_{key}") for key in ("shape", "dtype", "max", "min", "mean", "norm"))
    if any(value is None for value in stats) or stats[2] == stats[3]:
        return None  # not known, or a constant tensor (equal by coincidence too often)
    return stats


def _badness(row: Row) -> tuple[int, float]:
    """Sort key putting the worst output first: errors, then failures, then lowest similarity."""
    cosine = row.get("cosine")
    if cosine is None and row.get("norm_rel_diff") is not None:
        cosine = 1.0 - min(float(row["norm_rel_diff"]), 3.0)
    return (0 if row.get("error") else 1 if not row["passed"] else 2, cosine if cosine is not None else -2.0)


def _check(should_stop: StopCheck) -> None:
    if should_stop():
        raise Cancelled


def _shape(dims: object) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if isinstance(dims, list) else str(dims)
