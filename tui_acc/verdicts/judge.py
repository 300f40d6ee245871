"""The one entry point to the verdicts: a token's ``TokenVerdict``, computed once and shared.

The metrics engine produces a token's node rows (metrics and the thresholds' verdict of each
tensor); ``Judge`` walks them in execution order (``walk.py``), judges its modules, and keeps the
result. The TUI, the report, the CSV, the plots and the hunt ask it, so they read one result.

Replays read tensors: ``token`` is for worker threads. A UI thread asks ``known`` (memory only,
nothing computed, a partial verdict while the token computes).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tui_acc.pairing import NodePair, TensorPair
from tui_acc.row_store import RowStore
from tui_acc.rows import NodeRow, TensorRow, TokenRow
from tui_acc.tolerances.errors import error_of
from tui_acc.tolerances.rounding import coarsest
from tui_acc.verdicts.judging import Judging, TokenInput, diverged
from tui_acc.verdicts.local import LocalChecks
from tui_acc.verdicts.verdict import TokenVerdict
from tui_acc.verdicts.walk import TokenWalk

if TYPE_CHECKING:
    import polars as pl

    from tui_acc.metrics.engine import MetricsEngine
    from tui_acc.metrics.scheduling import Preference, StopCheck
    from tui_acc.replay.registry import Registry


# what writes an attention's KV cache, by the name of the node inside it: key and value projections
# and norms, fused ones (qkv, GPT-2's c_attn, GPT-NeoX's query_key_value, MLA's kv_a/kv_b)
_CACHE_WRITER = re.compile(r"k_proj|v_proj|k_norm|kv|key|value|qkv|c_attn|wk\b|wv\b", re.IGNORECASE)


def _below(name: str, module: str) -> str:
    """What ``name`` says beyond the characters it shares with ``module``'s name from the start."""
    shared = 0
    for a, b in zip(name, module, strict=False):
        if a != b:
            break
        shared += 1
    return name[shared:]


def _never() -> bool:
    return False


class Judge:
    """Verdicts of a comparison's tokens, each made once (any thread; see the module docstring).

    ``models`` False: the thresholds alone decide (one dump checked on its own, whose failures are
    anomalies, not errors against a golden to model).
    """

    def __init__(
        self, engine: MetricsEngine, registry: Registry | None = None, *, models: bool = True
    ) -> None:
        pairing = engine.pairing
        self.engine = engine
        self.judging = Judging(
            pairing.golden.tree,
            LocalChecks(pairing, registry) if models else None,
            baseline=engine.baseline is not None,
            models=models,
            first_token=pairing.tokens[0] if pairing.tokens else 0,
            whole_inputs=pairing.test.format != "msit-torch",
            model_dtype=coarsest(pairing.test.float_dtypes),
        )
        self._verdicts: RowStore[int, TokenVerdict] = RowStore()

    def token(
        self,
        token: int,
        should_stop: StopCheck = _never,
        on_row: Callable[[NodeRow], None] | None = None,
        prefer: Preference | None = None,
    ) -> TokenVerdict:
        """Every node of ``token`` judged: its rows computed where not known (tensors read, replays
        run: not the UI thread). ``on_row`` gets each row as it is known: a provisional one (metrics
        only, ``provisional`` True) for the nodes ``prefer`` names, then each judged one in execution
        order, then the modules again once they are judged as a whole.

        Raises:
            Cancelled: ``should_stop`` said so (metrics.engine's); what ``on_row`` got stays valid.
        """
        known = self._verdicts.get(token)
        if known is not None:
            if on_row is not None:
                for row in known.rows:
                    on_row(row)
            return known
        return self._verdicts.once(token, lambda: self._judged(token, should_stop, on_row, prefer))

    def _judged(
        self,
        token: int,
        should_stop: StopCheck,
        on_row: Callable[[NodeRow], None] | None,
        prefer: Preference | None,
    ) -> TokenVerdict:
        nodes = {node.golden: node for node in self.engine.pairing.node_pairs(token)}
        came = functools.partial(self._token_input, token)
        walk = TokenWalk(token, self.judging, came, cached=functools.partial(self._cache_error, token))
        metrics: dict[str, NodeRow] = {}

        def judged(row: NodeRow) -> None:  # the engine's rows, in execution order, as they are known
            if row.get("provisional"):
                if on_row is not None:
                    on_row(row)
                return
            name = row["golden_node"]
            metrics[name] = row
            verdict = walk.verdicts.get(name)
            if verdict is None:
                node = nodes[name]
                verdict = walk.judge(row, self._tensor_rows(node), node)
            if on_row is not None and verdict is not None:
                on_row({**row, **verdict.fields()})

        # without a screen to feed, the engine makes the rows at once and they are judged after
        rows = self.engine.node_rows(
            token,
            should_stop,
            on_row=judged if on_row is not None else None,
            prefer=prefer,
            on_node=self.judging.prefetch,
        )
        for row in rows:  # without on_row the engine reports none: every node is judged here
            if row["golden_node"] not in metrics:
                judged(row)
            metrics[row["golden_node"]] = row  # with the sums of what is inside each module
        changed = walk.finish(self._tensors_of(nodes), nodes.get)
        if on_row is not None:
            for verdict in changed:
                on_row({**metrics[verdict.node], **verdict.fields()})
        return walk.result(metrics, len(nodes), complete=True)

    def known(self, token: int) -> TokenVerdict | None:
        """``token``'s verdict from what is in memory (nothing computed or read: a UI thread may ask):
        the whole verdict once made, else the nodes judged from the rows known so far (``complete``
        False), else None."""
        made = self._verdicts.get(token)
        if made is not None:
            return made
        rows = self.engine.cached_node_rows(token, disk=False)
        if not rows:
            return None
        nodes = {node.golden: node for node in self.engine.pairing.node_pairs(token)}
        walk = TokenWalk(
            token, self.judging, functools.partial(self._token_input, token, compute=False), False
        )
        metrics = {row["golden_node"]: row for row in rows}
        for row in rows:
            node = nodes[row["golden_node"]]
            known_rows = [r for p in node.tensors if (r := self.engine.known_row(p)) is not None]
            walk.judge(row, known_rows, node)
        if len(walk.verdicts) == len(nodes):  # a module's verdict once everything inside it is known
            walk.finish(self._tensors_of(nodes, self.engine.known_row), nodes.get)
        return walk.result(metrics, len(nodes), complete=False)

    def frame(self, token: int, should_stop: StopCheck = _never) -> pl.DataFrame:
        """``token``'s judged rows (``token``) as a NODE_SCHEMA frame, in execution order: the CSV's
        operator table."""
        from tui_acc.metrics.schema import NODE_SCHEMA, to_frame

        return to_frame(self.token(token, should_stop).rows, NODE_SCHEMA)

    def culprit(self, token: int, should_stop: StopCheck = _never) -> NodeRow | None:
        """◆ of ``token``: its culprit's row with its verdict (None: no node is local)."""
        return self.token(token, should_stop).culprit_row

    def first_local(
        self,
        tokens: Iterable[int] | None = None,
        should_stop: StopCheck = _never,
        on_token: Callable[[int], None] | None = None,
    ) -> TokenVerdict | None:
        """The first of ``tokens`` (default: every paired token, in order) where a node is local:
        the sweep for a fault whose logits stay within their bounds. ``on_token`` is told each token
        before it is judged (progress).

        Raises:
            Cancelled: ``should_stop`` said so.
        """
        for token in self.engine.pairing.tokens if tokens is None else tokens:
            if on_token is not None:
                on_token(token)
            verdict = self.token(token, should_stop)
            if verdict.culprit is not None:
                return verdict
        return None

    def earlier_culprit(self, token: int, should_stop: StopCheck = _never) -> TokenVerdict | None:
        """Where ``token`` fails with no operator of its own to blame: the first earlier token with a
        local operator (its error reaches the later tokens through the KV cache their attention reads),
        or None.

        Raises:
            Cancelled: ``should_stop`` said so.
        """
        tokens = self.engine.pairing.tokens
        before = tokens[: tokens.index(token)] if token in tokens else []
        return self.first_local(before, should_stop)

    def _token_input(self, token: int, compute: bool = True) -> TokenInput | None:
        """Where the step before ``token`` chose another token than the golden, ``token`` works on
        another input: nothing in it starts an error (walk.diverged)."""
        tokens = self.engine.pairing.tokens
        at = tokens.index(token) if token in tokens else 0
        if at == 0 or not self.judging.models:  # one dump on its own: no golden to have chosen otherwise
            return None
        previous = tokens[at - 1]
        pairing = self.engine.pairing
        row: TensorRow | TokenRow | None
        if compute:
            if pairing.logits_pair(previous) is None:
                return None
            row = self.engine.token_row(previous)
        else:  # what a UI thread asks: memory only, and no token paired for it
            pair = pairing.logits_pair(previous) if pairing.is_paired(previous) else None
            row = self.engine.known_row(pair) if pair is not None else None
        return diverged(previous, row.get("golden_top1"), row.get("test_top1")) if row is not None else None

    def _cache_error(self, token: int, module: str) -> float | None:
        """The largest relative error the key and value projections inside attention ``module`` had
        at the tokens before ``token``: what its KV cache holds at this decode step. Their rows are
        computed where not known (only where a decode step's attention is judged for its glue)."""
        pairing = self.engine.pairing
        golden = pairing.golden
        tree = golden.tree
        inside = [n.name for n in tree.preorder(module) if n.name != module]
        # by the part of each name below the module's (msprobe's names end in class and counters)
        writers = [n for n in inside if _CACHE_WRITER.search(_below(n, module))]
        wanted = {golden.stable_name(n) for n in (writers or inside)}
        errors: list[float] = []
        for earlier in pairing.tokens[: pairing.tokens.index(token)] if token in pairing.tokens else []:
            for node in pairing.node_pairs(earlier):
                if golden.stable_name(node.golden) not in wanted:
                    continue
                for pair in node.outputs:
                    if (found := error_of(self.engine.tensor_row(pair))) is not None:
                        errors.append(found)
        return max(errors) if errors else None

    def _tensor_rows(self, node: NodePair) -> list[TensorRow]:
        """The rows of a node's tensors, known already (computed by the engine's node_rows)."""
        return [self.engine.tensor_row(pair) for pair in node.tensors]

    def _tensors_of(
        self,
        nodes: dict[str, NodePair],
        lookup: Callable[[TensorPair], TensorRow | None] | None = None,
    ) -> Callable[[str], list[TensorRow]]:
        """A golden node's tensor rows by name (the ones known, with ``lookup``)."""
        find = lookup or self.engine.tensor_row

        def tensors_of(name: str) -> list[TensorRow]:
            node = nodes.get(name)
            return [r for p in node.tensors if (r := find(p)) is not None] if node is not None else []

        return tensors_of
