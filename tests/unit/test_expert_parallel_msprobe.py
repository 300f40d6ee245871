"""An expert-parallel MoE test against a one-device golden, in msprobe's layout, made by the real
msprobe (tests/data/tp, scripts/make_ep_msprobe_fixtures.py): a tiny MoE model of Llama's shape (a
router ``gate``, top 2 of 4 experts, each expert its own module ``experts.{e}``) on 2 gloo ranks in
bfloat16, attention, norms, router, embedding and lm_head replicated, rank r holding experts 2r and
2r+1 under their global ids and ``torch.distributed.all_reduce`` of the ranks' partial sums inside
the MoE block (``step0/rank0/``, ``step0/rank1/``, level mix); its golden the same weights, every
expert, on one process in float32. In ``expert/`` expert 3 (rank 1) in layer 1 at token 2 computed
its down_proj with a wrong weight. Such ranks are not merged unasked (one name is another call on
each rank); naming that expert is left for the merge that pairs experts by id.

Where the fault lies is the generator's record (case.json: token, rank, layer, expert, msprobe's
module record) and msprobe's own dump, not tui-acc's reading of them."""

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

NAME = "moe-ep2-msprobe"


@pytest.fixture(scope="module")
def ep(tp_case) -> Path:
    return tp_case(NAME)


def _records(folder: Path) -> dict:
    return json.loads((folder / "dump.json").read_text(encoding="utf-8"))["data"]


def test_each_rank_records_only_its_own_experts_under_their_global_ids(ep) -> None:
    """msprobe names a rank's experts by their module path (``experts.2`` on rank 1, numbered per
    module), and records the all-reduce of the partial sums under the MoE block."""
    owned = {0: {"0", "1"}, 1: {"2", "3"}}
    for rank in (0, 1):
        folder = rank_folder(ep, "clean", rank)
        experts = {name.split(".")[6] for name in _records(folder) if ".mlp.experts." in name}
        assert experts == owned[rank]
        construct = json.loads((folder / "construct.json").read_text(encoding="utf-8"))
        parents = {v for k, v in construct.items() if k.startswith("Distributed.all_reduce.")}
        assert parents and all(".mlp.SparseMoeBlock.forward." in p for p in parents)


def test_msprobe_recorded_the_faulty_expert_as_it_went(ep) -> None:
    """The faulty expert's module record on rank 1: its input the clean run's, its output not."""
    fault = case_of(ep)["fault"]
    values = {}
    for case in ("clean", fault["case"]):
        folder = rank_folder(ep, case, fault["rank"])
        entry = _records(folder)[fault["record"]]
        policy = LoadPolicy.inside(folder)
        values[case] = [
            load_tensor(folder / "dump_tensor_data" / slot["data_name"], policy).astype(np.float64)
            for slot in (entry["input_args"][0], entry["output"][0])
        ]
    (clean_in, clean_out), (wrong_in, wrong_out) = values["clean"], values[fault["case"]]
    assert np.array_equal(clean_in, wrong_in)
    assert np.allclose(wrong_out, clean_out * fault["scale"], rtol=2**-6, atol=1e-3)
    assert not np.allclose(wrong_out, clean_out, rtol=2**-8, atol=0)


@pytest.mark.parametrize("gather", [False, True], ids=["unasked", "--gather"])
@pytest.mark.parametrize("case", ["clean", "expert"])
def test_ranks_that_ran_different_experts_are_not_merged(ep, case: str, gather: bool) -> None:
    """Each rank ran its own experts, and msprobe numbers API calls per rank: one name is another call
    on each rank, so the ranks are not merged, not even with --gather; rank 0 is compared alone, the note
    says why, and nothing is called the start of an error. (Merging them, experts paired with the
    golden's by id and token, is not built yet: expert 3's fault on rank 1 is not found this way.)"""
    comparison = open_comparison(ep / "golden", ep / case, CompareOptions(cache=False, gather=gather))
    assert comparison.test.rank == 0
    assert any("did not all run the same calls" in note for note in comparison.test.notes)
    report = build_report(comparison, all_tokens=True)
    body = report.body()
    assert "gathered" not in report.text().splitlines()[2]
    assert body["first_failing_op"] is None and body["errors"] == []
    local = [
        (token, row["golden_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]
    assert comparison.pairing.tokens == [0, 1, 2, 3] and local == []
