"""What pairing two dumps produces: their tokens, node pairs per token (paired when first asked
for), what stayed unpaired, and the lookups the views make of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tui_acc.dumps.model import DumpIndex
from tui_acc.lazy import LazyMapping
from tui_acc.pairing.absent import absent_before
from tui_acc.pairing.model import CarriedLogits, NodePair, TensorPair, Unmatched


@dataclass
class Pairing:
    """Everything that could be aligned between two dumps.

    ``golden`` is the golden as paired: its tree in the order pairing settled on (an ATB test's
    execution order where msit's model_tree.json order was all the golden had), the view the engine,
    the verdicts and the screens walk; ``pair_dumps`` leaves the index it was given as it was.
    """

    golden: DumpIndex
    test: DumpIndex
    tokens: list[int]
    nodes: Mapping[int, list[NodePair]]
    logits_node: str
    unmatched_found: list[Unmatched] = field(default_factory=list)  # so far: tokens pair when asked
    notes: list[str] = field(default_factory=list)
    # whether a token's pairs are evident without pairing it (a GE token's pairs read a thousand
    # file headers; its ops' names may say as much): see ``has_pairs``
    pairs_without_pairing: Callable[[int], bool] | None = field(default=None, repr=False, compare=False)
    # token -> the golden node holding its logits where another than ``logits_node`` does: a TorchAir
    # graph whose logits GE converted after the op computing them (pairing/ge_inserted.py)
    logits_at: Mapping[int, CarriedLogits] = field(default_factory=dict, repr=False, compare=False)
    _logits_cache: dict[int, TensorPair | None] = field(default_factory=dict, repr=False, compare=False)
    _absent_cache: dict[int, dict[str, list[Unmatched]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def has_pairs(self, token: int) -> bool:
        """Whether ``token`` has any node pair: without pairing it where the names make it evident."""
        quick = self.pairs_without_pairing
        if quick is not None and not self.is_paired(token) and quick(token):
            return True
        return bool(self.node_pairs(token))

    def node_pairs(self, token: int) -> list[NodePair]:
        """The node pairs of ``token`` (empty for a token not in both dumps); on a lazy pairing the token
        is paired on first ask, its files listed then, once. A pairing that fails raises: ``get``
        would take its KeyError for "no such token" and say the token has no pairs."""
        if token not in self.nodes:
            return []
        return self.nodes[token]

    @property
    def unmatched(self) -> list[Unmatched]:
        """Everything without a partner, every token paired to know it (a report; the UI uses
        ``unmatched_found``, which never lists a token's files just to look)."""
        for token in self.tokens:
            self.nodes.get(token)
        return self.unmatched_found

    def all_paired(self) -> bool:
        """Whether every token is paired already (until then, the unmatched found so far are those of the
        tokens paired)."""
        return all(self.is_paired(t) for t in self.tokens)

    def is_paired(self, token: int) -> bool:
        """Whether ``token`` is paired already (asking for its pairs would otherwise list its files)."""
        return not isinstance(self.nodes, LazyMapping) or self.nodes.is_built(token)

    def logits_pair(self, token: int) -> TensorPair | None:
        """The output tensor holding the token's logits, if both sides dumped it (looked up once)."""
        if token not in self._logits_cache:
            pairs = self.nodes.get(token, [])  # pairs the token first: that may settle logits_at
            held = self.logits_at.get(token)
            if held is not None:
                node = next((n for n in pairs if n.golden == held.holder), None)
            else:
                node = logits_holder(pairs, self.golden, self.logits_node)
            outputs = node.outputs if node is not None else ()
            self._logits_cache[token] = outputs[0] if outputs else None
        return self._logits_cache[token]

    def logits_nodes(self, token: int, side: str) -> tuple[str, ...]:
        """The nodes of ``side`` a dump of ``token`` needs for its logits (a re-dump adds them): the
        logits pair's node, or the ops that carried the logits to where the pair holds them."""
        pair = self.logits_pair(token)
        if pair is None:
            return ()
        held = self.logits_at.get(token)
        if held is not None:
            return held.golden if side == "golden" else held.test
        return (pair.golden_node if side == "golden" else pair.test_node,)

    def absent_before(self, token: int) -> dict[str, list[Unmatched]]:
        """Golden node -> the records of ``token`` only one side holds, just before it (absent.py)."""
        if token not in self._absent_cache:
            pairs = self.nodes.get(token, [])  # pairs the token first: that is what finds its unmatched
            alone = [u for u in self.unmatched_found if u.token == token and u.kind == "node"]
            # placing them walks both trees: only where there is something to place
            found = absent_before(token, self.golden, self.test, pairs, alone) if alone else {}
            self._absent_cache[token] = found
        return self._absent_cache[token]

    def tensor_pair_count(self) -> int:
        """How many tensor pairs the run holds, every token's (a token not yet paired is paired here: its
        files are listed)."""
        return sum(len(n.tensors) for nodes in self.nodes.values() for n in nodes)


def logits_holder(pairs: list[NodePair], golden: DumpIndex, logits_node: str) -> NodePair | None:
    """The pair of the golden's logits node among a token's ``pairs`` (by its stable name: the same
    node at every token), where it dumped an output."""
    wanted = golden.stable_name(logits_node)
    return next((n for n in pairs if golden.stable_name(n.golden) == wanted and n.outputs), None)
