"""msprobe's other fields and modes: checksums (md5, xor), nan_check, null statistics, Triton
records, level debug, and the gaps risk_level FOCUS leaves.

The real-tool cases come from tests/data/models (scripts/make_model_fixtures.py): an L1 dump with
checksums only, a golden dumped with risk_level ALL against a test with msprobe's default FOCUS,
single-point saves at level debug. nan_check needs an NPU, so its dump is made here from a real
statistics dump, as msprobe writes one (cited where it is done).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.model import Stats
from tui_acc.metrics.stats import compare_stats
from tui_acc.tolerances.thresholds import Thresholds, stats_passed


def _case(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _dump_json(side: Path) -> Path:
    return next(side.glob("step*/*/dump.json"))


# --- checksums ----------------------------------------------------------------------------------


def test_checksums_only_compare_bit_for_bit(model_case):
    folder = model_case("llama-msprobe-L1-xor")
    fault = _case(folder)["fault_record"]
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert any("checksums only" in note for note in comparison.test.notes)
    engine = comparison.engine
    rows = {r["golden_node"]: r for r in comparison.verdicts.token(2).rows}
    # every record before the faulty one has the same bits: equal checksums pass, whatever the size
    order = [r["golden_node"] for r in sorted(rows.values(), key=lambda r: r["order"])]
    assert all(rows[name]["outputs_passed"] for name in order[: order.index(fault)])
    assert rows[fault]["outputs_passed"] is False and rows[fault]["label"] == "local"
    output = next(p for n in comparison.pairing.node_pairs(2) if n.golden == fault for p in n.outputs)
    row = engine.tensor_row(output)
    assert row["golden_checksum"] != row["test_checksum"] and row["norm_diff"] is None


def test_a_matching_checksum_passes_and_a_differing_one_leaves_md5_statistics_to_decide():
    thresholds = Thresholds()
    base = Stats(1.0, -1.0, 0.1, 3.0, "float32", (4,), checksum="d85f0826")
    off = Stats(1.5, -1.0, 0.1, 3.0, "float32", (4,), checksum="d85f0826")
    # the same bits: a pass, even where statistics of another run would disagree
    assert stats_passed(compare_stats(base, off), thresholds)
    near = Stats(1.0, -1.0, 0.1, 3.0, "bfloat16", (4,), checksum="00000001")
    assert stats_passed(compare_stats(base, near), thresholds)  # md5: other bits, statistics within
    far = Stats(2.0, -1.0, 0.1, 6.0, "bfloat16", (4,), checksum="00000001")
    assert not stats_passed(compare_stats(base, far), thresholds)
    xor_g = Stats(None, None, None, None, "float32", (4,), checksum="0x1")
    xor_t = Stats(None, None, None, None, "float32", (4,), checksum="0x2")
    assert not stats_passed(compare_stats(xor_g, xor_t), thresholds)
    assert stats_passed(compare_stats(xor_g, xor_g), thresholds)


def test_statistics_against_checksums_only_is_an_error_that_says_so():
    row = compare_stats(
        Stats(1.0, -1.0, 0.1, 3.0, "float32", (4,)),
        Stats(None, None, None, None, "float32", (4,), checksum="0x2"),
    )
    assert "nothing recorded on both sides" in str(row["error"])
    assert "checksum" in str(row["error"]) and "max" in str(row["error"])


# --- nan_check ----------------------------------------------------------------------------------


def _as_nan_check(dump_json: Path, nan_from: str | None) -> None:
    """A statistics dump.json rewritten as task nan_check writes it (msprobe 26.2):

    * a tensor entry keeps type, dtype, shape and requires_grad only
      (core/dump/data_dump/data_processor/pytorch_processor.py, ``_analyze_tensor`` of the NaN
      checker, lines 1159-1168);
    * each record gets ``is_nan`` (core/dump/data_dump/json_writer.py, ``_replace_nan_placeholders``,
      lines 145-155): here true from record ``nan_from`` on, in dump.json order.
    """
    dump = json.loads(dump_json.read_text(encoding="utf-8"))
    dump["task"] = "nan_check"
    flag = False
    for name, entry in dump["data"].items():
        _strip_statistics(entry)
        flag = flag or name == nan_from
        entry["is_nan"] = flag
    dump_json.write_text(json.dumps(dump), encoding="utf-8")


def _strip_statistics(item: Any) -> None:
    if isinstance(item, dict):
        if item.get("type") == "torch.Tensor":
            for key in ("Max", "Min", "Mean", "Norm", "md5"):
                item.pop(key, None)
        for value in item.values():
            _strip_statistics(value)
    elif isinstance(item, list):
        for value in item:
            _strip_statistics(value)


def test_nan_check_finds_the_first_call_that_made_a_nan(model_case, tmp_path):
    source = model_case("llama-msprobe-L1-statistics")
    fault = _case(source)["fault_record"]
    for side in ("golden", "test"):
        shutil.copytree(source / side, tmp_path / side)
        _as_nan_check(_dump_json(tmp_path / side), fault if side == "test" else None)
    comparison = open_comparison(tmp_path / "golden", tmp_path / "test", CompareOptions(cache=False))
    assert any("nan_check" in note for note in comparison.test.notes)
    assert any("without statistics" in note for note in comparison.test.notes)
    engine = comparison.engine
    assert engine.first_failing_token() == 2
    op = comparison.verdicts.culprit(2)
    assert op is not None and op["golden_node"] == fault and op["label"] == "local"
    assert all(r["outputs_passed"] for r in comparison.verdicts.token(1).rows)


# --- null statistics, Triton, NPU records -------------------------------------------------------


def _write_dump(folder: Path, data: dict[str, Any], task: str = "statistics") -> Path:
    rank = folder / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(
        json.dumps(
            {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
        ),
        encoding="utf-8",
    )
    (rank / "construct.json").write_text("{}", encoding="utf-8")
    return rank / "dump.json"


def _tensor(**stats: Any) -> dict[str, Any]:
    return {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2, 8], **stats}


def test_null_statistics_of_nz_tensors_are_not_compared(tmp_path):
    full = {"Max": 1.0, "Min": -1.0, "Mean": 0.0, "Norm": 2.0}
    nz = {"Max": None, "Min": None, "Mean": None, "Norm": None}  # msprobe writes null for NZ format
    _write_dump(
        tmp_path,
        {"NPU.npu_format_cast.0.forward": {"input_args": [_tensor(**full)], "output": [_tensor(**nz)]}},
    )
    index = open_dump(tmp_path)
    refs = index.tokens[0]["NPU.npu_format_cast.0.forward"]
    assert [r.slot for r in refs] == ["input.0"]
    assert any("1 tensors are recorded without statistics" in note for note in index.notes)
    assert index.tree.nodes["NPU.npu_format_cast.0.forward"].type == "npu_format_cast"


def test_a_triton_kernel_is_judged_by_what_fed_it_and_its_arguments_after(tmp_path):
    stats = {"Max": 1.0, "Min": -1.0, "Mean": 0.0, "Norm": 2.0}
    _write_dump(
        tmp_path,
        {
            "Triton.fused_rms_kernel.0.forward": {
                "input_args": [_tensor(**stats), _tensor(**stats)],
                "input_kwargs": {},
                "output": [_tensor(**stats), _tensor(**stats)],
            }
        },
    )
    index = open_dump(tmp_path)
    refs = index.tokens[0]["Triton.fused_rms_kernel.0.forward"]
    assert {r.role for r in refs} == {"output"} and len(refs) == 2
    assert any("Triton kernel calls" in note for note in index.notes)


# --- level debug --------------------------------------------------------------------------------


def test_debug_saves_are_tokens_by_step_and_nodes_by_save(model_case):
    folder = model_case("llama-msprobe-debug")
    index = open_dump(folder / "test")
    assert index.format == "msprobe-debug"
    assert sorted(index.tokens) == [0, 1, 2, 3]
    assert list(index.tokens[0]) == [
        "mlp0.0.debug",
        "layer0.0.debug",
        "mlp1.0.debug",
        "layer1.0.debug",
        "logits.0.debug",
    ]
    assert all(ref.has_data for refs in index.tokens[2].values() for ref in refs)


def test_a_damaged_debug_json_loses_its_step_only(model_case, tmp_path):
    source = model_case("llama-msprobe-debug")
    shutil.copytree(source / "test", tmp_path / "test")
    broken = next((tmp_path / "test").glob("step1/*/debug.json"))
    broken.write_text("{ not json", encoding="utf-8")
    index = open_dump(tmp_path / "test")
    assert sorted(index.tokens) == [0, 2, 3]
    assert [p.path for p in index.problems] == [str(broken)]
    comparison = open_comparison(source / "golden", tmp_path / "test", CompareOptions(cache=False))
    assert comparison.engine.first_failing_token() == 2


# --- risk_level FOCUS ---------------------------------------------------------------------------


def test_focus_gaps_are_named_and_looked_past(model_case):
    folder = model_case("llama-msprobe-L1-focus")
    comparison = open_comparison(folder / "golden", folder / "test", CompareOptions(cache=False))
    assert any("risk_level FOCUS" in note for note in comparison.test.notes)
    assert not any("risk_level FOCUS" in note for note in comparison.golden.notes)  # dumped with ALL
    absent = comparison.pairing.absent_before(2)
    kinds = {u.name.rsplit(".", 2)[0] for records in absent.values() for u in records}
    assert {"Tensor.transpose", "Tensor.reshape"} <= kinds
    assert all(u.side == "golden" for records in absent.values() for u in records)
    # each lands on the first paired operator after it: none lies between the record and its operator
    golden = comparison.golden
    order = [n.name for n in golden.tree.preorder() if n.name in golden.tokens[2]]
    at = {name: i for i, name in enumerate(order)}
    paired = sorted(at[p.golden] for p in comparison.pairing.node_pairs(2))
    for operator, records in absent.items():
        for record in records:
            assert at[record.name] < at[operator]
            assert not [i for i in paired if at[record.name] < i < at[operator]], (record.name, operator)
    # every operator of the token is judged on its inputs: no gap leaves one unjudged
    rows = comparison.verdicts.token(2).rows
    with_inputs = [r for r in rows if r["inputs_passed"] is not None or r["inputs_from"] != "files"]
    assert with_inputs and all(r["inputs_effective"] is not None for r in with_inputs)
    # a record right after a gap: its inputs come from its own files, not from the absent record
    after_gap = next(r for r in rows if r["golden_node"] in absent and r["inputs_passed"] is not None)
    assert after_gap["inputs_from"] == "files"


# --- a serving engine's steps -------------------------------------------------------------------


def test_a_serving_dump_has_a_token_per_step_and_skipped_steps_are_said(model_case):
    folder = model_case("llama-msprobe-L0-serving")  # test: start/stop/step around each forward pass
    test = open_dump(folder / "test")
    assert sorted(test.tokens) == [0, 1, 2, 3]
    assert dict(test.exec_counts) == {0: 0, 1: 1, 2: 3, 3: 4}  # step 2 was another request's
    assert any("the steps are the tokens" in n and "steps 0-1, 3-4 were dumped" in n for n in test.notes)
    # each step's records are named as in the first: the module tree is the same one
    assert all(set(test.tokens[t]) == set(test.tokens[0]) for t in test.tokens)
    assert not open_dump(folder / "golden").exec_counts  # the golden: one step, four passes in it
    one = open_dump(folder / "test" / "step3")  # a step folder passed: that step alone
    assert sorted(one.tokens) == [0] and not any("steps are the tokens" in n for n in one.notes)


def test_a_damaged_step_of_a_serving_dump_is_named_and_the_others_compared(model_case, tmp_path):
    source = model_case("llama-msprobe-L0-serving")
    shutil.copytree(source / "test", tmp_path / "test")
    broken = next((tmp_path / "test").glob("step1/*/dump.json"))
    broken.write_text('{"data": ', encoding="utf-8")
    index = open_dump(tmp_path / "test")
    assert sorted(index.tokens) == [0, 1, 2] and dict(index.exec_counts) == {0: 0, 1: 3, 2: 4}
    assert [p.path for p in index.problems] == [str(broken)]
    assert "step 1 is not compared" in index.problems[0].message


def test_steps_holding_several_passes_each_read_the_newest(model_case, tmp_path):
    source = model_case("llama-msprobe-L1-statistics")
    shutil.copytree(source / "test", tmp_path / "test")
    (tmp_path / "test" / "step0").rename(tmp_path / "test" / "step7")
    shutil.copytree(source / "test" / "step0", tmp_path / "test" / "step2")
    index = open_dump(tmp_path / "test")
    assert sorted(index.tokens) == [0, 1, 2, 3]
    assert index.data_dir.parent.name == "step7"
    assert any("holds 2 steps; reading the last, step7" in note for note in index.notes)


# --- which reader --------------------------------------------------------------------------------


def test_a_dump_json_or_debug_json_passed_as_a_file_is_read(model_case):
    dump_json = _dump_json(model_case("llama-msprobe-L1-xor") / "test")
    assert sorted(open_dump(dump_json).tokens) == [0, 1, 2, 3]
    debug_json = next((model_case("llama-msprobe-debug") / "test").glob("step0/*/debug.json"))
    assert open_dump(debug_json).format == "msprobe-debug"


def test_an_eager_dump_json_copied_alone_stays_eager(model_case, tmp_path):
    """Graph mode writes a dump.json alone too; eager tensors carry requires_grad, graph mode's not."""
    rank = tmp_path / "step0" / "proc1"
    rank.mkdir(parents=True)
    shutil.copy(_dump_json(model_case("llama-msprobe-L1-statistics") / "test"), rank / "dump.json")
    index = open_dump(tmp_path)
    assert sorted(index.tokens) == [0, 1, 2, 3]  # eager L1: its forward passes, not one step-token
    assert [p.path for p in index.problems] == [str(rank / "construct.json")]


def test_debug_saves_of_ranks_that_saved_different_things_are_not_merged(model_case, tmp_path):
    """Two ranks of level-debug saves (the real dump's, copied), rank 1 without one save: names are
    per rank save counters, nothing tells which saves are one, so even --gather compares rank 0
    alone and says why."""
    source = model_case("llama-msprobe-debug")
    for step in sorted((source / "test").glob("step*")):
        (found,) = step.iterdir()
        for rank in (0, 1):
            shutil.copytree(found, tmp_path / "test" / step.name / f"rank{rank}")
        saves = tmp_path / "test" / step.name / "rank1" / "debug.json"
        debug = json.loads(saves.read_text(encoding="utf-8"))
        debug["data"] = {k: v for k, v in debug["data"].items() if not k.startswith("mlp1.")}
        saves.write_text(json.dumps(debug), encoding="utf-8")
    comparison = open_comparison(
        source / "golden", tmp_path / "test", CompareOptions(cache=False, gather=True)
    )
    assert comparison.test.format == "msprobe-debug" and comparison.test.rank == 0
    assert any("did not all run the same calls" in note for note in comparison.test.notes)


# --- outputs written as an object ---------------------------------------------------------------


def test_an_object_of_outputs_names_each_by_its_key_as_msprobe_does(tmp_path: Path) -> None:
    """msprobe's compare names an object's items by their keys and a list's by their indices
    (core/compare/utils.py ``op_item_parse``): ``{"0": t}`` is ``output.0``, as ``[t]`` is, and a
    list holding ``{"logits": t}`` is ``output.0.logits``."""
    from tui_acc.dumps.msprobe.refs import RefBuilder

    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0,
              "Mean": 0.5, "Norm": 1.0}  # fmt: skip
    builder = RefBuilder(tmp_path, tmp_path / "dump.json")
    slots = {
        written: [r.slot for r in builder.refs("Module.m.M.forward.0", {"output": output})]
        for written, output in (
            ("object", {"0": tensor, "1": tensor}),
            ("list", [tensor, tensor]),
            ("list of objects", [{"logits": tensor}]),
            ("one tensor", tensor),
        )
    }
    assert slots == {
        "object": ["output.0", "output.1"],
        "list": ["output.0", "output.1"],
        "list of objects": ["output.0.logits"],
        "one tensor": ["output.0"],
    }
    assert builder.problems == []


def test_debug_copies_named_step01_or_rank01_are_named_and_not_read(model_case, tmp_path):
    source = model_case("llama-msprobe-debug")
    shutil.copytree(source / "test", tmp_path / "test")
    rank = next((tmp_path / "test").glob("step1/*/debug.json")).parent
    shutil.copytree(rank, rank.with_name("rank01"))
    shutil.copytree(rank.parent, rank.parent.with_name("step01"))
    index = open_dump(tmp_path / "test")
    said = {Path(p.path).name: p.message for p in index.problems}
    assert "without leading zeros" in said["rank01"] and "without leading zeros" in said["step01"]
    assert sorted(index.tokens) == [0, 1, 2, 3]
