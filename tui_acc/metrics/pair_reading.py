"""One tensor pair read and compared: both files loaded, then the kernel (or the statistics).

Every reader of a comparison's tensor data goes through ``PairReader``: the rows' computation and
the error map alike, each file under its dump's ``LoadPolicy`` (``dumps/loading.py``), large pairs
one at a time, and a file that changed while it was read never yields numbers that look settled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import numpy as np

from tui_acc.dumps.loading import FileState, changed_since, check_recorded, file_states, load_side
from tui_acc.dumps.model import DumpError, Stats, TensorRef
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError
from tui_acc.metrics.by_rank import by_rank
from tui_acc.metrics.schema import TensorRow
from tui_acc.pairing import Pairing, TensorPair

# A pair whose files together exceed this is compared alone (see PairReader._one_large_pair).
LARGE_PAIR_BYTES = 64 << 20


class PairReader:
    """Loads and compares the tensor pairs of one Pairing (any thread)."""

    def __init__(self, pairing: Pairing) -> None:
        self.pairing = pairing
        # Large pairs are compared one at a time: memory stays a small multiple of the largest
        # pair, not of the largest pair times the worker count.
        self._one_large_pair = threading.Lock()

    def compare(self, pair: TensorPair, kl: bool) -> tuple[TensorRow, bool]:
        """The pair's row, not yet passed or failed, and whether it is transient: the files changed
        while they were read (a dump still being written or copied), so it is not kept in the disk
        cache and the next launch reads them again. ``kl``: compute the KL divergence (logits).

        A pair that cannot be read or compared is a row whose ``error`` says why; nothing raises.
        """
        # Deferred so that opening a dump (and the UI) never waits for the kernel to load.
        from tui_acc.metrics.kernels import ShapeMismatch, compare_tensors
        from tui_acc.metrics.stats import compare_stats

        transient = False
        row = base_row(pair)
        before: dict[Path, FileState] = {}
        try:
            if pair.golden.has_data and pair.test.has_data:
                before = file_states(pair.golden, pair.test)
                with self._alone_if_large(before):
                    golden, test = self.load_pair(pair)
                    metrics = compare_tensors(golden, test, kl=kl)
                    for side, ref in (("golden", pair.golden), ("test", pair.test)):
                        check_recorded(ref, metrics[f"{side}_max"], metrics[f"{side}_min"])  # type: ignore[arg-type]
                    del test
                    if len(pair.test.parts) > 1:  # which rank's shard is off
                        metrics["by_rank"] = self.by_rank(golden, pair)
                    del golden  # the mapped files go before the next large pair comes in
                changed = change_said(before)
                if changed:  # a dump still being written (or copied): these numbers mix two versions
                    transient = True
                    raise DumpError(changed)
            else:
                metrics = compare_stats(
                    _stats(pair.golden, self._golden_policy(pair)),
                    _stats(pair.test, self.pairing.test.load_policy),
                )
        except TensorLoadError as exc:
            # a file rewritten while it was read fails its own checks (a CRC, a size): said as what it is
            changed = change_said(before)
            row["error"], transient = (changed, True) if changed else (str(exc), transient)
        except DumpError as exc:
            row["error"] = str(exc)
        except ShapeMismatch as exc:  # either file may be the odd one: both named
            row["error"] = (
                f"{pair.golden_node}/{pair.slot}: {exc} ({pair.golden.path} against {pair.test.path})"
            )
        except Exception as exc:  # one odd pair (a sparse tensor, a record torch chokes on) is its own error
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            row["error"] = f"{pair.test.path} against {pair.golden.path}: {type(exc).__name__}: {first}"
        else:
            with_metrics(row, metrics)
        return row, transient

    def load_pair(self, pair: TensorPair) -> tuple[np.ndarray, np.ndarray]:
        """Both tensors of ``pair``, each under its dump's load policy (links may not leave a dump
        unless --follow-links): every reader of a comparison's tensor data goes through here."""
        golden = load_side(pair.golden, None, self._golden_policy(pair))
        same_file = pair.test.location == pair.golden.location and not pair.golden.parts
        if self.pairing.golden is self.pairing.test and same_file:
            return golden, golden  # one dump checked on its own (anomalies/): each file read once
        return golden, load_side(pair.test, golden, self.pairing.test.load_policy)

    def by_rank(self, golden: np.ndarray, pair: TensorPair) -> str | None:
        """Each rank's part of a gathered test against its region of the golden (``by_rank.py``)."""
        return by_rank(golden, pair.test, self.pairing.test.load_policy)

    def _golden_policy(self, pair: TensorPair) -> LoadPolicy:
        """The load policy of the dump ``pair``'s golden tensor lies in (the test's, for an op GE
        inserted, held against its own input)."""
        return (self.pairing.test if pair.golden_from_test else self.pairing.golden).load_policy

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


def base_row(pair: TensorPair, error: str | None = None) -> TensorRow:
    """A pair's row before its metrics: which tensors, and ``error`` where it was not compared."""
    return {
        "token": pair.token,
        "golden_node": pair.golden_node,
        "test_node": pair.test_node,
        "slot": pair.slot,
        "role": pair.role,
        "golden_path": str(pair.golden.path),
        "test_path": str(pair.test.path),
        "error": error,
    }


def with_metrics(row: TensorRow, metrics: dict[str, object]) -> None:
    """``row`` with a comparison's metrics (``compare_tensors``' or ``compare_stats``'), shapes said."""
    metrics["golden_shape"] = _shape(metrics["golden_shape"])
    metrics["test_shape"] = _shape(metrics["test_shape"])
    row.update(cast(TensorRow, metrics))
    row.setdefault("stats_only", False)


def _stats(ref: TensorRef, policy: LoadPolicy) -> Stats:
    """A side's statistics: as recorded, or computed from its tensor when the other side has only those."""
    if ref.stats is not None:
        return ref.stats
    from tui_acc.metrics.stats import stats_of

    found = stats_of(load_side(ref, None, policy))
    check_recorded(ref, found.max, found.min)
    return found


def _shape(dims: object) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if isinstance(dims, list) else str(dims)


def change_said(before: dict[Path, FileState]) -> str | None:
    """What to say of a file of the pair that changed while it was read (``before``: their states
    then), or None: the row is then transient, computed again when asked."""
    changed = changed_since(before)
    return f"{changed[0]}: changed while being read; compare again when it is complete" if changed else None
