"""msprobe's ATB probe layout (atb_dump_data/data/{dev}_{pid}/{exec}/..., info/ topology).

The probe needs an NPU: the demo's test run, exported as an msit ATB dump (atb_export.py), is
re-encoded file by file as the probe's source writes it (tui_acc/demo/probe_export.py, which cites
msprobe's lines), then compared with the demo's torch golden, where the injected fault is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tui_acc import CompareOptions, open_comparison
from tui_acc.demo.atb_export import export_atb
from tui_acc.demo.probe_export import ProbeOptions, export_probe
from tui_acc.dumps import DumpError, TensorLoadError, load_tensor, open_dump
from tui_acc.dumps.gather import gather, merge_parts
from tui_acc.dumps.model import SUM
from tui_acc.dumps.policy import ANYWHERE, LoadPolicy
from tui_acc.dumps.writers.atb_bin import write_bin

FAULT_OP = "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"
DEVICE = "0_4242"


@pytest.fixture(scope="module")
def probe(atb_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's test run in the probe's tensor layout (filter_level 1: shared tensors as aliases)."""
    _golden, plain, _ = atb_pair
    out = tmp_path_factory.mktemp("probe") / "run"
    export_probe([plain], out)
    return out


def _failing(golden: Path, test: Path, **kwargs: object) -> tuple[int | None, dict | None]:
    cmp = open_comparison(golden, test, CompareOptions(cache=False, **kwargs))  # type: ignore[arg-type]
    token = cmp.engine.first_failing_token()
    return token, cmp.verdicts.culprit(token) if token is not None else None


def _named(index, token: int) -> dict[str, list[str]]:
    return {name: [r.slot for r in refs] for name, refs in index.tokens[token].items() if refs}


def test_the_fault_is_found_in_the_tensor_layout(demo_pair, atb_pair, probe: Path) -> None:
    golden = atb_pair[0]
    index = open_dump(probe)
    assert index.format == "msprobe-atb" and not index.statistics_only and not index.problems
    assert sorted(index.tokens) == list(range(8)) and index.tree.root == "DecoderModel_Prefill"
    assert index.tree.nodes[FAULT_OP].type == "LinearOperation"
    token, op = _failing(golden, probe)
    assert token == demo_pair.fault_token
    assert op is not None and op["golden_node"] == demo_pair.fault_module and op["test_node"] == FAULT_OP
    assert op["label"] == "local"
    # every level a user passes reads the same dump
    for level in ("atb_dump_data", "atb_dump_data/data", f"atb_dump_data/data/{DEVICE}"):
        assert _named(open_dump(probe / level), 3) == _named(index, 3)


def test_an_alias_reads_the_tensor_it_names(probe: Path) -> None:
    mlp = probe / "atb_dump_data/data" / DEVICE / "3/3_LlamaLayer/3_MlpGateLayerV2"
    alias = mlp / "after/outtensor0.bin"
    assert b"\ndata=3_3_3_outtensor0.bin\n" in alias.read_bytes()  # written as an alias, no payload
    np.testing.assert_array_equal(
        load_tensor(alias, LoadPolicy.inside(probe)),
        load_tensor(mlp / "3_LinearOperation/after/outtensor0.bin", ANYWHERE),
    )


def test_a_kernel_tensor_the_probe_left_out_is_refused(tmp_path: Path) -> None:
    kernel = tmp_path / "atb_dump_data/data/0_1/0/0_Layer/0_MatMulKernel/before/intensor0.bin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"$Version=1.0\n$Object.Count=0\n$Object.Length=0\nformat=2\ndtype=0\ndims=2\n"
                       b"data=intensor0.bin\n$End=1\n")  # fmt: skip
    with pytest.raises(TensorLoadError, match="filter_level 2"):
        load_tensor(kernel, LoadPolicy.inside(tmp_path))


def test_kernels_are_nodes_below_their_operation(atb_pair, probe: Path, tmp_path: Path) -> None:
    """{id_Kernel} folders (save_child): children of the operation; the fault stays at the operation."""
    copy = tmp_path / "run"
    shutil.copytree(probe, copy)
    for op in (copy / "atb_dump_data/data" / DEVICE).glob("*/*/*/*_LinearOperation"):
        kernel = op / "0_MatMulKernel/after"
        kernel.mkdir(parents=True)
        shutil.copy(op / "after/outtensor0.bin", kernel / "outtensor0.bin")
    index = open_dump(copy)
    assert index.tree.nodes[FAULT_OP].children == [f"{FAULT_OP}/0_MatMulKernel"]
    assert index.tree.nodes[f"{FAULT_OP}/0_MatMulKernel"].type == "MatMulKernel"
    token, op = _failing(atb_pair[0], copy)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP


def test_types_come_from_info_and_a_broken_topology_falls_back(atb_pair, probe: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(probe, copy)
    model = copy / "atb_dump_data/info/model" / DEVICE / "DecoderModel_Prefill.json"
    graph = json.loads(model.read_text())
    graph["nodes"][3]["nodes"][3]["opType"] = "MlpLayer"  # what info/ says wins over the folder name
    model.write_text(json.dumps(graph))
    assert open_dump(copy).tree.nodes["3_LlamaLayer/3_MlpGateLayerV2"].type == "MlpLayer"
    model.write_text('{"modelName": "DecoderModel_Prefill", "nodes": [')
    index = open_dump(copy)
    assert [p.path for p in index.problems] == [str(model)]
    assert index.tree.nodes["3_LlamaLayer/3_MlpGateLayerV2"].type == "MlpGateLayerV2"
    token, op = _failing(atb_pair[0], copy)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP


def test_prefill_and_decode_topologies_map_executions_to_tokens(atb_pair, tmp_path: Path) -> None:
    """Two info/model files (MindIE's prefill and decode): execution 1 holds tokens 0 and 1."""
    golden, _plain, mindie = atb_pair
    out = tmp_path / "mindie"
    export_probe([mindie], out)
    index = open_dump(out)
    assert dict(index.exec_counts) == {0: 1, 1: 1, **{k: k for k in range(2, 8)}}
    assert "0_WordEmbedding" in index.tokens[0] and "7_WordEmbedding" in index.tokens[1]
    token, op = _failing(golden, out)
    # the decode model's layers carry the ids after the prefill model's (atb_probe.cpp:369)
    assert token == 3 and op is not None and op["test_node"] == f"10_{FAULT_OP.split('_', 1)[1]}"


def test_statistics_only_pairs_by_the_same_names(atb_pair, probe: Path, tmp_path: Path) -> None:
    golden, plain, _ = atb_pair
    stats = tmp_path / "stats"
    export_probe([plain], stats, ProbeOptions(task="statistics"))
    execution = stats / "atb_dump_data/data" / DEVICE / "3"
    assert not list(execution.rglob("*.bin")) and (execution / "statistic.csv").is_file()
    index = open_dump(stats)
    assert index.statistics_only and not index.problems
    tensors = open_dump(probe)
    assert _named(index, 3) == _named(tensors, 3)
    # the execution folder msprobe compare takes (-gp .../data/0_4242/3) names them alike
    assert _named(open_dump(execution), 3) == _named(tensors, 3)
    cmp = open_comparison(probe, stats, CompareOptions(cache=False))
    pairs = cmp.pairing.node_pairs(3)
    assert {p.golden for p in pairs} == {p.test for p in pairs} == set(_named(tensors, 3))
    token, op = _failing(golden, stats)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP and op["stats_only"]


def test_tensor_files_named_with_their_parameter(atb_pair, probe: Path, tmp_path: Path) -> None:
    golden, plain, _ = atb_pair
    named = tmp_path / "named"
    export_probe([plain], named, ProbeOptions(param_names=True))
    layer = named / "atb_dump_data/data" / DEVICE / "3/3_LlamaLayer"
    assert [p.name for p in (layer / "before").iterdir()] == ["intensor0_x.bin"]
    index = open_dump(named)
    assert not index.problems and _named(index, 3) == _named(open_dump(probe), 3)
    token, op = _failing(golden, named)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP
    # statistic.csv's Index is then "0_x" (msprobe atb_probe.cpp:854-864): the same slot
    csv_index = open_dump(layer.parent)
    assert not csv_index.problems and _named(csv_index, 3) == _named(index, 3)


def test_two_devices_are_ranks(demo_pair, atb_pair, tmp_path: Path) -> None:
    golden, plain, _ = atb_pair
    clean = export_atb(demo_pair.golden, tmp_path / "clean")  # a second device without the fault
    out = tmp_path / "two"
    export_probe([plain, clean], out)
    index = open_dump(out)
    assert index.ranks == ["0_4242", "1_4243"] and index.rank == 0
    assert any("2 ranks" in note for note in index.notes)
    assert _failing(golden, out)[0] == 3
    assert _failing(golden, out, rank=1)[0] is None
    assert open_dump(out, rank=1).data_dir.name == "1_4243"
    with pytest.raises(DumpError, match="--rank 2 is out of range"):
        open_dump(out, rank=2)
    # gathered: every rank holds the whole tensor here, so rank 0's is compared
    token, op = _failing(golden, out, gather=True)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP


def test_gather_sums_what_feeds_an_all_reduce(tmp_path: Path) -> None:
    """A row-parallel linear on two devices: its partial outputs and the all-reduce's inputs add up."""
    sources = []
    for rank, part in enumerate((torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0]))):
        layer = tmp_path / f"msit{rank}/tensors/0_1/0/0_Layer"
        write_bin(layer / "0_LinearOperation/after/outtensor0.bin", part)
        write_bin(layer / "1_AllReduceOperation/before/intensor0.bin", part)
        write_bin(layer / "1_AllReduceOperation/after/outtensor0.bin", torch.tensor([11.0, 22.0]))
        sources.append(tmp_path / f"msit{rank}")
    out = tmp_path / "tp2"
    export_probe(sources, out, ProbeOptions(filter_level=0))
    gathered = gather([open_dump(out, rank=0), open_dump(out, rank=1)])
    refs = {(name, r.slot): r for name, rs in gathered.tokens[0].items() for r in rs}
    linear = refs[("0_Layer/0_LinearOperation", "outtensor0")]
    reduce_in = refs[("0_Layer/1_AllReduceOperation", "intensor0")]
    assert linear.merge == reduce_in.merge == SUM
    assert refs[("0_Layer/1_AllReduceOperation", "outtensor0")].merge != SUM
    merged = merge_parts([load_tensor(p, ANYWHERE) for p in linear.parts], linear.merge, [2], linear.path)
    assert merged.tolist() == [11.0, 22.0]


def _bad_copy(probe: Path, tmp_path: Path) -> tuple[Path, Path]:
    copy = tmp_path / "bad"
    shutil.copytree(probe, copy)
    return copy, copy / "atb_dump_data/data" / DEVICE


def test_bad_files_are_named_and_the_rest_compared(atb_pair, probe: Path, tmp_path: Path) -> None:
    copy, device = _bad_copy(probe, tmp_path)
    odd = device / "0/1_LlamaLayer/before/intensorX.bin"
    (device / "0/1_LlamaLayer/before/intensor0.bin").rename(odd)
    params = device / "0/2_LlamaLayer/op_param.json"
    params.write_text("{not json")
    layer = copy / "atb_dump_data/info/layer" / DEVICE / "LlamaLayer_2.json"
    layer.write_text("[")
    for item in (device / "5").iterdir():  # an execution folder without anything in it
        shutil.rmtree(item) if item.is_dir() else item.unlink()
    index = open_dump(copy)
    problems = {p.path: p.message for p in index.problems}
    assert "unexpected tensor file name" in problems[str(odd)]
    assert "operation parameters" in problems[str(params)]
    assert "topology" in problems[str(layer)]
    assert "without any operation" in problems[str(device / "5")]
    assert 5 not in index.tokens and "1_LlamaLayer" in index.tokens[0]
    token, op = _failing(atb_pair[0], copy)
    assert token == 3 and op is not None and op["test_node"] == FAULT_OP


def test_an_execution_whose_operations_hold_no_tensors(probe: Path, tmp_path: Path) -> None:
    copy, device = _bad_copy(probe, tmp_path)
    for file in [*(device / "6").rglob("*.bin"), device / "6/statistic.csv"]:
        file.unlink()
    index = open_dump(copy)
    assert index.tokens[6] == {} or not any(index.tokens[6].values())
    assert any(p.path == str(device / "6") and "no tensor files" in p.message for p in index.problems)


def test_nothing_usable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "atb_dump_data/data/0_1/0").mkdir(parents=True)
    with pytest.raises(DumpError, match="no execution folder"):
        open_dump(tmp_path)
    (tmp_path / "empty/atb_dump_data/data").mkdir(parents=True)
    with pytest.raises(DumpError, match=r"no \{device\}_\{pid\} folder"):
        open_dump(tmp_path / "empty")
