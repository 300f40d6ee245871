"""An expert-parallel MoE test against a one-device golden, in msprobe's layout, made by the real
msprobe (tests/data/tp, scripts/make_ep_msprobe_fixtures.py): a tiny MoE model of Llama's shape (a
router ``gate``, top 2 of 4 experts, each expert its own module ``experts.{e}``) on 2 gloo ranks in
bfloat16, attention, norms, router, embedding and lm_head replicated, rank r holding experts 2r and
2r+1 under their global ids and ``torch.distributed.all_reduce`` of the ranks' partial sums inside
the MoE block (``step0/rank0/``, ``step0/rank1/``, level mix); its golden the same weights, every
expert, on one process in float32. In ``expert/`` expert 3 (rank 1) in layer 1 at token 2 computed
its down_proj with a wrong weight. One name is another call on each rank (msprobe numbers API calls
per rank): the ranks are merged by what their calls are (dumps/rank_alignment.py).

A second archive (``moe-ep4-msprobe``) is the same model on 4 ranks, rank r holding expert r alone
(at a decoded token 2 of the 4 ranks run no expert in a layer: their partial sum stays zeros), and
the all-reduce of the partial sums in the decoder layer after the MoE block returned (the block's
output is the rank's partial sum); in its ``expert/`` expert 3 (rank 3) in layer 1 at token 2 computed
its down_proj with a wrong weight.

A third (``moe-ep3rr-msprobe``) has 6 experts, top-1 routing, on 3 ranks placed round-robin (rank r
holds experts r and r+3), the all-reduce inside the MoE block, and a shared expert
(``mlp.shared_expert``) every rank runs whole and adds after it; in its ``expert/`` expert 2 (rank 2)
in layer 1 at token 2 computed its down_proj with a wrong weight, in its ``shared/`` rank 1's shared
expert did, in layer 1 at token 2.

Where the fault lies is the generator's record (case.json: token, rank, layer, expert, msprobe's
module record) and msprobe's own dump, not tui-acc's reading of them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import local_operators
from tests.unit.ranks_dumps import case_of, rank_folder
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import load_tensor
from tui_acc.reports.pair import build_report

NAME = "moe-ep2-msprobe"
NAME4 = "moe-ep4-msprobe"  # 4 ranks, one expert each, the all-reduce outside the MoE block
NAME3RR = "moe-ep3rr-msprobe"  # 3 ranks, 6 experts round-robin, top 1, a shared expert


@pytest.fixture(scope="module")
def ep(tp_case) -> Path:
    return tp_case(NAME)


@pytest.fixture(scope="module")
def ep4(tp_case) -> Path:
    return tp_case(NAME4)


@pytest.fixture(scope="module")
def ep3rr(tp_case) -> Path:
    return tp_case(NAME3RR)


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


def _construct(folder: Path) -> dict:
    return json.loads((folder / "construct.json").read_text(encoding="utf-8"))


def _nothing_local(folder: Path, world: int):
    """The clean run against the golden: no local operator at any token, none reported, and the
    first lines say how the test was split; the comparison, for more."""
    comparison = open_comparison(folder / "golden", folder / "clean", CompareOptions(cache=False))
    assert local_operators(comparison) == []
    report = build_report(comparison, all_tokens=True)
    assert f"expert-parallel, {world} ranks, gathered" in report.text().splitlines()[2]
    assert report.body()["first_failing_op"] is None
    return comparison


def _the_faulty_expert_named(folder: Path, world: int, gather: bool = False) -> tuple[int, str]:
    """The faulty run against the golden: the one local operator over all tokens is the faulty
    expert's down_proj linear at the fault's token, the golden's record and the test's both under
    that module in msprobe's construct.json (the test's on the rank that ran it, named by its record
    there), and the report says so; the first lines say how the test was split. (rank, record)."""
    fault = case_of(folder)["fault"]
    options = CompareOptions(cache=False, gather=gather)
    comparison = open_comparison(folder / "golden", folder / fault["case"], options)
    report = build_report(comparison, all_tokens=True)
    first_lines = report.text().splitlines()[2]
    assert f"expert-parallel, {world} ranks, gathered" in first_lines
    assert "tensor-parallel" not in first_lines
    [(token, golden_node, test_node)] = local_operators(comparison)
    assert token == fault["token"]
    module = f"Module.{fault['linear_module']}.Linear.forward.{fault['call']}"
    assert _construct(folder / "golden" / "step0" / _golden_proc(folder))[golden_node] == module
    rank, record = comparison.test.origins[test_node]
    assert rank == fault["rank"]
    assert _construct(rank_folder(folder, fault["case"], rank))[record] == module
    op = report.body()["first_failing_op"]
    assert (op["token"], op["test_rank"], op["test_record"]) == (token, rank, record)
    assert f"rank {rank}'s {record}" in report.text()
    return rank, record


@pytest.mark.parametrize("gather", [False, True], ids=["unasked", "--gather"])
def test_the_faulty_expert_on_its_rank_is_the_one_local_operator(ep, gather: bool) -> None:
    """The ranks are merged, each rank's experts taken whole from it and paired with the golden's by
    module path: the one local operator is the faulty expert's down_proj linear at the fault's token,
    named with its rank and its name in that rank's dump.json; the first lines say how the test was
    split. Where each record sits is msprobe's construct.json, on each side."""
    _the_faulty_expert_named(ep, 2, gather)


def _golden_proc(ep: Path) -> str:
    return next(p.name for p in (ep / "golden" / "step0").iterdir() if p.name.startswith("proc"))


def test_a_clean_expert_parallel_run_labels_nothing_local(ep) -> None:
    """Against the one-device golden, the clean expert-parallel run has no local operator at any token:
    the router's work every rank repeats is one call, each expert is compared with the golden's, and
    a rank's own running sum (index_add_ into its partial sum) is not held against the golden's."""
    assert _nothing_local(ep, 2).pairing.tokens == [0, 1, 2, 3]


def test_each_rank_s_own_calls_are_its_experts_and_their_loop(ep) -> None:
    """What the merge takes from rank 1 alone is its experts (the modules construct.json puts under
    ``experts.2`` and ``experts.3``) and the loop's calls around them; the router's calls every rank
    made alike are rank 0's, once."""
    comparison = open_comparison(ep / "golden", ep / "clean", CompareOptions(cache=False))
    folder = rank_folder(ep, "clean", 1)
    parents = _construct(folder)
    owned = {
        record
        for rank, record in comparison.test.origins.values()
        if rank == 1 and record.startswith("Module.") and ".mlp.experts." in record
    }
    recorded = {name for name in _records(folder) if name.startswith("Module.") and ".mlp.experts." in name}
    assert owned == recorded
    records = {record for _, record in comparison.test.origins.values()}
    router = [name for name, parent in parents.items() if parent and ".mlp.gate.Linear" in parent]
    assert router and not records & set(router)


def test_ranks_without_module_records_are_not_merged(ep, tmp_path: Path) -> None:
    """The same run as level L1 would record it (its module records taken out of each rank's dump.json
    and construct.json): nothing marks where an expert's calls begin, so the ranks are not merged,
    even with --gather; rank 0 is compared alone and the note asks for level mix."""
    test = tmp_path / "expert"
    shutil.copytree(ep / "expert", test)
    for rank in (0, 1):
        folder = rank_folder(tmp_path, "expert", rank)
        dump = json.loads((folder / "dump.json").read_text(encoding="utf-8"))
        dump["data"] = {k: v for k, v in dump["data"].items() if not k.startswith("Module.")}
        dump["level"] = "L1"
        (folder / "dump.json").write_text(json.dumps(dump), encoding="utf-8")
        construct = {k: None for k in _construct(folder) if not k.startswith("Module.")}
        (folder / "construct.json").write_text(json.dumps(construct), encoding="utf-8")
    for gather in (False, True):
        comparison = open_comparison(ep / "golden", test, CompareOptions(cache=False, gather=gather))
        assert comparison.test.rank == 0 and not comparison.test.origins
        assert any("level mix to merge them" in note for note in comparison.test.notes)


def _module_calls(folder: Path, forward: str) -> int:
    """How many calls msprobe recorded in this rank's construct.json as ``{forward}.{n}``."""
    prefix = f"{forward}."
    return sum(1 for name in _construct(folder) if name.startswith(prefix) and name[len(prefix) :].isdigit())


def test_four_ranks_record_one_expert_each_and_the_all_reduce_in_the_decoder_layer(ep4) -> None:
    """msprobe's records on the 4 ranks: rank r's experts are case.json's (expert r), the all-reduce of
    the partial sums sits under the decoder layer, not under the MoE block, and some rank ran no
    expert in some layer at some token (msprobe recorded fewer calls of its expert than tokens)."""
    case = case_of(ep4)
    config = case["config"]
    assert config["world"] == 4 and config["allreduce"]["where"] == "outside"
    tokens = len(case["generated"]["golden"])
    idle = []
    for rank in range(4):
        folder = rank_folder(ep4, "clean", rank)
        experts = {name.split(".")[6] for name in _records(folder) if ".mlp.experts." in name}
        assert experts == {str(e) for e in config["experts_of_rank"][str(rank)]}
        parents = {v for k, v in _construct(folder).items() if k.startswith("Distributed.all_reduce.")}
        assert len(parents) == tokens * config["layers"]
        assert all(".MoeDecoderLayer.forward." in p and ".mlp." not in p for p in parents)
        for layer in range(config["layers"]):
            for expert in config["experts_of_rank"][str(rank)]:
                forward = f"Module.model.layers.{layer}.mlp.experts.{expert}.ExpertMLP.forward"
                calls = _module_calls(folder, forward)
                assert calls == case["expert_calls"][f"{layer}.{expert}"]
                if calls < tokens:
                    idle.append((rank, layer))
    assert idle
    recorded = {
        (rank, int(layer))
        for by_layer in case["idle_ranks"]["by_token"].values()
        for layer, ranks in by_layer.items()
        for rank in ranks
    }
    assert set(idle) <= recorded


def test_a_clean_four_rank_run_with_the_all_reduce_outside_labels_nothing_local(ep4) -> None:
    """Against the one-device golden, the clean 4-rank run (ranks running no expert at some tokens, the
    MoE block's output each rank's partial sum) has no local operator at any token."""
    assert _nothing_local(ep4, 4).pairing.tokens == [0, 1, 2, 3]


@pytest.mark.parametrize("gather", [False, True], ids=["unasked", "--gather"])
def test_the_faulty_expert_on_rank_3_is_the_one_local_operator(ep4, gather: bool) -> None:
    """On 4 ranks with the all-reduce outside the MoE block, the one local operator over all tokens is
    the faulty expert's down_proj linear at the fault's token, on rank 3, named by its record there."""
    fault = case_of(ep4)["fault"]
    assert fault["rank"] == 3
    module = f"Module.{fault['linear_module']}.Linear.forward.{fault['call']}"
    assert module == f"Module.model.layers.1.mlp.experts.3.down_proj.Linear.forward.{fault['call']}"
    assert _the_faulty_expert_named(ep4, 4, gather)[0] == 3


def test_three_round_robin_ranks_with_a_shared_expert_as_msprobe_recorded_them(ep3rr) -> None:
    """msprobe's records on the 3 ranks: rank r's experts are case.json's (r and r+3), and each rank
    recorded the shared expert's down_proj at every token of every layer."""
    case = case_of(ep3rr)
    config = case["config"]
    assert (config["world"], config["experts"], config["top_k"]) == (3, 6, 1)
    assert config["placement"] == "round-robin" and config["shared_expert"]
    assert config["experts_of_rank"] == {"0": [0, 3], "1": [1, 4], "2": [2, 5]}
    tokens = len(case["generated"]["golden"])
    for rank in range(3):
        folder = rank_folder(ep3rr, "clean", rank)
        experts = {name.split(".")[6] for name in _records(folder) if ".mlp.experts." in name}
        assert experts == {str(e) for e in config["experts_of_rank"][str(rank)]}
        for layer in range(config["layers"]):
            forward = f"Module.model.layers.{layer}.mlp.shared_expert.down_proj.Linear.forward"
            assert _module_calls(folder, forward) == tokens


def test_a_clean_round_robin_run_with_a_shared_expert_labels_nothing_local(ep3rr) -> None:
    """Against the one-device golden, the clean 3-rank round-robin run with a shared expert has no local
    operator at any token."""
    _nothing_local(ep3rr, 3)


def test_the_faulty_round_robin_expert_on_rank_2_is_the_one_local_operator(ep3rr) -> None:
    """Round-robin placement: the one local operator over all tokens is expert 2's down_proj linear at
    the fault's token, on rank 2, under that expert's down_proj module in rank 2's construct.json."""
    fault = case_of(ep3rr)["fault"]
    assert (fault["rank"], fault["expert"], fault["layer"], fault["token"]) == (2, 2, 1, 2)
    module = f"Module.model.layers.1.mlp.experts.2.down_proj.Linear.forward.{fault['call']}"
    assert module == f"Module.{fault['linear_module']}.Linear.forward.{fault['call']}"
    assert _the_faulty_expert_named(ep3rr, 3)[0] == 2


def test_one_rank_s_wrong_shared_expert_is_the_one_local_operator(ep3rr) -> None:
    """Rank 1's shared expert (replicated work, every rank runs it whole) wrong in layer 1 at token 2:
    the one local operator over all tokens is at token 2, its golden node the golden's record under
    the shared expert's down_proj module at its third call (msprobe's construct.json)."""
    fault = case_of(ep3rr)["shared_fault"]
    assert (fault["case"], fault["rank"], fault["layer"], fault["token"]) == ("shared", 1, 1, 2)
    module = "Module.model.layers.1.mlp.shared_expert.down_proj.Linear.forward.2"
    assert fault["record"] == module
    assert _construct(rank_folder(ep3rr, "shared", 1))[fault["linear_record"]] == module
    comparison = open_comparison(ep3rr / "golden", ep3rr / "shared", CompareOptions(cache=False))
    report = build_report(comparison, all_tokens=True)
    assert "expert-parallel, 3 ranks, gathered" in report.text().splitlines()[2]
    [(token, golden_node, _)] = local_operators(comparison)
    assert token == fault["token"]
    assert _construct(ep3rr / "golden" / "step0" / _golden_proc(ep3rr))[golden_node] == module
