"""A tensor-parallel test against a one-device golden, in msprobe's layout, made by the real msprobe
(tests/data/tp, scripts/make_tp_msprobe_fixtures.py): a tiny Llama on 2 gloo ranks in bfloat16, q/k/v
and gate/up column-parallel, o_proj and down_proj row-parallel with ``torch.distributed.all_reduce``
inside their forward (``step0/rank0/``, ``step0/rank1/``, level mix), its golden the same weights on
one process in float32. The ranks are gathered without asking; in ``allreduce/`` rank 1's all-reduce
after down_proj in layer 1 at token 2 left its peer's contribution out, and that all-reduce is the
one local operator, named with its rank; in ``column/`` rank 1's shard of up_proj (column-parallel)
in layer 0 at token 1 computed with its weight scaled by 1.05, and that projection is the one local
operator once the ranks' output columns are concatenated.

Where the fault lies is the generator's record (case.json: the token, the rank, msprobe's name of the
faulty call) and msprobe's own call tree (construct.json: the module that made the call), not
tui-acc's reading of them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.unit.ranks_dumps import case_of, rank_folder
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import load_tensor
from tui_acc.reports.pair import build_report

NAME = "llama-tp2-msprobe"


@pytest.fixture(scope="module")
def tp(tp_case) -> Path:
    return tp_case(NAME)


def _report(folder: Path, case: str):
    return build_report(
        open_comparison(folder / "golden", folder / case, CompareOptions(cache=False)), all_tokens=True
    )


def test_msprobe_wrote_a_folder_per_rank_and_the_faulty_all_reduce_as_it_went(tp) -> None:
    """The fixture itself: msprobe's record of rank 1's faulty call holds the wrong output (its own
    input back), where rank 0's holds the sum of both ranks' inputs."""
    fault = case_of(tp)["fault"]
    values = {}
    for rank in (0, 1):
        folder = rank_folder(tp, "allreduce", rank)
        entry = json.loads((folder / "dump.json").read_text(encoding="utf-8"))["data"][fault["record"]]
        policy = LoadPolicy.inside(folder)
        values[rank] = [
            load_tensor(folder / "dump_tensor_data" / slot["data_name"], policy).astype(np.float64)
            for slot in (entry["input_args"][0], entry["output"][0])
        ]
    (in0, out0), (in1, out1) = values[0], values[1]
    assert np.array_equal(out1, in1)  # rank 1: its own partial sum back
    assert np.allclose(out0, in0 + in1, rtol=2**-8, atol=0) and not np.allclose(out0, out1)


def test_a_wrong_all_reduce_on_one_rank_is_the_one_local_operator(tp) -> None:
    case = case_of(tp)
    fault = case["fault"]
    report = _report(tp, "allreduce")
    body, text = report.body(), report.text()
    assert "tensor-parallel, 2 ranks, gathered" in text.splitlines()[2]
    # the module msprobe recorded the faulty call under, on the faulty rank
    construct = rank_folder(tp, "allreduce", fault["rank"]) / "construct.json"
    module = json.loads(construct.read_text(encoding="utf-8"))[fault["record"]]
    assert module == f"Module.{fault['module']}.Linear.forward.{fault['token']}"
    culprit = body["first_failing_op"]
    assert culprit is not None
    assert (culprit["token"], culprit["golden"], culprit["test"]) == (fault["token"], module, module)
    assert (culprit["label"], culprit["rule"], culprit["operator"]) == ("local", "replay", fault["record"])
    assert f"{fault['record']}, on rank {fault['rank']}," in culprit["reason"]
    assert body["counts"]["local"] == 1
    assert body["errors"] == [] and "element counts differ" not in text


def test_a_clean_tensor_parallel_run_labels_nothing_local(tp) -> None:
    """Every row-parallel projection's partial sums are summed before they are compared: no
    projection, and no all-reduce, is local."""
    comparison = open_comparison(tp / "golden", tp / "clean", CompareOptions(cache=False))
    report = build_report(comparison, all_tokens=True)
    body, text = report.body(), report.text()
    assert "tensor-parallel, 2 ranks, gathered" in text.splitlines()[2]
    assert body["first_failing_token"] is None and body["first_failing_op"] is None
    assert not [f for f in body["failing"] if f.get("label") == "local"]
    local = [
        (token, row["golden_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]
    assert comparison.pairing.tokens == [0, 1, 2, 3] and local == []
    assert body["errors"] == []


def _column_records(construct: Path, module: str) -> set[str]:
    """The column fault's projection as msprobe's call tree names it: its module's record and the
    ``Functional.linear`` that construct.json puts under it."""
    parents = json.loads(construct.read_text(encoding="utf-8"))
    linears = [k for k, parent in parents.items() if parent == module and k.startswith("Functional.linear.")]
    assert len(linears) == 1, linears
    return {module, linears[0]}


def _record(folder: Path, name: str) -> tuple[np.ndarray, ...]:
    """A record's tensors as float64: its input.0, its output.0, then its other inputs (a linear's
    weight)."""
    entry = json.loads((folder / "dump.json").read_text(encoding="utf-8"))["data"][name]
    policy = LoadPolicy.inside(folder)
    slots = [entry["input_args"][0], entry["output"][0], *entry["input_args"][1:]]
    return tuple(
        load_tensor(folder / "dump_tensor_data" / slot["data_name"], policy).astype(np.float64)
        for slot in slots
    )


def test_msprobe_recorded_the_wrong_column_shard_as_it_went(tp) -> None:
    """The fixture itself: on rank 1 msprobe's records of the faulty up_proj (its linear and its
    module) take the clean run's input and give the clean run's output times the scale, to bfloat16
    rounding; rank 0's are the clean run's."""
    fault = case_of(tp)["column_fault"]
    module = f"Module.{fault['module']}.Linear.forward.{fault['token']}"
    names = _column_records(rank_folder(tp, "column", fault["rank"]) / "construct.json", module)
    assert names == {fault["module_record"], fault["record"]}
    x, clean, weight = _record(rank_folder(tp, "clean", fault["rank"]), fault["record"])
    # bfloat16 rounding: each output's (2^-9 of |x|·|w| at most, the clean one's and the wrong one's)
    # and the scaled weight's (2^-9 of each product) keep the wrong output within 3 * 2^-9 of |x|·|w|
    # of the clean one scaled; the bound allows 2^-7, and the clean output is farther than that somewhere
    bound = 2**-7 * fault["scale"] * (np.abs(x) @ np.abs(weight).T)
    for name in sorted(names):
        wrong_in, wrong_out = _record(rank_folder(tp, "column", fault["rank"]), name)[:2]
        clean_in, clean_out = _record(rank_folder(tp, "clean", fault["rank"]), name)[:2]
        assert np.array_equal(wrong_in, clean_in) and np.array_equal(clean_out, clean)
        assert not np.array_equal(wrong_out, clean_out)
        assert (np.abs(wrong_out - fault["scale"] * clean_out) <= bound).all()
        assert (np.abs(wrong_out - clean_out) > bound).any()  # more than a rounding apart
        peer = [_record(rank_folder(tp, case, 1 - fault["rank"]), name)[:2] for case in ("clean", "column")]
        assert all(np.array_equal(a, b) for a, b in zip(*peer, strict=True))


def test_a_wrong_shard_of_a_column_parallel_linear_is_the_one_local_operator(tp) -> None:
    """Rank 1's wrong columns of up_proj, concatenated with rank 0's right ones, make the gathered
    linear the one local operator over every token, at the fault's token."""
    fault = case_of(tp)["column_fault"]
    module = f"Module.{fault['module']}.Linear.forward.{fault['token']}"
    (golden_construct,) = (tp / "golden").glob("step*/proc*/construct.json")
    golden_names = _column_records(golden_construct, module)
    test_names = _column_records(rank_folder(tp, "column", fault["rank"]) / "construct.json", module)
    comparison = open_comparison(tp / "golden", tp / "column", CompareOptions(cache=False))
    report = build_report(comparison, all_tokens=True)
    body, text = report.body(), report.text()
    assert "tensor-parallel, 2 ranks, gathered" in text.splitlines()[2]
    local = [
        (token, row["golden_node"], row["test_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]
    assert len(local) == 1, local
    token, golden, test = local[0]
    assert token == fault["token"] and golden in golden_names and test in test_names
    culprit = body["first_failing_op"]
    assert culprit is not None and culprit["label"] == "local"
    assert (culprit["token"], culprit["golden"], culprit["test"]) == (token, golden, test)
    assert culprit["inputs_passed"] is True
    assert body["counts"]["local"] == 1
    assert body["errors"] == [] and "element counts differ" not in text


def test_a_rank_folder_msprobe_does_not_name_is_named_and_not_gathered(tp, tmp_path: Path) -> None:
    """rank 1's folder copied beside it as rank01 was gathered as a third rank. msprobe writes
    rank{n}: rank01 is named and not read; the two ranks are gathered and the fault found as before."""
    import shutil

    case = case_of(tp)
    fault = case["fault"]
    copy = tmp_path / "tp"
    for side in ("golden", "allreduce"):
        shutil.copytree(tp / side, copy / side)
    rank1 = rank_folder(copy, "allreduce", 1)
    odd = rank1.parent / "rank01"
    shutil.copytree(rank1, odd)
    report = _report(copy, "allreduce")
    body, text = report.body(), report.text()
    assert "tensor-parallel, 2 ranks, gathered" in text.splitlines()[2]
    assert any(e["file"] == str(odd) and "without leading zeros" in e["message"] for e in body["errors"])
    culprit = body["first_failing_op"]
    assert culprit is not None and (culprit["token"], culprit["operator"]) == (
        fault["token"],
        fault["record"],
    )


def test_a_rank_whose_dump_json_is_another_ranks_is_named(tp, tmp_path: Path) -> None:
    """rank 1's dump.json replaced by rank 0's: its files are still rank 1's own, but their records
    are not. Each rank's file of a gathered tensor is checked against its own rank's record (the Max
    and Min msprobe wrote beside it), so rank 1's shards are named, not compared under rank 0's
    record without a word."""
    import shutil

    copy = tmp_path / "tp"
    for side in ("golden", "allreduce"):
        shutil.copytree(tp / side, copy / side)
    rank0, rank1 = (rank_folder(copy, "allreduce", r) for r in (0, 1))
    shutil.copyfile(rank0 / "dump.json", rank1 / "dump.json")
    body = _report(copy, "allreduce").body()
    named = [e["message"] for e in body["errors"] if "but the dump's own record says" in e["message"]]
    assert named and all(m.startswith(f"{rank1}/") for m in named)
