"""Multi-rank dumps: choosing a rank, rank to rank, and gathering ranks for a single-device golden."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.tensors import load_tensor
from tui_acc.dumps.torchfile.arrays import to_torch
from tui_acc.dumps.writers.atb_bin import write_bin

WEIGHTS = (0.25, 0.75)  # how the two ranks split a row-parallel matmul's partial sums


def _two_ranks(plain: Path, out: Path) -> Path:
    """The demo's ATB dump as tensor parallel across 2 ranks.

    q_proj is column-parallel (each rank holds half its output columns); o_proj is row-parallel
    (each rank holds a partial sum) and is followed by an AllReduceOperation that sums them.
    """
    root = out / plain.name
    source = plain / "tensors" / "0_4242"
    for rank, pid in enumerate((4242, 4243)):
        device = root / "tensors" / f"{rank}_{pid}"
        shutil.copytree(source, device)
        for attention in device.glob("*/*_LlamaLayer/1_Attention"):
            q = attention / "0_LinearOperation" / "after" / "outtensor0.bin"
            full_q = to_torch(load_tensor(q, ANYWHERE)).clone()
            half = full_q.shape[-1] // 2
            write_bin(q, full_q[..., rank * half : (rank + 1) * half].contiguous())
            o = attention / "3_LinearOperation" / "after" / "outtensor0.bin"
            full_o = to_torch(load_tensor(o, ANYWHERE)).clone()
            write_bin(o, (full_o.double() * WEIGHTS[rank]).to(full_o.dtype))
            reduce = attention / "4_AllReduceOperation"
            write_bin(reduce / "before" / "intensor0.bin", load_tensor(o, ANYWHERE))
            write_bin(reduce / "after" / "outtensor0.bin", full_o)
        shutil.copytree(plain / "model" / "4242", root / "model" / str(pid))
    return root


@pytest.fixture(scope="module")
def two_ranks(atb_pair, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    golden, plain, _ = atb_pair
    return golden, plain, _two_ranks(plain, tmp_path_factory.mktemp("ranks"))


def _cosines(cmp, token: int) -> dict[str, float]:
    return {r["golden_node"]: r["cosine"] for r in cmp.verdicts.token(token).rows}


def test_ranks_are_listed_and_chosen(two_ranks) -> None:
    _, _, ranks = two_ranks
    first = open_dump(ranks)
    assert first.ranks == ["0_4242", "1_4243"] and first.rank == 0
    assert open_dump(ranks, rank=1).data_dir.name == "1_4243"
    with pytest.raises(DumpError, match="--rank 2 is out of range"):
        open_dump(ranks, rank=2)


def test_one_rank_against_the_golden_shows_the_split(two_ranks) -> None:
    golden, _, ranks = two_ranks
    cmp = open_comparison(golden, ranks, CompareOptions(rank=1))
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(1).rows}
    assert "element counts differ" in rows["root.model.layers.0.self_attn.q_proj"]["error"]


def test_gathering_rebuilds_the_single_device_tensors(two_ranks) -> None:
    golden, plain, ranks = two_ranks
    reference = _cosines(open_comparison(golden, plain), 2)
    cmp = open_comparison(golden, ranks, CompareOptions(gather=True))
    assert cmp.test.rank is None and any("gathered 2 ranks" in n for n in cmp.test.notes)
    gathered = _cosines(cmp, 2)
    q, o = "root.model.layers.1.self_attn.q_proj", "root.model.layers.1.self_attn.o_proj"
    assert gathered[q] == reference[q]  # concatenated: bit-identical to the unsplit run
    assert gathered[o] == pytest.approx(reference[o], abs=1e-4)  # summed partials (bf16 each)
    merges = {p.test_node: p.test.merge for n in cmp.pairing.node_pairs(2) for p in n.tensors}
    assert merges["2_LlamaLayer/1_Attention/3_LinearOperation"] == "sum"  # feeds the all-reduce
    assert merges["2_LlamaLayer/1_Attention/0_LinearOperation"] == "auto"
    assert cmp.engine.first_failing_token() == 3
    op = cmp.verdicts.culprit(3)
    assert op is not None and op["golden_node"] == "root.model.layers.2.mlp.down_proj"


def test_gather_and_rank_are_reported(two_ranks, capsys) -> None:
    golden, _, ranks = two_ranks
    assert main(["report", str(golden), str(ranks), "--gather", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_failing_op"]["test"] == "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"
    assert main(["report", str(golden), str(golden), "--gather"]) == 2
    assert "--gather needs a dump with several ranks" in capsys.readouterr().err


def test_rank_to_rank(two_ranks) -> None:
    _, _, ranks = two_ranks
    cmp = open_comparison(ranks, ranks, CompareOptions(rank=1))
    assert cmp.golden.rank == cmp.test.rank == 1
    assert cmp.engine.first_failing_token() is None
    with pytest.raises(DumpError, match="--gather merges the test's ranks for a single-device golden"):
        open_comparison(ranks, ranks, CompareOptions(gather=True))


def test_all_reduce_inputs_sum_to_its_output(two_ranks) -> None:
    """The Ascend tools' all-reduce check: the sum of the ranks' inputs is each rank's output."""
    _, _, ranks = two_ranks
    inputs = [
        to_torch(load_tensor(p, ANYWHERE)).double()
        for p in sorted(
            ranks.glob("tensors/*/2/1_LlamaLayer/1_Attention/4_AllReduceOperation/before/intensor0.bin")
        )
    ]
    output = to_torch(
        load_tensor(
            next(
                ranks.glob("tensors/0_*/2/1_LlamaLayer/1_Attention/4_AllReduceOperation/after/outtensor0.bin")
            ),
            ANYWHERE,
        )
    )
    assert len(inputs) == 2
    assert torch.allclose(sum(inputs), output.double(), rtol=1e-2, atol=1e-3)


def test_summed_bf16_partials_stay_bf16() -> None:
    # each rank's partial sum is bf16; their all-reduce is bf16 too: judged at bf16's rounding, not
    # as the float64 the sum is taken in (ml_dtypes' bf16 is no numpy float kind)
    from pathlib import Path

    import ml_dtypes
    import numpy as np

    from tui_acc.dumps.gather import SUM, merge_parts

    parts = [np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16), np.array([0.5, 0.25], dtype=ml_dtypes.bfloat16)]
    merged = merge_parts(parts, SUM, [2], Path("outtensor0.bin"))
    assert merged.dtype == np.dtype(ml_dtypes.bfloat16)
    assert merged.astype(np.float32).tolist() == [1.5, 2.25]


def test_a_sharded_test_is_gathered_unasked_and_a_sharded_golden_is_compared_rank_to_rank(two_ranks) -> None:
    golden, _, ranks = two_ranks
    gathered = open_comparison(golden, ranks, CompareOptions(cache=False))
    assert gathered.test.rank is None and len(gathered.test.ranks) == 2
    both = open_comparison(ranks, ranks, CompareOptions(cache=False))  # both sides have ranks: no gathering
    assert (both.golden.rank, both.test.rank) == (0, 0)


def test_gather_with_a_rank_picked_is_refused_by_name(two_ranks) -> None:
    golden, _, ranks = two_ranks
    with pytest.raises(DumpError, match=r"--gather merges every rank and --rank 1 picks one"):
        open_comparison(golden, ranks, CompareOptions(gather=True, rank=1))


def test_ranks_without_a_collective_or_parallel_layer_are_not_gathered_unasked(two_ranks, tmp_path) -> None:
    # two ranks of one model with nothing that splits it (no all-reduce): data-parallel, or two
    # processes on one device; rank 0 is compared, and the note says how to gather
    golden, plain, _ = two_ranks
    root = tmp_path / plain.name
    for rank, pid in enumerate((4242, 4243)):
        shutil.copytree(plain / "tensors" / "0_4242", root / "tensors" / f"{rank}_{pid}")
        shutil.copytree(plain / "model" / "4242", root / "model" / str(pid))
    cmp = open_comparison(golden, root, CompareOptions(cache=False))
    assert cmp.test.rank == 0
    assert any("--gather merges" in note for note in cmp.test.notes)
