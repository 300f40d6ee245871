"""A tensor-parallel test against a one-device golden (the demo's ``--ranks`` run: an msit ATB dump
of every rank, o_proj and down_proj row-parallel, each partial sum all-reduced; its golden the same
model on one device in float32, msit torch). The ranks are gathered without asking, the first lines
say so, and a wrong all-reduce on one rank is the one local operator, named with its rank.

Where the fault lies is the demo's record (``Fault``: token, layer, the all-reduce after down_proj,
the last rank), not tui-acc's reading of it."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from tui_acc import CompareOptions, open_comparison
from tui_acc.demo.tensor_parallel import NEW_TOKENS, make_ranks_demo, run_tensor_parallel, write_golden
from tui_acc.dumps.gather import merge_parts
from tui_acc.replay import collective
from tui_acc.replay.call import Call, ProcessGroup, ReplayImpossible
from tui_acc.reports.pair import build_report


def _report(golden, test):
    return build_report(open_comparison(golden, test, CompareOptions(cache=False)), all_tokens=True)


def _assert_the_all_reduce_is_named(demo) -> None:
    report = _report(demo.out / "golden", demo.out / "test")
    body, text = report.body(), report.text()
    assert "tensor-parallel, " + f"{demo.world} ranks, gathered" in text.splitlines()[2]
    culprit = body["first_failing_op"]
    assert culprit is not None
    layer = f"root.model.layers.{demo.fault.layer}"
    assert (culprit["token"], culprit["golden"]) == (demo.fault.token, layer)
    assert culprit["test"] == demo.fault_op.split("/")[0]
    assert (culprit["label"], culprit["rule"], culprit["operator"]) == ("local", "replay", demo.fault_op)
    assert f"{demo.fault_op}, on rank {demo.fault.rank}," in culprit["reason"]
    assert body["counts"]["local"] == 1
    assert body["errors"] == [] and "element counts differ" not in text


def test_a_wrong_all_reduce_on_one_rank_is_the_one_local_operator(ranks_demo) -> None:
    _assert_the_all_reduce_is_named(ranks_demo)


def test_four_ranks_the_last_ones_all_reduce(tmp_path) -> None:
    _assert_the_all_reduce_is_named(make_ranks_demo(tmp_path / "tp4", world=4))


def test_a_clean_tensor_parallel_run_labels_nothing_local(tmp_path) -> None:
    prompt = random.Random(0).sample(range(1, 500), 8)  # the demo's
    run_tensor_parallel(tmp_path / "test", 0, prompt, NEW_TOKENS, 2, fault=None)
    write_golden(tmp_path / "golden", 0, prompt)
    report = _report(tmp_path / "golden", tmp_path / "test")
    body = report.body()
    assert body["first_failing_token"] is None and body["first_failing_op"] is None
    assert not [f for f in body["failing"] if f.get("label") == "local"]
    assert body["errors"] == [] and "tensor-parallel, 2 ranks, gathered" in report.text()


def test_one_rank_picked_is_compared_alone(ranks_demo) -> None:
    options = CompareOptions(cache=False, rank=0)
    comparison = open_comparison(ranks_demo.out / "golden", ranks_demo.out / "test", options)
    assert comparison.test.rank == 0
    text = build_report(comparison, all_tokens=True).text()
    assert "gathered" not in text.splitlines()[2]


def test_ranks_that_disagree_on_a_whole_tensor_show_the_one_farthest_from_the_golden(tmp_path) -> None:
    golden = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    agree = [golden.copy(), golden.copy()]
    assert merge_parts(agree, "auto", golden, tmp_path) is agree[0]
    off = [golden.copy(), golden * 1.5]
    assert merge_parts(off, "auto", golden, tmp_path) is off[1]
    assert merge_parts(off, "auto", golden.shape, tmp_path) is off[0]  # no golden values: rank 0's


def test_a_golden_with_a_leading_one_gathers_rank_shapes_without_it(tmp_path) -> None:
    # an ATB rank holds [tokens, hidden], the torch golden [1, tokens, hidden]: elements decide
    golden = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    whole = [golden.reshape(4, 4)] * 2
    assert merge_parts(whole, "auto", golden, tmp_path).shape == (4, 4)
    columns = [golden.reshape(4, 4)[:, :2], golden.reshape(4, 4)[:, 2:]]
    np.testing.assert_array_equal(merge_parts(columns, "auto", golden, tmp_path), golden.reshape(4, 4))


def test_partial_sums_no_collective_announced_are_summed_where_that_is_the_golden(tmp_path) -> None:
    # a vocabulary-parallel embedding: each rank looks up its rows, zeros elsewhere; their sum is the lookup
    golden = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    partials = [
        np.array([[1.0, 2.0], [0.0, 0.0]], np.float32),
        np.array([[0.0, 0.0], [3.0, 4.0]], np.float32),
    ]
    np.testing.assert_array_equal(merge_parts(partials, "auto", golden, tmp_path), golden)
    # one rank wrong on a whole tensor: their sum is no closer, and the wrong rank is the one compared
    wrong = [golden.copy(), golden * 1.1]
    assert merge_parts(wrong, "auto", golden, tmp_path) is wrong[1]


def _call(kind: str, inputs, outputs, **keyword) -> Call:
    return Call(
        kind,
        kind,
        "msit-atb",
        keyword=keyword,
        ranks={"input": tuple(inputs), "output": tuple(outputs)},
    )


def test_a_collective_is_held_against_what_every_ranks_input_gives() -> None:
    # by hand: all-reduce sum of [1, 2] and [10, 20] is [11, 22]; rank 1 kept its own input
    x0, x1 = np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)
    good = collective.across_ranks(_call("AllReduceOperation", [x0, x1], [x0 + x1, x0 + x1]))
    assert good.rank in (0, 1) and good.values.tolist() == [11.0, 22.0]
    wrong = collective.across_ranks(_call("AllReduceOperation", [x0, x1], [x0 + x1, x1]))
    assert wrong.rank == 1 and wrong.observed.tolist() == [10.0, 20.0]
    assert "rank 1 of 2" in wrong.notes[0]
    # max by op_param; reduce-scatter: rank r's chunk r; all-gather: the concatenation
    top = collective.across_ranks(_call("AllReduceOperation", [x0, x1], [x1, x1], allReduceType="max"))
    assert top.values.tolist() == [10.0, 20.0]
    scattered = collective.across_ranks(_call("ReduceScatterOperation", [x0, x1], [x0[:1] + x1[:1], x0[1:]]))
    assert (scattered.rank, scattered.values.tolist()) == (1, [22.0])
    gathered = collective.across_ranks(_call("AllGatherOperation", [x0, x1], [np.r_[x0, x1]] * 2))
    assert gathered.values.tolist() == [1.0, 2.0, 10.0, 20.0]


def test_a_collective_reduces_within_its_groups_of_rank_size() -> None:
    # four ranks, rankSize 2: ranks 0-1 and 2-3 each sum their own pair
    xs = [np.full(2, v, np.float32) for v in (1.0, 2.0, 10.0, 20.0)]
    sums = [xs[0] + xs[1]] * 2 + [xs[2] + xs[3]] * 2
    grouped = collective.across_ranks(_call("AllReduceOperation", xs, sums, rankSize=2))
    assert grouped.observed is not None and grouped.observed.tolist() == grouped.values.tolist()
    wrong = collective.across_ranks(_call("AllReduceOperation", xs, [*sums[:3], xs[3]], rankSize=2))
    assert wrong.rank == 3 and wrong.values.tolist() == [30.0, 30.0]


def test_a_collective_takes_msprobes_positional_reduce_op_and_its_process_group() -> None:
    # msprobe records all_reduce(tensor, ReduceOp.MAX) with the op by position, as its value string
    x0, x1 = np.array([1.0, 5.0], np.float32), np.array([3.0, 2.0], np.float32)
    call = _call("Distributed.all_reduce.0.forward", [x0, x1], [np.maximum(x0, x1)] * 2)
    top = collective.across_ranks(replace(call, positional={1: "RedOpType.MAX"}))
    assert top.values.tolist() == [3.0, 5.0]
    xs = [np.full(2, v, np.float32) for v in (1.0, 2.0, 10.0, 20.0)]
    sums = [xs[0] + xs[1]] * 2 + [xs[2] + xs[3]] * 2
    grouped = replace(
        _call("Distributed.all_reduce.0.forward", xs, sums), keyword={"group": ProcessGroup((0, 1))}
    )
    assert collective.across_ranks(grouped).values.tolist() == [3.0, 3.0]
    elsewhere = replace(grouped, keyword={"group": ProcessGroup((0, 2))})
    with pytest.raises(ReplayImpossible, match=r"process group holds ranks \[0, 2\] of 4"):
        collective.across_ranks(elsewhere)


def test_a_collective_read_on_one_rank_says_how_to_gather() -> None:
    x = np.ones(2, np.float32)
    with pytest.raises(ReplayImpossible, match="reads one rank's"):
        collective.across_ranks(_call("AllReduceOperation", [x], [x]))


def test_what_only_one_rank_ran_is_taken_whole_from_it(ranks_demo, tmp_path) -> None:
    """An expert only rank 1 owns: its operation is in rank 1's folders only. The gathered test holds
    it, read from rank 1 alone, placed in the tree where rank 1 ran it."""
    import shutil

    from tui_acc.dumps import open_dump
    from tui_acc.rank_merging import gathered as _gathered

    run = tmp_path / "run"
    shutil.copytree(ranks_demo.out / "test", run)
    (rank1,) = (run / "msit_dump_20250101_000000" / "tensors").glob("1_*")
    layer = rank1 / "0" / "1_LlamaLayer"
    shutil.copytree(layer / "7_LinearOperation", layer / "10_LinearOperation")
    first = open_dump(run, rank=None)
    gathered = _gathered(run, first, None, False, unasked=False)
    name = "1_LlamaLayer/10_LinearOperation"
    refs = gathered.tokens[0][name]
    assert refs and all(not ref.parts and rank1 in ref.path.parents for ref in refs)
    assert gathered.tree.nodes["1_LlamaLayer"].children[-1] == name
    assert name not in gathered.tokens[1]  # only where it ran


def test_one_name_that_is_another_call_on_another_rank_is_never_merged() -> None:
    from types import SimpleNamespace

    from tui_acc.dumps.gather import _another_call
    from tui_acc.dumps.model import Node, NodeTree

    def ranks_tree(parent: str) -> SimpleNamespace:
        nodes = {
            "root": Node("root", "M", None, 0, [parent]),
            parent: Node(parent, "Expert", "root", 1, ["Functional.linear.40.forward"]),
            "Functional.linear.40.forward": Node("Functional.linear.40.forward", "linear", parent, 2),
        }
        return SimpleNamespace(tree=NodeTree("root", nodes))

    same = [ranks_tree("experts.1"), ranks_tree("experts.1")]
    assert _another_call(same, "Functional.linear.40.forward") is None
    apart = [ranks_tree("experts.1"), ranks_tree("experts.5")]
    assert (
        _another_call(apart, "Functional.linear.40.forward")
        == "rank 1 ran it in experts.5, rank 0 in experts.1"
    )
