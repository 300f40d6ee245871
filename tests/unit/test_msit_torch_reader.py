"""Finding and indexing msit torch dumps from whatever folder a user passes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.model import NodeTree


def _device_dir(case: Path) -> Path:
    (found,) = case.glob("msit_dump_*/torch_tensors/*_*")
    return found


@pytest.mark.parametrize("level", ["dump_path", "msit_dump", "torch_tensors", "device"])
def test_accepts_every_natural_level(reference: Path, level: str) -> None:
    device = _device_dir(reference / "msit-torch-2layer" / "golden")
    path = {
        "dump_path": device.parents[2],
        "msit_dump": device.parents[1],
        "torch_tensors": device.parent,
        "device": device,
    }[level]
    index = open_dump(path)
    assert index.data_dir == device
    assert index.format == "msit-torch"
    # every token the run generated was dumped, 0..N-1 (the compact set keeps a prefix of them)
    generated = json.loads((reference / "msit-torch-2layer" / "golden_run.json").read_text())["generated"]
    assert sorted(index.tokens) == list(range(len(generated)))
    assert len(generated) >= 2


def test_a_token_folder_reads_that_token_only(reference: Path) -> None:
    device = _device_dir(reference / "msit-torch-2layer" / "golden")
    index = open_dump(device / "3")
    assert sorted(index.tokens) == [3]
    assert index.notes and "only token 3" in index.notes[0]


def test_index_lists_files_without_loading(reference: Path) -> None:
    index = open_dump(reference / "msit-torch-2layer" / "golden")
    refs = index.tensors(0, "root.model.layers.0.self_attn")
    assert [(r.slot, r.role) for r in refs] == [("output_0", "output"), ("output_1", "output")]
    rotary = index.tensors(0, "root.model.rotary_emb")
    assert [r.slot for r in rotary] == ["input_0", "output_0", "output_1"]
    assert index.tree.nodes["root.model.layers.1.mlp.act_fn"].type == "SiLUActivation"
    assert index.tree.nodes["root.model.layers.1.mlp.act_fn"].depth == 5
    assert index.problems == []


def test_copied_dump_is_ordered_by_data_flow(reference: Path, tmp_path: Path) -> None:
    """A copy (or a git checkout) stamps files in the order it writes them, alphabetically: those
    times must not be trusted. They are set here one microsecond apart, as a copy on a filesystem
    with fine timestamps leaves them, so the test does not depend on how coarse this one's are.
    The data flow orders what it can (real msit files: the input norm feeds q_proj inside
    self_attn, which msit's model_tree.json lists first); what it cannot stays in the tree's order,
    and the source says both."""

    copy = tmp_path / "golden"
    shutil.copytree(reference / "msit-torch-2layer" / "golden", copy)
    for i, path in enumerate(sorted(copy.rglob("*"))):
        os.utime(path, ns=(1_700_000_000_000_000_000 + i * 1000,) * 2)
    index = open_dump(copy)
    assert index.order_source.startswith("data flow and model_tree.json (")
    assert not index.order_is_execution
    for layer in ("root.model.layers.0", "root.model.layers.1"):
        assert [c.rsplit(".", 1)[-1] for c in index.tree.children(layer)] == [
            "input_layernorm",
            "self_attn",
            "post_attention_layernorm",
            "mlp",
        ]
    # rotary_emb reads the embedding's output, but what it makes reaches the layers as keyword
    # arguments, which msit does not dump: nothing places it against them, so the tree's place stays
    assert index.tree.children("root.model")[-1] == "root.model.rotary_emb"


def test_fresh_dump_is_ordered_by_execution(demo_pair) -> None:
    index = open_dump(demo_pair.golden)
    assert index.order_source == "file times"
    assert index.tree.children("root.model")[:2] == ["root.model.embed_tokens", "root.model.rotary_emb"]
    layer = index.tree.children("root.model.layers.0")
    assert [c.rsplit(".", 1)[-1] for c in layer] == [
        "input_layernorm",
        "self_attn",
        "post_attention_layernorm",
        "mlp",
    ]


def test_file_times_that_contradict_the_tree_are_ignored(demo_pair, tmp_path: Path) -> None:

    copy = tmp_path / "golden"
    shutil.copytree(demo_pair.golden, copy)
    device = _device_dir(copy)
    # a parent that "finished" before its children cannot be an honest time stamp
    for path in (device / "0" / "root.model.layers.0").iterdir():
        os.utime(path, ns=(1, 1))
    index = open_dump(copy)
    assert index.order_source.startswith("data flow")


def test_newest_of_several_msit_dumps_is_read(reference: Path, tmp_path: Path) -> None:
    src = _device_dir(reference / "msit-torch-logits" / "golden").parents[1]
    for stamp in ("20200101_000000", "20300101_000000"):
        shutil.copytree(src, tmp_path / f"msit_dump_{stamp}")
    index = open_dump(tmp_path)
    assert "msit_dump_20300101_000000" in str(index.data_dir)
    assert any("newest" in note for note in index.notes)


def test_several_device_folders_are_ranks(reference: Path, tmp_path: Path) -> None:
    device = _device_dir(reference / "msit-torch-logits" / "golden")
    for name in ("npu10_3", "npu0_1", "npu2_2"):
        shutil.copytree(device, tmp_path / "torch_tensors" / name)
    first = open_dump(tmp_path / "torch_tensors")
    assert first.ranks == ["npu0_1", "npu2_2", "npu10_3"] and first.rank == 0
    assert first.data_dir.name == "npu0_1"
    assert "holds 3 ranks (npu0_1, npu2_2, npu10_3); comparing rank 0" in first.notes[0]
    assert open_dump(tmp_path / "torch_tensors", rank=2).data_dir.name == "npu10_3"
    with pytest.raises(DumpError, match=r"--rank 3 is out of range; it holds 3 ranks"):
        open_dump(tmp_path / "torch_tensors", rank=3)


def test_not_a_dump_says_what_was_expected(tmp_path: Path) -> None:
    (tmp_path / "something").mkdir()
    with pytest.raises(DumpError, match="not a dump tui-acc can read; expected ") as refused:
        open_dump(tmp_path)
    assert "an msit torch dump (model_tree.json, torch_tensors/" in str(refused.value)
    with pytest.raises(DumpError, match="no such file"):
        open_dump(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(
        DumpError, match=r"file.txt: not a tensor file tui-acc can read \(expected .pth, .pt, .bin\)"
    ):
        open_dump(tmp_path / "file.txt")


def test_statistics_dump_reads_its_csv_rows(reference: Path) -> None:
    index = open_dump(reference / "msit-torch-stats" / "golden")
    assert index.format == "msit-stats" and index.statistics_only
    rotary = index.tensors(0, "root.model.rotary_emb")
    assert [r.slot for r in rotary] == ["input_0", "output_0", "output_1"]
    assert rotary[1].stats is not None and rotary[1].stats.norm == 9.09484577178955
    assert rotary[1].stats.shape == (1, 6, 16) and rotary[1].stats.dtype == "float32"
    assert [r.slot for r in index.tensors(1, "root.lm_head")] == ["input_0", "output"]


def test_damaged_statistics_rows_are_reported(reference: Path, tmp_path: Path) -> None:
    device = _device_dir(reference / "msit-torch-stats" / "golden")
    copy = tmp_path / "dev_1"
    shutil.copytree(device, copy)
    csv_path = copy / "0" / "root.lm_head" / "statistics.csv"
    csv_path.write_text(csv_path.read_text().replace("Output,0", "Sideways,0"))
    index = open_dump(copy)
    assert [r.slot for r in index.tensors(0, "root.lm_head")] == ["input_0"]
    assert "line 3: not a statistics row (InputOutput is 'Sideways')" in index.problems[0].message


def test_damaged_model_tree_is_reported_and_the_tree_rebuilt(reference: Path, tmp_path: Path) -> None:
    device = _device_dir(reference / "msit-torch-2layer" / "golden")
    copy = tmp_path / "dev_1"
    shutil.copytree(device, copy)
    (copy / "model_tree.json").write_text('{"name": "root", "children": [', encoding="utf-8")
    index = open_dump(copy)
    assert len(index.problems) == 1
    assert (
        "model_tree.json" in index.problems[0].path and "unreadable module tree" in index.problems[0].message
    )
    # every module folder is still there, hung under its dotted prefix
    assert index.tree.nodes["root.model.layers.0.mlp.down_proj"].parent == "root.model.layers.0.mlp"
    assert index.tensors(2, "root.lm_head")


def test_api_mode_folders_hang_under_their_module(reference: Path, tmp_path: Path) -> None:
    device = _device_dir(reference / "msit-torch-2layer" / "golden")
    copy = tmp_path / "dev_1"
    shutil.copytree(device, copy)
    api = copy / "0" / "root.model.layers.0.self_attn.matmul"
    api.mkdir()
    shutil.copy(copy / "0" / "root.lm_head" / "output.pth", api / "output.pth")
    (copy / "0" / "root.lm_head" / "weird.pth").write_text("x")
    index = open_dump(copy)
    node = index.tree.nodes["root.model.layers.0.self_attn.matmul"]
    assert node.parent == "root.model.layers.0.self_attn" and node.type == "matmul"
    assert [p.message for p in index.problems] == ["unexpected tensor file name; not compared"]


def test_tree_helpers() -> None:
    raw = {"name": "root", "type": "M", "children": [{"name": "root.a", "type": "A", "children": []}]}
    from tui_acc.dumps.msit.torch_dump import _tree_from_json

    tree: NodeTree = _tree_from_json(raw)
    assert tree.leaf_chain_end() == "root.a"
    assert tree.is_ancestor("root", "root.a") and not tree.is_ancestor("root.a", "root")
    assert json.dumps([n.name for n in tree.preorder()]) == '["root", "root.a"]'
