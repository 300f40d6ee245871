"""A tensor-parallel test against a one-device golden, in msprobe's layout, made by the real msprobe
(tests/data/tp, scripts/make_tp_msprobe_fixtures.py): a tiny Llama on 2 gloo ranks in bfloat16, q/k/v
and gate/up column-parallel, o_proj and down_proj row-parallel with ``torch.distributed.all_reduce``
inside their forward (``step0/rank0/``, ``step0/rank1/``, level mix), its golden the same weights on
one process in float32. The ranks are gathered without asking; in ``allreduce/`` rank 1's all-reduce
after down_proj in layer 1 at token 2 left its peer's contribution out, and that all-reduce is the
one local operator, named with its rank.

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
