"""The check across ranks: the rounding bound, and each collective's rows on generated msit ATB
runs, the real msprobe runs (tests/data/ranks) and the demo's tensor-parallel run."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tests.unit.ranks_dumps import BF16, PID_BASE, bf16_sum, op_name, write_atb_run
from tui_acc.collectives.bound import beyond_bound, element_bound, gamma
from tui_acc.collectives.check import RanksCheck
from tui_acc.collectives.rank_set import kind_of, open_ranks
from tui_acc.dumps import DumpError
from tui_acc.reports.collectives import build_report


def _first_bad(check: RanksCheck) -> dict[str, object] | None:
    """The first disagreeing (token, op, rank) as report --ranks names it."""
    first: dict[str, object] | None = build_report(check).first_bad
    return first


# --- the bound ------------------------------------------------------------------------------------


def _judge(inputs: list[np.ndarray], output: np.ndarray, margin: float = 2.0) -> int:
    wide = [x.astype(np.float64).reshape(-1) for x in inputs]
    golden = np.sum(wide, axis=0)
    bound = element_bound("sum", "bfloat16", len(inputs), np.sum(np.abs(wide), axis=0), margin)
    return beyond_bound(golden, output.astype(np.float64).reshape(-1), bound)[0]


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("order", ["sequential", "pairwise", "once"])
def test_a_bf16_sum_in_any_order_is_within_the_bound(ranks: int, order: str) -> None:
    rng = np.random.default_rng(ranks)
    # values of mixed signs and magnitudes: cancellation is where a relative error of the sum is large
    inputs = [
        (rng.standard_normal(4096) * 10.0 ** rng.integers(-3, 3, 4096)).astype(BF16) for _ in range(ranks)
    ]
    for start in range(ranks):  # every rank of a ring starts elsewhere
        assert _judge(inputs, bf16_sum(inputs, order, start), margin=1.0) == 0


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_a_missing_contribution_is_beyond_it(ranks: int) -> None:
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(1024).astype(BF16) for _ in range(ranks)]
    missing = bf16_sum(inputs[:-1], "sequential")
    wide = [x.astype(np.float64) for x in inputs]
    bound = element_bound("sum", "bfloat16", ranks, np.sum(np.abs(wide), axis=0), 2.0)
    # the rounding of the other N-1 values moves an element by at most its bound: every element whose
    # missing value is over twice the bound lies beyond it (with N = 8 in bf16, gamma_7 is 2.8%)
    clear = int(np.count_nonzero(np.abs(wide[-1]) > 2 * bound))
    assert _judge(inputs, missing) >= clear > len(missing) // 4


def test_gamma_is_the_rounding_bound_of_k_operations() -> None:
    u = 2.0**-8
    assert gamma(1, u) == pytest.approx(u / (1 - u))
    assert gamma(0, u) == 0 and gamma(256, u) == float("inf")


def test_nan_agrees_only_with_nan_and_a_copy_must_be_exact() -> None:
    golden = np.array([1.0, np.nan, 2.0, np.inf])
    same, _ = beyond_bound(golden, golden.copy(), np.zeros(4))
    assert same == 0
    changed, _ = beyond_bound(golden, np.array([1.0, 0.0, np.nan, np.inf]), np.ones(4))
    assert changed == 2


def test_collectives_are_recognised_by_type() -> None:
    assert (
        kind_of("AllReduceOperation")
        == kind_of("AllReduceHcclRunner")
        == kind_of("all_reduce")
        == "all_reduce"
    )
    assert kind_of("reduce_scatter_tensor") == kind_of("_reduce_scatter_base") == "reduce_scatter"
    assert kind_of("all_gather_into_tensor") == kind_of("AllGatherOperation") == "all_gather"
    assert kind_of("LinearParallelOperation") is None and kind_of("LinearOperation") is None


# --- generated msit ATB runs ----------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_the_faulty_all_reduce_is_found_at_its_token_op_and_rank(tmp_path: Path, world: int) -> None:
    tensors = write_atb_run(tmp_path, world, fault=(1, 1, world - 1))
    check = RanksCheck(open_ranks(str(tensors)))
    assert _first_bad(check) == {"token": 1, "op": op_name(1), "rank": world - 1}
    rows = check.all_rows()
    assert len(rows) == 3 * 2 * world
    (bad,) = [r for r in rows if r["passed"] is not True]
    assert bad["dtype"] == "bfloat16" and bad["beyond_bound"] and bad["cosine_similarity"] < 0.99


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("order", ["sequential", "pairwise"])
def test_a_clean_run_summed_in_other_orders_raises_nothing(tmp_path: Path, world: int, order: str) -> None:
    tensors = write_atb_run(tmp_path, world, order=order)
    outputs = [p.read_bytes() for p in sorted(tensors.rglob("1_AllReduceOperation/after/outtensor0.bin"))]
    if world > 2:  # two values add the same either way round; more do not
        assert len(set(outputs)) > len(outputs) // world  # the ranks' own orders gave other bits
    check = RanksCheck(open_ranks(str(tensors.parent.parent)))  # the dump root above tensors/
    assert _first_bad(check) is None
    rows = check.all_rows()
    assert all(r["passed"] is True and r["error"] is None for r in rows)
    assert max(r["worst_ratio"] or 0 for r in rows) > 0  # rounded: not the exact sums


def test_a_rank_lacking_an_op_or_a_token_is_named(tmp_path: Path) -> None:
    skip = frozenset({(1, 0, 1), (0, 2, None)})  # rank 1 lacks layer 1 at token 0; rank 0 lacks token 2
    tensors = write_atb_run(tmp_path, 2, skip=skip)
    check = RanksCheck(open_ranks(str(tensors)))
    rows = {(r["token"], r["op"], r["rank"]): r for r in check.all_rows()}
    lacking_op = rows[(0, op_name(1), 1)]["error"]
    assert (
        lacking_op is not None
        and f"{PID_BASE + 1}" in lacking_op
        and "no such operator at token 0" in lacking_op
    )
    assert "no golden" in (rows[(0, op_name(1), 0)]["error"] or "")
    assert "has no token 2" in (rows[(2, op_name(0), 0)]["error"] or "")
    assert rows[(0, op_name(0), 0)]["passed"] is True and rows[(1, op_name(1), 1)]["passed"] is True
    assert _first_bad(check) is None  # nothing disagrees; what could not be judged says why


def test_a_damaged_file_is_named_and_the_rest_is_checked(tmp_path: Path) -> None:
    tensors = write_atb_run(tmp_path, 2)
    damaged = tensors / f"1_{PID_BASE + 1}" / "1" / op_name(0) / "after" / "outtensor0.bin"
    damaged.write_bytes(damaged.read_bytes()[:-10])
    rows = RanksCheck(open_ranks(str(tensors))).all_rows()
    (bad,) = [r for r in rows if r["error"]]
    assert (bad["token"], bad["rank"]) == (1, 1) and str(damaged) in (bad["error"] or "")
    assert sum(r["passed"] is True for r in rows) == len(rows) - 1


def test_atb_groups_of_rank_size_are_summed_alone(tmp_path: Path) -> None:
    tensors = write_atb_run(tmp_path, 4, group=2, fault=(2, 0, 2))
    check = RanksCheck(open_ranks(str(tensors)))
    rows = check.all_rows()
    assert [(r["token"], r["op"], r["rank"]) for r in rows if r["passed"] is not True] == [(2, op_name(0), 2)]


def test_a_max_reduction_recorded_in_op_param_is_used(tmp_path: Path) -> None:
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.dumps.writers.atb_bin import write_bin

    tensors = write_atb_run(tmp_path, 2, tokens=1, layers=1)
    folders = [tensors / f"{rank}_{PID_BASE + rank}" / "0" / op_name(0) for rank in range(2)]
    for folder in folders:
        (folder / "op_param.json").write_text(json.dumps({"allReduceType": "max"}), encoding="utf-8")
    check = RanksCheck(open_ranks(str(tensors)))
    assert all(r["passed"] is False for r in check.rows(check.collectives(0)[0]))  # sums, not a max
    values = [load_tensor(f / "before" / "intensor0.bin", ANYWHERE) for f in folders]
    peak = np.maximum(values[0].astype(np.float64), values[1].astype(np.float64)).astype(BF16)
    for folder in folders:
        write_bin(folder / "after" / "outtensor0.bin", peak)
    check = RanksCheck(open_ranks(str(tensors)))
    rows = check.rows(check.collectives(0)[0])
    assert [(r["reduction"], r["passed"]) for r in rows] == [("max", True), ("max", True)]


def test_one_rank_is_refused_with_the_folder_named(tmp_path: Path) -> None:
    tensors = write_atb_run(tmp_path, 2, tokens=1)
    with pytest.raises(DumpError, match="holds one rank"):
        open_ranks(str(tensors / f"0_{PID_BASE}"))


# --- real msprobe runs (scripts/make_ranks_fixtures.py) ---------------------------------------------


@pytest.mark.parametrize("name", ["msprobe-tp2", "msprobe-tp4", "msprobe-tp2x2"])
def test_real_msprobe_runs_lead_to_the_faulty_all_reduce(ranks_case, name: str) -> None:
    """tp2x2: four ranks in two groups of two; each call's group (recorded by msprobe) is summed alone,
    and summing all four would fail every row."""
    case = ranks_case(name)
    recorded = json.loads((case / "case.json").read_text())
    fault, world = recorded["fault"], recorded["world"]
    check = RanksCheck(open_ranks(str(case / "step0")))
    assert check.ranks.names == [f"rank{r}" for r in range(world)]
    rows = check.all_rows()
    bad = [r for r in rows if r["passed"] is not True]
    assert [(r["token"], r["op"], r["rank"]) for r in bad] == [(fault["token"], fault["op"], fault["rank"])]
    kinds = {(r["kind"], r["reduction"]) for r in rows}
    # the sums, the max of a statistic (its ReduceOp read from dump.json), reduce-scatter, all-gather
    assert kinds == {
        ("all_reduce", "sum"),
        ("all_reduce", "max"),
        ("reduce_scatter", "sum"),
        ("all_gather", "gather"),
    }
    # the dump_path above step0 is taken as well
    assert _first_bad(RanksCheck(open_ranks(str(case)))) == _first_bad(check)


def test_msprobe_input_and_output_are_the_in_place_argument(ranks_case) -> None:
    """msprobe records all_reduce(tensor) as input.0 (before the call) and output.0 (after it)."""
    case = ranks_case("msprobe-tp2")
    dump = json.loads((case / "step0" / "rank0" / "dump.json").read_text())
    record = dump["data"]["Distributed.all_reduce.0.forward"]
    assert record["input_args"][0]["data_name"].endswith("input.0.pt")
    assert record["output"][0]["data_name"].endswith("output.0.pt")


# --- the demo's tensor-parallel run -----------------------------------------------------------------


def test_the_demo_run_holds_exactly_its_fault(ranks_demo) -> None:
    check = RanksCheck(open_ranks(str(ranks_demo.dump)))
    bad = [r for r in check.all_rows() if r["passed"] is not True]
    assert [(r["token"], r["op"], r["rank"]) for r in bad] == [
        (ranks_demo.fault.token, ranks_demo.fault_op, ranks_demo.fault.rank)
    ]
    assert check.ranks.format == "msit-atb" and len(check.ranks.names) == 2


def test_ml_dtypes_rounds_as_the_fixture_assumes() -> None:
    assert np.array(1 + 2.0**-8, dtype=np.float64).astype(ml_dtypes.bfloat16) == 1.0  # ties to even


def test_an_average_is_the_sum_divided_by_the_ranks(tmp_path: Path) -> None:
    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import load_tensor
    from tui_acc.dumps.writers.atb_bin import write_bin

    tensors = write_atb_run(tmp_path, 4, tokens=1, layers=1)
    folders = [tensors / f"{rank}_{PID_BASE + rank}" / "0" / op_name(0) for rank in range(4)]
    values = [load_tensor(f / "before" / "intensor0.bin", ANYWHERE).astype(np.float64) for f in folders]
    mean = (np.sum(values, axis=0) / 4).astype(BF16)
    for folder in folders:
        (folder / "op_param.json").write_text(json.dumps({"allReduceType": "avg"}), encoding="utf-8")
        write_bin(folder / "after" / "outtensor0.bin", mean)
    check = RanksCheck(open_ranks(str(tensors)))
    rows = check.rows(check.collectives(0)[0])
    assert [(r["reduction"], r["passed"]) for r in rows] == [("avg", True)] * 4


def test_an_atb_input_dumped_again_after_the_run_is_not_taken_for_it(tmp_path: Path) -> None:
    """msit's -time 2 dumps intensors before and after the run (intensor0.after): the golden is built
    from the ones before."""
    tensors = write_atb_run(tmp_path, 2, tokens=1, layers=1)
    for rank in range(2):
        folder = tensors / f"{rank}_{PID_BASE + rank}" / "0" / op_name(0)
        after = folder / "after" / "intensor0.bin"
        after.write_bytes((folder / "after" / "outtensor0.bin").read_bytes())  # the buffer after: the sum
    check = RanksCheck(open_ranks(str(tensors)))
    assert [r["passed"] for r in check.rows(check.collectives(0)[0])] == [True, True]
