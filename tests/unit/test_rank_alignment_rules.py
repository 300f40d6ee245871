"""Two rules of the expert-parallel merge that need no dump: ranks whose experts interleave are not
merged (no rank's loop can be placed whole in the golden's order of expert ids), and only tokens at
which every rank recorded tensors are merged."""

from __future__ import annotations

from pathlib import Path

from tui_acc.dumps.expert_order import interleaved
from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.rank_merging import with_data as _with_data


def test_contiguous_ownership_in_any_rank_order_is_placeable() -> None:
    assert interleaved({0: {0, 1}, 1: {2, 3}, 2: {4, 5}}) is None
    assert interleaved({0: {4, 5}, 1: {0, 1}, 2: {2, 3}}) is None  # placed by expert id, not rank
    assert interleaved({0: {0}, 1: set(), 2: {2}}) is None  # a rank that ran no expert anywhere


def test_round_robin_ownership_is_named() -> None:
    why = interleaved({0: {0, 3}, 1: {1, 4}, 2: {2, 5}})
    assert why is not None and "rank 0" in why and "interleave" in why


def _index(tokens: dict[int, dict[str, list[TensorRef]]]) -> DumpIndex:
    tree = NodeTree("model", {"model": Node("model", "model", None, 0)})
    return DumpIndex(Path("/r"), Path("/r"), "msprobe", tree, tokens, "dump.json order", True)


def test_a_token_some_rank_recorded_nothing_at_is_dropped_and_said() -> None:
    ref = [TensorRef("output.0", "output", "/r/x.pt")]
    full = _index({0: {"a": ref}, 1: {"a": ref}, 2: {"a": ref}})
    short = _index({0: {"a": ref}, 1: {"a": ref}, 2: {"a": []}})
    kept = _with_data(full, [short])
    assert not isinstance(kept, str)
    assert [sorted(index.tokens) for index in kept] == [[0, 1], [0, 1]]
    assert any("[2]" in note for note in kept[0].notes)
    assert _with_data(full, [_index({0: {"a": []}})]) == "rank 1 recorded no tensor"
    apart = _with_data(
        _index({0: {"a": ref}, 1: {"a": ref}}), [_index({0: {"a": ref}}), _index({1: {"a": ref}})]
    )
    assert apart == "no token at which every rank recorded tensors"
