"""msit ATB dumps: finding them, nesting, MindIE token alignment, symlinks, torch<->ATB pairing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.dumps import DumpError, open_dump
from tui_acc.dumps.writers.atb_bin import write_bin

FAULT_ATB = "3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation"


def _device(root: Path) -> Path:
    return root / "tensors" / "0_4242"


@pytest.mark.parametrize("level", ["dump_path", "msit_dump", "tensors", "device"])
def test_accepts_every_natural_level(atb_pair, level: str) -> None:
    _, plain, _ = atb_pair
    path = {
        "dump_path": plain.parent,
        "msit_dump": plain,
        "tensors": plain / "tensors",
        "device": _device(plain),
    }[level]
    index = open_dump(path)
    assert index.format == "msit-atb" and index.data_dir == _device(plain)
    assert sorted(index.tokens) == list(range(8))


def test_nested_children_three_levels_deep(atb_pair) -> None:
    _, plain, _ = atb_pair
    index = open_dump(plain)
    node = index.tree.nodes[FAULT_ATB]
    assert node.type == "LinearOperation" and node.depth == 3
    assert index.tree.nodes[node.parent].type == "MlpGateLayerV2"
    assert [r.slot for r in index.tensors(3, FAULT_ATB)] == ["outtensor0"]
    assert [r.slot for r in index.tensors(0, "1_LlamaLayer")] == ["intensor0", "outtensor0"]


def test_mindie_layout_aligns_tokens_automatically(atb_pair) -> None:
    golden, plain, mindie = atb_pair
    index = open_dump(mindie)
    assert sorted(index.tokens) == list(range(8))
    assert all(name.split("/")[0].split("_")[0] in {str(i) for i in range(7)} for name in index.tokens[0])
    assert all(int(name.split("/")[0].split("_")[0]) >= 7 for name in index.tokens[1])
    assert any("warm-up" in note for note in index.notes)
    # the same tensors as the plain layout, token for token
    a = open_comparison(golden, plain).engine.token_rows()
    b = open_comparison(golden, mindie).engine.token_rows()
    assert [r["cosine"] for r in a] == [r["cosine"] for r in b]


def test_mindie_with_a_transdata_operation_splits_one_later(atb_pair, tmp_path: Path) -> None:
    # msit numbers the top-level operations from the topology's first opName + 1 when the model ran
    # a TransdataOperation first (layer/{pid}/TransdataOperation_0.json): every folder id moves by 1
    golden, _, mindie = atb_pair
    shifted = tmp_path / mindie.name
    shutil.copytree(mindie, shifted)
    for folder in _device(shifted).iterdir():
        for node in sorted(folder.iterdir(), key=lambda p: -int(p.name.split("_", 1)[0])):
            number, kind = node.name.split("_", 1)
            node.rename(folder / f"{int(number) + 1}_{kind}")
    (shifted / "layer" / "4242").mkdir(parents=True, exist_ok=True)
    (shifted / "layer" / "4242" / "TransdataOperation_0.json").write_text("{}", encoding="utf-8")
    index = open_dump(shifted)
    assert {int(name.split("/")[0].split("_")[0]) for name in index.tokens[0]} == set(range(1, 8))
    assert all(int(name.split("/")[0].split("_")[0]) >= 8 for name in index.tokens[1])
    a = open_comparison(golden, mindie).engine.token_rows()
    b = open_comparison(golden, shifted).engine.token_rows()
    assert [r["cosine"] for r in a] == [r["cosine"] for r in b]


def test_token_offset_overrides_the_alignment(atb_pair) -> None:
    _, _, mindie = atb_pair
    index = open_dump(mindie, token_offset=1)
    assert sorted(index.tokens) == list(range(7))  # folders 1..7 -> tokens 0..6, warm-up (folder 0) dropped
    # no MindIE split: folder 1 is token 0 whole, encode and decode nodes together
    assert any(name.startswith("0_") for name in index.tokens[0])
    assert any(name.startswith("7_") for name in index.tokens[0])


def test_symlinked_tensors_resolve_and_broken_ones_are_reported(atb_pair, tmp_path: Path) -> None:
    _, plain, _ = atb_pair
    copy = tmp_path / "dump"
    shutil.copytree(plain, copy)
    device = _device(copy)
    target = device / "2" / "6_LmHead" / "after" / "outtensor0.bin"
    link = device / "3" / "6_LmHead" / "after" / "outtensor0.bin"
    link.unlink()
    link.symlink_to(target)  # what `msit llm dump -symlink` writes for identical tensors
    broken = device / "1" / "5_RmsNormOperation" / "after" / "outtensor0.bin"
    broken.unlink()
    broken.symlink_to(tmp_path / "gone.bin")
    index = open_dump(copy)
    assert index.problems == []  # token 1's folder is not even listed until token 1 is asked for
    assert "outtensor0" not in [r.slot for r in index.tokens[1]["5_RmsNormOperation"]]
    assert [p.message for p in index.problems] == [f"broken symlink to {tmp_path / 'gone.bin'}"]
    cmp = open_comparison(plain, copy)
    row = cmp.engine.tensor_row(cmp.pairing.logits_pair(3))
    assert row["error"] is None and row["test_path"] == str(link)


def test_demo_fault_is_named_on_both_sides(atb_pair, capsys) -> None:
    golden, plain, _ = atb_pair
    assert main(["report", str(golden), str(plain), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["test"]["format"] == "msit-atb"
    assert report["first_failing_token"] == 3
    op = report["first_failing_op"]
    assert (op["golden"], op["test"]) == ("root.model.layers.2.mlp.down_proj", FAULT_ATB)
    assert (op["golden_type"], op["test_type"]) == ("Linear", "LinearOperation")


def test_layers_and_operators_pair_by_order_and_type(atb_pair) -> None:
    golden, plain, _ = atb_pair
    cmp = open_comparison(golden, plain)
    pairs = {n.golden: n.test for n in cmp.pairing.node_pairs(5)}
    assert pairs["root.model.layers.3"] == "4_LlamaLayer"
    assert pairs["root.model.layers.3.self_attn"] == "4_LlamaLayer/1_Attention"
    assert pairs["root.model.layers.3.self_attn.v_proj"] == "4_LlamaLayer/1_Attention/2_LinearOperation"
    assert pairs["root.model.layers.3.mlp.act_fn"] == "4_LlamaLayer/3_MlpGateLayerV2/1_ActivationOperation"
    assert pairs["root.model.layers.3.post_attention_layernorm"] == "4_LlamaLayer/2_RmsNormOperation"
    assert pairs["root.model.embed_tokens"] == "0_WordEmbedding" and pairs["root.lm_head"] == "6_LmHead"
    unmatched = {(u.kind, u.side, u.name) for u in cmp.pairing.unmatched if u.token == 5}
    assert ("node", "golden", "root.model.rotary_emb") in unmatched  # ATB has no rotary op here


def test_mapping_files_pin_nodes_and_types(atb_pair, tmp_path: Path) -> None:
    golden, plain, _ = atb_pair
    toml = tmp_path / "map.toml"
    toml.write_text(
        '[nodes]\n"6_LmHead" = "root.model.norm"\n"5_RmsNormOperation" = "root.lm_head"\n', encoding="utf-8"
    )
    pairs = {
        n.golden: n.test
        for n in open_comparison(golden, plain, CompareOptions(mapping=toml)).pairing.node_pairs(1)
    }
    assert pairs["root.model.norm"] == "6_LmHead" and pairs["root.lm_head"] == "5_RmsNormOperation"
    # msit's JSON: an unknown ATB type made to stand for a torch type
    renamed = tmp_path / "renamed"
    shutil.copytree(plain, renamed)
    for folder in _device(renamed).glob("*/*_LlamaLayer/0_RmsNormOperation"):
        folder.rename(folder.with_name("0_FancyNormOp"))
    without = {n.golden: n.test for n in open_comparison(golden, renamed).pairing.node_pairs(1)}
    assert "root.model.layers.0.input_layernorm" not in without
    (tmp_path / "op_mapping_file.json").write_text(json.dumps({"FancyNormOp": ["RMSNorm"]}), encoding="utf-8")
    mapped = {
        n.golden: n.test
        for n in open_comparison(golden, renamed, CompareOptions(mapping=tmp_path)).pairing.node_pairs(1)
    }
    assert mapped["root.model.layers.0.input_layernorm"] == "1_LlamaLayer/0_FancyNormOp"


def test_bad_mapping_files_name_the_problem(atb_pair, tmp_path: Path) -> None:
    golden, plain, _ = atb_pair
    bad = tmp_path / "bad.json"
    bad.write_text('{"Linear Operation": "Linear"}', encoding="utf-8")
    with pytest.raises(DumpError, match=r"bad\.json: 'Linear Operation' is not a plain name"):
        open_comparison(golden, plain, CompareOptions(mapping=bad))
    toml = tmp_path / "bad.toml"
    toml.write_text("[typos]\nA = 'B'\n", encoding="utf-8")
    with pytest.raises(DumpError, match=r"bad\.toml: unknown section\(s\) \['typos'\]"):
        open_comparison(golden, plain, CompareOptions(mapping=toml))
    with pytest.raises(DumpError, match="cannot read the mapping file"):
        open_comparison(golden, plain, CompareOptions(mapping=tmp_path / "missing.toml"))


def test_a_root_holding_torch_and_atb_dumps_asks_which(atb_pair, demo_pair, tmp_path: Path) -> None:
    _, plain, _ = atb_pair
    shutil.copytree(plain, tmp_path / plain.name)
    torch_dump = next(demo_pair.golden.glob("msit_dump_*"))
    shutil.copytree(torch_dump, tmp_path / torch_dump.name)
    with pytest.raises(
        DumpError,
        match="holds both an msit ATB dump and an msit torch dump; pass the tensors/ or the torch_tensors/",
    ):
        open_dump(tmp_path)


def test_single_files_compare_directly(atb_pair, demo_pair, capsys, tmp_path: Path) -> None:
    _, plain, _ = atb_pair
    pth = next(demo_pair.golden.glob("msit_dump_*/torch_tensors/*/3/root.lm_head/output.pth"))
    binf = _device(plain) / "3" / "6_LmHead" / "after" / "outtensor0.bin"
    assert main(["report", str(pth), str(binf), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["golden"]["format"] == report["test"]["format"] == "tensor"
    assert report["tensor"]["numel"] == 512 and report["tensor"]["cosine"] < 0.999
    same = write_bin(tmp_path / "outtensor0.copy.bin", torch.zeros(1))  # never into the shared dump
    assert same.exists()


def test_token_folders_are_walked_only_when_asked_and_late_nodes_join_the_tree(
    atb_pair, tmp_path: Path
) -> None:
    _, plain, _ = atb_pair
    copy = tmp_path / "dump"
    shutil.copytree(plain, copy)
    device = _device(copy)
    extra = device / "5" / "7_ExtraOperation" / "after"
    extra.mkdir(parents=True)
    shutil.copyfile(device / "5" / "6_LmHead" / "after" / "outtensor0.bin", extra / "outtensor0.bin")
    index = open_dump(copy)
    assert list(index.tokens) == list(range(8)) and index.exec_counts == {t: t for t in range(8)}
    assert not any(index.tokens.is_built(t) for t in range(1, 8))  # type: ignore[attr-defined]
    before = index.tree.nodes
    assert "7_ExtraOperation" not in before
    assert "7_ExtraOperation" in index.tokens[5]
    assert (
        "7_ExtraOperation" in index.tree.nodes
        and index.tree.children(index.tree.root)[-1] == "7_ExtraOperation"
    )
    assert "7_ExtraOperation" not in before  # copy-on-write: a walk in progress keeps its snapshot
