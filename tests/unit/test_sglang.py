"""SGLang's own dumper: files named and filled as sglang.srt.debug_utils.dumper writes them.

tests/data/sglang/sglang-llama.tar.xz (scripts/make_sglang_fixtures.py) holds a random-weight
Llama dumped with the automatic hooks and two dims-annotated ``dumper.dump`` calls: ``golden/``
(one device), ``test/`` (one fault, and a warm-up step first) and ``test_tp2/`` (the faulty run as
two tensor-parallel ranks lay it out). ``case.json`` says where the fault is.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.archives import unpack as unpack_archive
from tests.conftest import REPO
from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.dumps import DumpError, TensorLoadError, load_tensor, open_dump
from tui_acc.dumps.policy import ANYWHERE
from tui_acc.dumps.sglang.dump import merge_of_dims
from tui_acc.dumps.sglang.files import parse_name

ARCHIVE = REPO / "tests" / "data" / "sglang" / "sglang-llama.tar.xz"


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sglang")
    unpack_archive(ARCHIVE, root)
    return root / "sglang-llama"


@pytest.fixture(scope="module")
def case(case_dir: Path) -> dict:
    return json.loads((case_dir / "case.json").read_text(encoding="utf-8"))


def _report(golden: Path, test: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    main(["report", str(golden), str(test), "--json", "--no-cache", *extra])
    return json.loads(capsys.readouterr().out)


def _errors(report: dict) -> list[str]:
    return [f"{e['file']}: {e['message']}" for e in report["errors"]]


def _assert_fault_found(report: dict, case: dict) -> None:
    assert report["golden"]["format"] == report["test"]["format"] == "sglang"
    assert report["first_failing_token"] == case["fault_step"]
    op = report["first_failing_op"]
    assert op["golden"] == case["fault_module"] and op["label"] == "local"
    for row in report["tokens"][: case["fault_step"]]:
        assert row["passed"] is True, row


def _paths(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"*/step=*___name={name}___*.pt"))


# --- localising the fault --------------------------------------------------------------------------


def test_single_rank_fault_is_found_at_its_step(case_dir, case, capsys):
    report = _report(case_dir / "golden", case_dir / "test", capsys)
    _assert_fault_found(report, case)
    assert report["errors"] == []
    # the warm-up step shifted the test's numbering by one; input_ids put it back
    assert any("test step 3 is golden step 2" in note for note in report["notes"]), report["notes"]
    assert [u for u in report["unmatched"] if u["kind"] == "token"] == [
        {"kind": "token", "side": "test", "token": case["steps"], "name": str(case["steps"])}
    ]


def test_steps_renumbered_keep_the_dumpers_own_step_for_redumps(case_dir, case):
    comparison = open_comparison(case_dir / "golden", case_dir / "test", CompareOptions(cache=False))
    assert comparison.pairing.tokens == list(range(case["steps"]))
    shift = case["test_step_shift"]
    assert all(comparison.test.exec_counts[t] == t + shift for t in range(case["steps"]))
    # every operator before the fault passes: the same float32 model on both sides
    for token in range(case["fault_step"]):
        rows = comparison.verdicts.token(token).rows
        assert rows and [r["golden_node"] for r in rows if r["outputs_passed"] is False] == []


def test_tp2_gathered_against_one_device_finds_the_fault(case_dir, case, capsys):
    report = _report(case_dir / "golden", case_dir / "test_tp2", capsys, "--gather")
    _assert_fault_found(report, case)
    assert report["errors"] == [] and report["unmatched"] == []


def test_tp2_is_unsharded_by_its_dims_annotation(case_dir, case):
    comparison = open_comparison(
        case_dir / "golden", case_dir / "test_tp2", CompareOptions(cache=False, gather=True)
    )
    nodes = comparison.test.tokens[0]
    (act,) = nodes["model.layers.0.mlp_act"]
    (down,) = nodes["model.layers.0.mlp_down"]
    assert (act.merge, down.merge) == ("cat:2", "sum")  # "b s i[tp]", "b s h[tp:partial]"
    assert len(act.parts) == len(down.parts) == case["tp"]
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(0).rows}
    assert rows["model.layers.0.mlp_act"]["outputs_passed"] is True
    assert rows["model.layers.0.mlp_down"]["outputs_passed"] is True  # summed partials


def test_one_rank_alone_holds_a_partial_sum(case_dir):
    """With --rank 0, rank 0's mlp_down is only its share: proof the fixture's partials are real."""
    options = CompareOptions(cache=False, rank=0)
    comparison = open_comparison(case_dir / "golden", case_dir / "test_tp2", options)
    assert comparison.test.rank == 0 and comparison.test.ranks == ["rank0", "rank1"]
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(0).rows}
    assert rows["model.layers.0.mlp_down"]["outputs_passed"] is False


def test_a_sharded_test_against_a_one_device_golden_is_gathered_unasked(case_dir, case):
    comparison = open_comparison(case_dir / "golden", case_dir / "test_tp2", CompareOptions(cache=False))
    assert comparison.test.rank is None and comparison.test.ranks == ["rank0", "rank1"]
    (down,) = comparison.test.tokens[0]["model.layers.0.mlp_down"]
    assert down.merge == "sum" and len(down.parts) == case["tp"]
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(0).rows}
    assert rows["model.layers.0.mlp_down"]["outputs_passed"] is True


def test_rank_picks_the_files_of_that_rank(case_dir):
    second = open_dump(case_dir / "test_tp2", rank=1)
    refs = [ref for nodes in second.tokens.values() for refs in nodes.values() for ref in refs]
    assert refs and all("___rank=1___" in ref.path.name for ref in refs)
    with pytest.raises(DumpError, match="--rank 2 is out of range"):
        open_dump(case_dir / "test_tp2", rank=2)


def test_tree_follows_module_names_and_explicit_dumps_sit_in_their_layer(case_dir):
    index = open_dump(case_dir / "golden")
    tree = index.tree
    assert tree.nodes["model.layers.1.mlp.down_proj"].parent == "model.layers.1.mlp"
    assert tree.nodes["model.layers.1.mlp_down"].parent == "model.layers.1"
    order = [n.name for n in tree.preorder()]
    assert order.index("model.layers.0.mlp.down_proj") < order.index("model.layers.1.input_layernorm")
    assert index.logits_hint == "lm_head"
    slots = {ref.slot: ref.role for ref in index.tokens[0]["model.layers.1.self_attn"]}
    assert slots["inputs.hidden_states"] == "input" and slots["output.0"] == "output"


# --- names, dims, loading --------------------------------------------------------------------------


def test_file_names_parse_as_the_dumper_writes_them():
    record = parse_name(
        "step=3___rank=1___dump_index=17___name=non_intrusive__model.layers.2.mlp.output"
        "___recompute_status=disabled___layer_id=2.pt",
        "/x",
    )
    assert record is not None
    assert (record.step, record.rank, record.index, record.layer) == (3, 1, 17, 2)
    assert record.name == "non_intrusive__model.layers.2.mlp.output"
    # extra dump() kwargs and include_parallel_rank_in_filename's tags follow; names may hold "__"
    tagged = parse_name(
        "step=0___rank=0___dump_index=1___name=attn__q___recompute_status=original___tp_rank=1___pp_rank=0.pt",
        "/x",
    )
    assert tagged is not None and tagged.name == "attn__q" and tagged.layer is None
    for bad in (
        "step=0___rank=0___name=x.pt",
        "step=a___rank=0___dump_index=1___name=x___recompute_status=d.pt",
    ):
        assert parse_name(bad, "/x") is None


@pytest.mark.parametrize(
    ("dims", "merge"),
    [
        ("t h[tp]", "cat:1"),
        ("t h[tp:partial]", "sum"),
        ("b s (num_heads*head_dim)[tp]", "cat:2"),
        ("t 1 h[attn_tp]", "cat:2"),
        ("t h # tp:replicated", ""),
        ("t h", ""),
    ],
)
def test_dims_annotations_name_the_merge(dims, merge):
    assert merge_of_dims(dims) == (merge, "")


def test_dims_tui_acc_cannot_follow_are_said_and_merged_by_shape():
    assert merge_of_dims("t[cp:zigzag] h[tp]")[0] == ""
    assert "cp" in merge_of_dims("t[cp:zigzag] h[tp]")[1]


def test_load_tensor_unwraps_the_dumpers_dict(tmp_path):
    path = tmp_path / "a.pt"
    torch.save(
        {"value": torch.arange(3), "meta": {"dims": "t", "sglang_parallel_info": {"tp_size": 1}}}, path
    )
    assert load_tensor(path, ANYWHERE).tolist() == [0, 1, 2]
    torch.save({"meta": {"name": "x"}}, path)
    with pytest.raises(TensorLoadError, match="SGLang dump without 'value'") as raised:
        load_tensor(path, ANYWHERE)
    assert raised.value.path == path
    torch.save({"value": ["rid-1"], "meta": {}}, path)
    with pytest.raises(TensorLoadError, match="holds a list, not a tensor"):
        load_tensor(path, ANYWHERE)


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("leading_zero", [False, True], ids=["no dump_index", "dump_index=0345"])
def test_a_file_name_that_does_not_parse_is_named_and_the_rest_compared(
    case_dir, case, tmp_path, capsys, leading_zero
):
    """A name without a dump_index; and a copy of a dumper file under its index spelled with a
    leading zero (read as the same index, it replaced the test's own file without a word): the
    dumper writes its numbers as integers, so neither is its name."""
    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    (exp,) = test.iterdir()
    if leading_zero:
        original = next(p for p in exp.glob("step=*___dump_index=*.pt"))
        stray = original.with_name(original.name.replace("___dump_index=", "___dump_index=0", 1))
        shutil.copy(next((case_dir / "golden").glob(f"*/{original.name}"), original), stray)
    else:
        stray = exp / "step=1___rank=0___name=lost.pt"
        stray.write_bytes(b"")
    report = _report(case_dir / "golden", test, capsys)
    assert any(e.startswith(f"{stray}: file name does not parse") for e in _errors(report)), _errors(report)
    _assert_fault_found(report, case)


def test_a_fifo_named_like_a_dumper_file_is_named_and_the_rest_compared(case_dir, case, tmp_path, capsys):
    """Listed as a file it would be skipped without a word, and its node paired by guesswork; opened,
    it would wait for a writer forever."""
    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    step = f"step={case['fault_step'] + case['test_step_shift']}_"
    target = next(p for p in _paths(test, "non_intrusive__model.norm.inputs.0") if step in p.name)
    target.unlink()
    os.mkfifo(target)
    report = _report(case_dir / "golden", test, capsys)
    assert f"{target}: not a regular file (a FIFO); not compared" in _errors(report), _errors(report)
    _assert_fault_found(report, case)


def test_names_that_are_not_utf8_are_named_and_the_rest_compared(case_dir, case, tmp_path, capsys):
    """A second experiment folder, and a dumper file, named in another encoding's bytes: their paths
    would reach no frame and no JSON (a traceback once); each is named, the rest compared."""
    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    (exp,) = test.iterdir()
    foreign = os.fsdecode(bytes(test) + b"/dump_\xff")
    shutil.copytree(exp, foreign)  # sorts after the real one: it would be the experiment read
    stray = os.fsdecode(
        bytes(exp) + b"/step=9___rank=0___dump_index=1___name=x\xff___recompute_status=disabled.pt"
    )
    Path(stray).write_bytes(b"")
    report = _report(case_dir / "golden", test, capsys)
    assert any("dump_\ufffd" in note and "not UTF-8" in note for note in report["notes"]), report["notes"]
    assert any(e.endswith("not UTF-8 (another encoding's bytes); not compared") for e in _errors(report))
    _assert_fault_found(report, case)


def test_a_dict_without_value_is_an_error_naming_the_file_and_the_rest_compared(
    case_dir, case, tmp_path, capsys
):
    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    # after the fault, at the step the report analyses (test step 3 is the golden's step 2)
    step = f"step={case['fault_step'] + case['test_step_shift']}_"
    target = next(p for p in _paths(test, "non_intrusive__model.norm.inputs.0") if step in p.name)
    torch.save({"meta": torch.load(target, weights_only=True)["meta"]}, target)
    report = _report(case_dir / "golden", test, capsys)
    messages = [e["message"] for e in report["errors"]]
    assert messages == [f"{target}: SGLang dump without 'value' (only its meta was saved)"], messages
    _assert_fault_found(report, case)


def test_a_folder_without_dumper_files_is_not_claimed(tmp_path):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "notes.txt").write_text("x")
    with pytest.raises(DumpError, match="not a dump tui-acc can read"):
        open_dump(tmp_path)


def test_without_input_ids_steps_pair_by_number(case_dir, tmp_path):
    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    for path in _paths(test, "input_ids"):
        path.unlink()
    comparison = open_comparison(case_dir / "golden", test, CompareOptions(cache=False))
    assert not any("aligned by the input_ids" in note for note in comparison.test.notes)
    assert comparison.test.exec_counts == {}


def test_a_redump_of_the_test_side_asks_for_the_servers_own_step(case_dir, case, tmp_path):
    from datetime import datetime

    from tui_acc.redump import load_settings
    from tui_acc.redump.select import plan_for

    comparison = open_comparison(case_dir / "golden", case_dir / "test", CompareOptions(cache=False))
    settings = load_settings({"test": {"dumper": "sglang-dumper", "exec": "python -m sglang.launch_server"}})
    token = case["fault_step"]
    plan = plan_for(comparison, settings, "test", token, case["fault_module"], datetime(2026, 1, 1), tmp_path)
    assert plan.selection.step == token + case["test_step_shift"]  # the warm-up ran first
    assert plan.selection.nodes == (case["fault_module"], "lm_head")
    assert "non_intrusive__model.layers.1.mlp.down_proj." in plan.env["DUMPER_FILTER"]


def test_indexing_opens_files_only_to_read_dims_of_a_multi_rank_dump(case_dir, monkeypatch):
    from tui_acc.dumps.torchfile import reader

    opened: list[str] = []
    real = reader.read_torch_file

    def counting(path, *args, **kwargs):
        opened.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(reader, "read_torch_file", counting)
    open_dump(case_dir / "golden")
    open_dump(case_dir / "test_tp2", rank=1)
    assert opened == []  # one rank, or not the rank --gather takes the merges from: names only
    index = open_dump(case_dir / "test_tp2")
    names = {
        ref.path.name.split("___name=")[1].split("___")[0]
        for n in index.tokens.values()
        for r in n.values()
        for ref in r
    }
    assert len(opened) == len(names)  # the first file of each name, once


def test_a_warm_up_step_that_shares_a_decode_token_does_not_pull_the_alignment_past_the_prefill():
    from tui_acc.dumps.sglang.align import match_steps

    golden = {0: (1, 37, 200, 88), 1: (9,), 2: (42,), 3: (16,)}
    # the test ran a one-token warm-up first, and its token is the golden's second decode token
    test = {0: (42,), 1: (1, 37, 200, 88), 2: (9,), 3: (42,), 4: (16,)}
    assert match_steps(golden, test) == {1: 0, 2: 1, 3: 2, 4: 3}
    # without the prompt anywhere on the test side, steps still match in order
    assert match_steps(golden, {0: (9,), 1: (42,)}) == {0: 1, 1: 2}


def test_a_step_without_input_ids_is_set_apart_and_the_others_still_aligned(case_dir, case, tmp_path, capsys):
    """One file of the test's first step moved under a step number of its own (a stray step): the
    first step may have lost its input_ids. Alignment had been dropped for every step (a step paired
    by number with another's tokens, the fault lost); now the steps holding input_ids are aligned,
    and a step without them is named and set apart."""
    import shutil

    test = tmp_path / "test"
    shutil.copytree(case_dir / "test", test)
    stray = sorted(test.glob("*/step=0___*"))[0]
    stray.rename(stray.with_name(stray.name.replace("step=0", "step=4", 1)))
    report = _report(case_dir / "golden", test, capsys)
    _assert_fault_found(report, case)
    assert any("test step 3 is golden step 2" in note for note in report["notes"]), report["notes"]
