"""msprobe graph mode (ACLGraph): the tensor task's files and the statistics task's dump.json, per step.

tests/data/aclgraph holds dumps written by msprobe 26.2.0's own AclGraphDumper (run on the CPU, its
C++ ops ported line by line: scripts/make_aclgraph_fixtures.py) of a random-weight Llama, one step
per forward pass, golden in float32 and test in bfloat16 with a faulty ``aten.mm`` in
``model.layers.1.mlp.down_proj`` at token 2. ``case.json`` says which record that is.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.archives import unpack as unpack_archive
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.registry import expected

CASES = Path(__file__).resolve().parents[1] / "data" / "aclgraph"
NAMES = sorted(p.name.removesuffix(".tar.xz") for p in CASES.glob("*.tar.xz"))
L1_TENSOR, MIX_TENSOR, MIX_STATISTICS = (
    "llama-aclgraph-L1-tensor",
    "llama-aclgraph-mix-tensor",
    "llama-aclgraph-mix-statistics",
)


@pytest.fixture(scope="session")
def graph_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``graph_case(name)``: a case of tests/data/aclgraph, unpacked once per session (file times kept)."""
    root = tmp_path_factory.mktemp("aclgraph")

    def unpack(name: str) -> Path:
        target = root / name
        if not target.is_dir():
            unpack_archive(CASES / f"{name}.tar.xz", root)
        return target

    return unpack


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _copy(graph_case: Callable[[str], Path], name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(graph_case(name), target)  # copy2: file times kept
    return target


def _rank_dirs(side: Path) -> list[Path]:
    return sorted(side.glob("step*/*"))


def _two_ranks(side: Path) -> None:
    """Every step's folder becomes rank0, and a copy of it rank1 (two ranks holding the same)."""
    for rank_dir in _rank_dirs(side):
        rank0 = rank_dir.with_name("rank0")
        rank_dir.rename(rank0)
        shutil.copytree(rank0, rank0.with_name("rank1"))


def _assert_fault_found(golden: Path, test: Path, case: dict, **options: object) -> None:
    comparison = open_comparison(golden, test, CompareOptions(cache=False, **options))
    first = comparison.engine.first_failing_token()
    assert first == case["fault_token"]
    for token in range(first):
        assert comparison.engine.token_row(token)["passed"] is True
    op = comparison.verdicts.culprit(first)
    assert op is not None and op["golden_node"] == case["fault_record"], op and op["golden_node"]
    assert op["label"] == "local"


def test_every_case_is_tested() -> None:
    assert sorted([L1_TENSOR, MIX_TENSOR, MIX_STATISTICS]) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_fault_is_found_at_its_step_and_operator(graph_case, name: str) -> None:
    folder = graph_case(name)
    case = _case(folder)
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    # a token is a step: one replay, one forward pass
    assert comparison.pairing.tokens == list(range(case["new_tokens"]))
    assert not comparison.golden.problems and not comparison.test.problems
    assert comparison.test.statistics_only is (case["task"] == "statistics")
    assert comparison.test.format == "msprobe"
    _assert_fault_found(folder / "golden", folder / "test", case)
    if case["fault_stable"]:
        assert comparison.golden.stable_name(case["fault_record"]) == case["fault_stable"]


def test_the_tensor_task_has_no_dump_json_and_its_counters_run_on(graph_case) -> None:
    folder = graph_case(L1_TENSOR)
    assert not list(folder.rglob("dump.json"))
    index = open_dump(folder / "test")
    names = {token: set(nodes) for token, nodes in index.tokens.items()}
    assert not names[1] & names[2]  # msprobe's counters are not reset by step()
    stable = {token: {index.stable_name(n) for n in nodes} for token, nodes in names.items()}
    assert stable[1] == stable[2] == stable[3]  # but the same operator has the same stable name
    assert "file times" in index.order_source
    assert any("graph mode" in note and "construct.json" in note for note in index.notes)
    # the logits: the last call with an output (lm_head's mm), found again at every token
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    for token in comparison.pairing.tokens:
        logits = comparison.pairing.logits_pair(token)
        assert logits is not None and index.stable_name(logits.golden_node) == "Aten.mm#14"


def test_without_file_times_the_order_comes_from_names_and_the_fault_is_still_found(
    graph_case, tmp_path
) -> None:
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    for path in folder.rglob("*.pt"):  # a copy that lost the times: every file at the same instant
        os.utime(path, ns=(0, 1_700_000_000 * 10**9))
    index = open_dump(folder / "test")
    assert "file names" in index.order_source
    # no order across APIs, no shapes: the logits are the user's to name (--logits-node)
    assert any("--logits-node" in note for note in index.notes)
    _assert_fault_found(folder / "golden", folder / "test", _case(folder), logits_node="Aten.mm.14.forward")


def test_mix_tensor_calls_sit_inside_their_modules(graph_case) -> None:
    """File times give each call's span: the silu inside act_fn, the gate*up product inside the MLP."""
    folder = graph_case(MIX_TENSOR)
    case = _case(folder)
    index = open_dump(folder / "golden")
    token = case["fault_token"]
    tree = index.tree
    mlp = f"Module.model.layers.1.mlp.LlamaMLP.forward.{token}"
    assert tree.nodes[case["fault_record"]].parent == mlp
    children = tree.children(mlp)
    kinds = [index.stable_name(c).split("#")[0].removeprefix("Module.model.layers.1.mlp.") for c in children]
    assert kinds == [
        "gate_proj.Linear.forward",
        "act_fn.SiLUActivation.forward",
        "up_proj.Linear.forward",
        "Aten.mul",
        "down_proj.Linear.forward",
    ]
    (silu,) = tree.children(f"Module.model.layers.1.mlp.act_fn.SiLUActivation.forward.{token}")
    assert silu.startswith("Aten.silu.")


def test_statistics_task_reads_dump_json_alone_per_step(graph_case) -> None:
    folder = graph_case(MIX_STATISTICS)
    case = _case(folder)
    dumps = sorted((folder / "test").rglob("dump.json"))
    assert len(dumps) == case["new_tokens"]
    assert not list(folder.rglob("construct.json")) and not list(folder.rglob("stack.json"))
    index = open_dump(folder / "test")
    assert index.statistics_only and not index.problems  # no construct.json: expected, a note
    assert any("no construct.json" in note for note in index.notes)
    assert index.order_source.startswith("dump.json order")
    # modules nest by their paths; API calls sit under the model's own call
    tree = index.tree
    assert tree.nodes[case["fault_record"]].parent == "Module.model.layers.1.mlp.LlamaMLP.forward.0"
    assert tree.nodes["Aten.mm.0.forward"].parent == "Module.__root__.LlamaForCausalLM.forward.0"
    # the logits: the outermost call whose output is as wide as aten.embedding's table
    assert index.logits_hint == "Module.lm_head.Linear.forward.0"
    assert "bfloat16" in index.float_dtypes


@pytest.mark.parametrize("prefix", ["rank", "proc"])
def test_rank_and_proc_folders_are_read_as_pid_folders_are(graph_case, tmp_path, prefix: str) -> None:
    folder = _copy(graph_case, MIX_STATISTICS, tmp_path)
    for side in ("golden", "test"):
        for rank_dir in _rank_dirs(folder / side):
            rank_dir.rename(rank_dir.with_name(f"{prefix}0"))
    _assert_fault_found(folder / "golden", folder / "test", _case(folder))


def test_several_ranks_compare_rank_0_unless_asked(graph_case, tmp_path) -> None:
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    case = _case(folder)
    for side in ("golden", "test"):
        _two_ranks(folder / side)
    test = open_dump(folder / "test")
    assert test.ranks == ["rank0", "rank1"] and test.rank == 0
    assert any("comparing rank 0" in note for note in test.notes)
    second = open_dump(folder / "test", rank=1)
    assert second.rank == 1 and all("/rank1/" in r.location for n in second.tokens[2].values() for r in n)
    _assert_fault_found(folder / "golden", folder / "test", case, rank=1)
    with pytest.raises(DumpError, match="out of range"):
        open_dump(folder / "test", rank=2)


def test_a_rank_folder_passed_is_the_one_read(graph_case, tmp_path) -> None:
    folder = _copy(graph_case, MIX_STATISTICS, tmp_path)
    _two_ranks(folder / "test")
    rank1 = folder / "test" / "step2" / "rank1"
    index = open_dump(rank1)
    assert list(index.tokens) == [2] and not index.ranks
    assert all(r.location == str(rank1 / "dump.json") for n in index.tokens[2].values() for r in n)


def test_gather_merges_the_ranks_of_a_graph_mode_dump(graph_case, tmp_path) -> None:
    """Two ranks that each hold the whole tensors (replicated): --gather takes rank 0's."""
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    _two_ranks(folder / "test")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False, gather=True))
    assert any("gathered 2 ranks" in note for note in comparison.test.notes)
    _assert_fault_found(folder / "golden", folder / "test", _case(folder), gather=True)


def test_an_unreadable_dump_json_is_named_once_and_the_other_steps_compared(graph_case, tmp_path) -> None:
    folder = _copy(graph_case, MIX_STATISTICS, tmp_path)
    broken = next((folder / "test" / "step1").glob("*/dump.json"))
    broken.write_text("{", encoding="utf-8")
    index = open_dump(folder / "test")
    assert [p.path for p in index.problems] == [str(broken)]
    assert sorted(index.tokens) == [0, 2, 3]
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert comparison.engine.first_failing_token() == _case(folder)["fault_token"]


def test_a_file_name_that_does_not_parse_is_named_and_the_rest_compared(graph_case, tmp_path) -> None:
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    tensors = next((folder / "test" / "step1").glob("*/dump_tensor_data"))
    stray = tensors / "Aten.mm.output.pt"  # no call index
    stray.write_bytes(b"")
    index = open_dump(folder / "test")
    assert [p.path for p in index.problems] == [str(stray)]
    assert "not a graph-mode tensor file name" in index.problems[0].message
    _assert_fault_found(folder / "golden", folder / "test", _case(folder))


def test_a_step_without_tensors_is_named_and_the_other_steps_compared(graph_case, tmp_path) -> None:
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    tensors = next((folder / "test" / "step1").glob("*/dump_tensor_data"))
    for path in tensors.iterdir():
        path.unlink()
    index = open_dump(folder / "test")
    assert sorted(index.tokens) == [0, 2, 3]
    (problem,) = index.problems
    assert problem.path == str(tensors.parent) and "no tensors" in problem.message
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert comparison.pairing.tokens == [0, 2, 3]
    assert comparison.engine.first_failing_token() == _case(folder)["fault_token"]


def test_detection_by_names(graph_case, model_case) -> None:
    folder = graph_case(MIX_STATISTICS)
    one = next((folder / "test").rglob("dump.json"))
    for path in (folder / "test", one.parent.parent, one.parent):  # dump_path, a step, a rank folder
        index = open_dump(path)
        assert any("graph mode" in note for note in index.notes), path
    assert len(open_dump(one.parent).tokens) == 1
    # an eager msprobe dump (construct.json and stack.json beside dump.json) stays the eager reader's
    eager = open_dump(model_case("llama-msprobe-L1") / "golden")
    assert not any("graph mode" in note for note in eager.notes)
    assert len(eager.tokens) == 4  # every forward pass of its single step, as before
    assert "graph-mode" in expected() and "pid" in expected()


@pytest.mark.parametrize(
    ("name", "logits"),
    [(L1_TENSOR, {"logits_node": "Aten.mm.14.forward"}), (MIX_TENSOR, {})],
)
def test_without_file_times_the_data_flow_orders_the_calls(
    graph_case, tmp_path, name: str, logits: dict[str, str]
) -> None:
    """A copy that lost the times: what the files show made another call's input, and each API's
    counter, order the calls; the rest is estimated from the counters. The order is far closer to
    the one the times gave than name order, and the faulty call is found (with lm_head's module
    dumped, mix, without naming the logits; L1's last calls read nothing the others wrote)."""
    timed = open_dump(graph_case(name) / "golden")
    folder = _copy(graph_case, name, tmp_path)
    for path in folder.rglob("*.pt"):
        os.utime(path, ns=(0, 1_700_000_000 * 10**9))
    untimed = open_dump(folder / "golden")
    assert untimed.order_source.startswith("data flow and file names (") and not untimed.order_is_execution
    for token in timed.tokens:
        ran = [timed.stable_name(n) for n in timed.tokens[token]]
        guessed = [untimed.stable_name(n) for n in untimed.tokens[token]]
        by_name = sorted(ran, key=lambda s: (not s.startswith("Module."), s.split("#")[0], s))
        assert sorted(ran) == sorted(guessed)
        assert _discordant(ran, guessed) * 3 < _discordant(ran, by_name), token
    _assert_fault_found(folder / "golden", folder / "test", _case(folder), **logits)


def _discordant(truth: list[str], order: list[str]) -> int:
    """Pairs of ``truth`` that ``order`` puts the other way round (Kendall's distance)."""
    place = {name: i for i, name in enumerate(order)}
    ranks = [place[name] for name in truth]
    return sum(1 for i, a in enumerate(ranks) for b in ranks[i + 1 :] if a > b)


def test_copies_named_step03_or_rank01_are_named_and_not_read(graph_case, tmp_path: Path) -> None:
    """Graph mode's reader, as the eager one: msprobe writes step{n} and rank{n} without leading
    zeros, so a copy so named beside its folder is named, and the tokens and rank read are as before."""
    folder = _copy(graph_case, L1_TENSOR, tmp_path)
    test = folder / "test"
    _two_ranks(test)
    step = sorted(test.glob("step*"))[0]
    shutil.copytree(step / "rank1", step / "rank01")
    shutil.copytree(step, step.with_name(f"step0{step.name[4:]}"))
    before = open_dump(graph_case(L1_TENSOR) / "test")
    index = open_dump(test)
    said = {Path(p.path).name: p.message for p in index.problems}
    assert (
        "without leading zeros" in said["rank01"] and "without leading zeros" in said[f"step0{step.name[4:]}"]
    )
    assert sorted(index.tokens) == sorted(before.tokens) and index.ranks == ["rank0", "rank1"]
