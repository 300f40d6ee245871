"""All-to-all as a collective: each rank's output against what every rank's input sends it.

The expected outputs are torch's own documented examples of ``all_to_all_single`` (its docstring in
torch/distributed/distributed_c10d.py: four ranks, an even and an uneven split), and ATB's
``AllToAllOperation`` shapes (all_to_all_operation.cpp: without transpose the output has the input's
shape, equal blocks; with it a ``[m, n]`` input gives ``[m * rankSize, n / rankSize]``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.unit.ranks_dumps import PID_BASE
from tui_acc.collectives.check import RanksCheck
from tui_acc.collectives.rank_set import open_ranks
from tui_acc.dumps.sharding import kind_of
from tui_acc.dumps.writers.atb_bin import write_bin
from tui_acc.replay.call import Call, ReplayImpossible
from tui_acc.replay.collective import COLUMNS, across_ranks, sends_of, shares

# torch's docstring: input = arange(4) + rank * 4; output on rank r = [r, 4 + r, 8 + r, 12 + r]
EVEN_IN = [np.arange(4) + rank * 4 for rank in range(4)]
EVEN_OUT = [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
# torch's docstring, uneven: each rank's input and its input_splits, and what every rank receives
UNEVEN_IN = [
    [0, 1, 2, 3, 4, 5],
    [10, 11, 12, 13, 14, 15, 16, 17, 18],
    [20, 21, 22, 23, 24],
    [30, 31, 32, 33, 34, 35, 36],
]
UNEVEN_SPLITS = [[2, 2, 1, 1], [3, 2, 2, 2], [2, 1, 1, 1], [2, 2, 2, 1]]
UNEVEN_OUT = [
    [0, 1, 10, 11, 12, 20, 21, 30, 31],
    [2, 3, 13, 14, 22, 32, 33],
    [4, 15, 16, 23, 34, 35],
    [5, 17, 18, 24, 36],
]


def _as_lists(found: list[np.ndarray]) -> list[list[float]]:
    return [share.tolist() for share in found]


def test_an_even_split_gives_each_rank_its_block_from_every_rank() -> None:
    wanted, magnitudes = shares([x.astype(np.float32) for x in EVEN_IN], "all_to_all", "gather")
    assert _as_lists(wanted) == EVEN_OUT
    assert all(not m.any() for m in magnitudes)  # a copy: nothing rounds


def test_msprobes_input_split_sizes_give_the_uneven_split() -> None:
    inputs = [np.array(x, np.float32) for x in UNEVEN_IN]
    sends = [sends_of({"input_split_sizes": s}, x.shape) for s, x in zip(UNEVEN_SPLITS, inputs, strict=True)]
    assert _as_lists(shares(inputs, "all_to_all", "gather", sends)[0]) == UNEVEN_OUT


def test_atbs_send_counts_and_displacements_give_the_same_split() -> None:
    inputs = [np.array(x, np.float32) for x in UNEVEN_IN]
    sends = []
    for splits in UNEVEN_SPLITS:
        starts = np.cumsum([0, *splits])[:-1].tolist()
        sends.append(sends_of({"sendCounts": splits, "sdispls": starts}, (sum(splits),)))
    assert _as_lists(shares(inputs, "all_to_all", "gather", sends)[0]) == UNEVEN_OUT


def test_atbs_transpose_sends_blocks_of_columns() -> None:
    # two ranks, a [2, 4] input each: rank r's output [4, 2] stacks column block r of every rank's input
    inputs = [np.arange(8, dtype=np.float32).reshape(2, 4) + 100 * rank for rank in range(2)]
    assert sends_of({"transpose": True}, (2, 4)) == COLUMNS
    wanted, _ = shares(inputs, "all_to_all", "gather", [COLUMNS, COLUMNS])
    assert wanted[0].tolist() == [0, 1, 4, 5, 100, 101, 104, 105]
    assert wanted[1].tolist() == [2, 3, 6, 7, 102, 103, 106, 107]


@pytest.mark.parametrize(
    "params", [{"input_split_sizes": [1, -1]}, {"sendCounts": [1, 1]}, {"input_split_sizes": "2,2"}]
)
def test_a_split_that_is_not_whole_numbers_is_refused(params) -> None:
    with pytest.raises(ValueError):
        shares(
            [np.zeros(2), np.zeros(2)],
            "all_to_all",
            "gather",
            [sends_of(params, (2,)), None],
        )


def test_the_collective_kinds_know_all_to_all_but_not_a_fused_one() -> None:
    for name in ("AllToAllOperation", "AllToAllVOperation", "Distributed.all_to_all_single.0.forward"):
        assert kind_of(name) == "all_to_all", name
    fused_ops = (
        "NPU.npu_alltoallv_gmm.0.forward",
        "NPU.npu_moe_distribute_dispatch.0.forward",
        "AllToAllVV2Operation",  # its splits are input tensors: not judged with equal ones
        "NPU.npu_mm_all_reduce_base.0.forward",
        "NPU.npu_all_gather_base_mm.0.forward",
        "NPU.npu_mm_reduce_scatter_base.0.forward",
    )
    for fused in fused_ops:
        assert kind_of(fused) is None, fused


def _call(inputs, outputs, params=()) -> Call:
    return Call(
        "Distributed.all_to_all_single.0.forward",
        "all_to_all_single",
        "msprobe",
        ranks={"input": tuple(inputs), "output": tuple(outputs)},
        rank_params=tuple(params),
    )


def test_a_gathered_all_to_all_that_dropped_a_block_on_one_rank_is_named_with_it() -> None:
    inputs = [np.array(x, np.float32) for x in UNEVEN_IN]
    outputs = [np.array(x, np.float32) for x in UNEVEN_OUT]
    params = [{"input_split_sizes": s} for s in UNEVEN_SPLITS]
    clean = across_ranks(_call(inputs, outputs, params))
    np.testing.assert_array_equal(clean.observed, clean.values)
    outputs[2] = outputs[2].copy()
    outputs[2][1] = 0.0  # rank 2 lost an element rank 1 sent it
    wrong = across_ranks(_call(inputs, outputs, params))
    assert wrong.rank == 2 and not np.array_equal(wrong.observed, wrong.values)
    # without the split sizes, the uneven inputs have no equal blocks: refused, not guessed
    with pytest.raises(ReplayImpossible):
        across_ranks(_call(inputs, outputs))


def test_the_ranks_check_finds_the_rank_whose_all_to_all_is_wrong(tmp_path: Path) -> None:
    """An ATB run of four ranks, one AllToAllOperation (equal blocks) per token; rank 3's output at
    token 1 has two blocks swapped: that rank, that token, nothing else."""
    tensors = tmp_path / "msit_dump_20250101_000000" / "tensors"
    rng = np.random.default_rng(0)
    for token in range(2):
        inputs = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(4)]
        for rank in range(4):
            output = np.concatenate([x[rank * 2 : rank * 2 + 2] for x in inputs])
            if (token, rank) == (1, 3):
                output = np.concatenate([output[2:4], output[0:2], output[4:]])
            node = tensors / f"{rank}_{PID_BASE + rank}" / str(token) / "1_MoeLayer" / "0_AllToAllOperation"
            write_bin(node / "before" / "intensor0.bin", inputs[rank])
            write_bin(node / "after" / "outtensor0.bin", output)
            (node / "op_param.json").write_text(json.dumps({"rank": rank, "rankSize": 4}), encoding="utf-8")
    check = RanksCheck(open_ranks(tensors))
    rows = check.all_rows()
    assert {row["kind"] for row in rows} == {"all_to_all"} and len(rows) == 8
    failing = [(row["token"], row["rank"]) for row in rows if row["passed"] is False]
    assert failing == [(1, 3)]
    assert all(row["passed"] for row in rows if (row["token"], row["rank"]) != (1, 3))
