"""msprobe compare's mapping files (-dm data mapping, -lm layer mapping) for msprobe dumps whose
names differ: a copy of the compact reference's golden whose test side calls ``self_attn``
``attn`` and ``o_proj`` ``dense``, with one faulty ``o_proj`` call, and record lists whose expected
partners are what msprobe 26.2's ``generate_api_mapping_by_layer_mapping`` returns for them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tui_acc.cli.main import main
from tui_acc.dumps import DumpError
from tui_acc.pairing.msprobe_layers import compile_rules, map_records
from tui_acc.session import CompareOptions, open_comparison

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference"
RENAMES = ((".self_attn.", ".attn."), (".o_proj.", ".dense."))
FAULTY = "Module.model.layers.1.self_attn.o_proj.Linear.forward.1"  # golden name; token 1
LAYER_RULES = "LlamaDecoderLayer:\n  attn: self_attn\nLlamaAttention:\n  dense: o_proj\n"


def _renamed(name: str) -> str:
    for old, new in RENAMES:
        name = name.replace(old, new)
    return name


@pytest.fixture(scope="module")
def renamed_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """golden: the reference's fp32 golden; test: the same run under other module names, with the
    output of one o_proj call (and so the token's logits) negated."""
    root = tmp_path_factory.mktemp("renamed")
    golden = root / "golden"
    shutil.copytree(REFERENCE / "msprobe-L0" / "tensor" / "golden", golden)
    (source,) = golden.glob("step0/*")
    target = root / "test" / "step0" / source.name
    (target / "dump_tensor_data").mkdir(parents=True)

    def rename_files(value: object) -> object:
        if isinstance(value, dict):
            return {k: _renamed(v) if k == "data_name" else rename_files(v) for k, v in value.items()}
        return [rename_files(v) for v in value] if isinstance(value, list) else value

    dump = json.loads((source / "dump.json").read_text(encoding="utf-8"))
    dump["data"] = {_renamed(k): rename_files(v) for k, v in dump["data"].items()}
    for record in (_renamed(FAULTY), "Module.lm_head.Linear.forward.1"):  # negated below, as msprobe saw it
        output = dump["data"][record]["output"][0]
        output["Max"], output["Min"] = -output["Min"], -output["Max"]
        output["Mean"] = -output["Mean"]
    (target / "dump.json").write_text(json.dumps(dump, indent=1), encoding="utf-8")
    construct = json.loads((source / "construct.json").read_text(encoding="utf-8"))
    renamed = {_renamed(k): _renamed(v) if v else v for k, v in construct.items()}
    (target / "construct.json").write_text(json.dumps(renamed, indent=1), encoding="utf-8")
    shutil.copy(source / "stack.json", target / "stack.json")
    for file in (source / "dump_tensor_data").iterdir():
        shutil.copy(file, target / "dump_tensor_data" / _renamed(file.name))
    for record in (_renamed(FAULTY), "Module.lm_head.Linear.forward.1"):
        path = target / "dump_tensor_data" / f"{record}.output.0.pt"
        torch.save(-torch.load(path, weights_only=True), path)
    return golden, root / "test"


def _report(golden: Path, test: Path, *options: str, capsys: pytest.CaptureFixture[str]) -> dict:
    code = main(["report", str(golden), str(test), "--json", "--no-cache", *options])
    result = json.loads(capsys.readouterr().out)
    result["exit"] = code
    return result


def test_without_a_mapping_the_renamed_records_stay_unpaired(renamed_pair, capsys) -> None:
    result = _report(*renamed_pair, capsys=capsys)
    unmatched = {(u["side"], u["name"]) for u in result["unmatched"]}
    assert ("golden", FAULTY) in unmatched and ("test", _renamed(FAULTY)) in unmatched
    assert (result["first_failing_op"] or {}).get("golden") != FAULTY


@pytest.mark.parametrize("kind", ["layer", "data"])
def test_a_mapping_pairs_them_and_the_faulty_call_is_found(renamed_pair, tmp_path, capsys, kind) -> None:
    golden, test = renamed_pair
    if kind == "layer":
        option = ["-lm", str(tmp_path / "layers.yaml")]
        (tmp_path / "layers.yaml").write_text(LAYER_RULES, encoding="utf-8")
    else:  # every renamed tensor as msprobe compare names it: the file name without .pt (kwargs.x)
        (files,) = test.glob("step0/*/dump_tensor_data")
        names = [f.name.removesuffix(".pt") for f in sorted(files.iterdir())]
        lines = [
            f"{name}: {name.replace('.attn.', '.self_attn.').replace('.dense.', '.o_proj.')}"
            for name in names
        ]
        assert any(".kwargs." in line for line in lines)
        option = ["--data-mapping", str(tmp_path / "data.yaml")]
        (tmp_path / "data.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = _report(golden, test, *option, capsys=capsys)
    assert result["exit"] == 1 and result["unmatched"] == []
    assert result["first_failing_token"] == 1
    found = result["first_failing_op"]
    assert (found["golden"], found["test"], found["inputs_passed"]) == (FAULTY, _renamed(FAULTY), True)
    assert any(note.startswith("msprobe name mapping:") for note in result["notes"])


def test_data_mapping_keeps_unnamed_tensors_and_drops_na_partners(renamed_pair, tmp_path) -> None:
    """As msprobe: a name the file does not list keeps its own; a golden name N/A pairs with nothing."""
    golden, test = renamed_pair
    record = "Module.model.layers.0.self_attn.o_proj.Linear.forward.0"
    mapping = tmp_path / "data.yaml"
    mapping.write_text(
        f"{_renamed(record)}.input.0: {record}.input.0\n{_renamed(record)}.output.0: N/A\n"
        "Module.nowhere.Linear.forward.0.input.0: Module.nowhere.Linear.forward.0.input.0\n",
        encoding="utf-8",
    )
    cmp = open_comparison(golden, test, CompareOptions(data_mapping=mapping, cache=False))
    (pair,) = [p for p in cmp.pairing.node_pairs(0) if p.golden == record]
    assert pair.test == _renamed(record) and [t.slot for t in pair.tensors] == ["input.0"]
    assert pair.tensors[0].test.path.name == f"{_renamed(record)}.input.0.pt"
    unmatched = {(u.side, u.name) for u in cmp.pairing.unmatched}
    assert ("test", f"{_renamed(record)}/output.0") in unmatched
    embedding = "Module.model.embed_tokens.Embedding.forward.0"  # not renamed, not listed: by name
    assert any(p.golden == p.test == embedding for p in cmp.pairing.node_pairs(0))
    assert any("1 of its names are not records of the test dump" in n for n in cmp.pairing.notes)


def test_layer_mapping_without_a_file_pairs_by_layer_position() -> None:
    case = REFERENCE / "msprobe-L0" / "statistics"
    cmp = open_comparison(case / "golden", case / "test", CompareOptions(layer_mapping=True, cache=False))
    assert cmp.pairing.unmatched == [] and cmp.pairing.tensor_pair_count() > 0
    assert all(p.golden == p.test for t in cmp.pairing.tokens for p in cmp.pairing.node_pairs(t))


# --- the layer rules, against msprobe's own answers ---------------------------------------------


def _records(model: str, attn: str, dense: str, ffn: str, out: str, offset: int, extra: bool) -> list:
    """Two tokens of a two-layer model in dump.json order (children first), with their parents."""
    records: list[tuple[str, str | None]] = []
    for t in range(2):
        top, emb = f"Module.{model}.Net.forward.{t}", f"Module.{model}.embed.Embedding.forward.{t}"
        records += [(f"Functional.embedding.{t}.forward", emb), (emb, top)]
        for layer in range(2):
            at = f"{model}.layers.{layer}"
            block, a = f"Module.{at}.Block.forward.{t}", f"Module.{at}.{attn}.Attn.forward.{t}"
            d, mlp = f"Module.{at}.{attn}.{dense}.Linear.forward.{t}", f"Module.{at}.{ffn}.MLP.forward.{t}"
            o, k = f"Module.{at}.{ffn}.{out}.Linear.forward.{t}", 2 * (2 * t + layer)
            records += [
                (f"Torch.matmul.{k + offset // 3}.forward", a),
                (f"Torch.matmul.{k + 1 + offset // 3}.forward", a),
                (f"Functional.linear.{k + offset}.forward", d),
                (d, a),
            ]
            records += [(f"Module.{at}.{attn}.rotary.Rotary.forward.{t}", a)] if extra else []
            records += [
                (a, block),
                (f"Functional.linear.{k + 1 + offset}.forward", o),
                (o, mlp),
                (mlp, block),
            ]
            records += [(block, top)]
        records += [(top, None), (f"Tensor.argmax.{t}.forward", None)]
    return records


def test_layer_rules_place_records_as_msprobe_does() -> None:
    golden = _records("model", "self_attn", "o_proj", "mlp", "down_proj", 0, extra=False)
    test = _records("net", "attn", "dense", "ffn", "out", 10, extra=True)  # API counters run ahead
    rules = compile_rules(
        {
            "Cell": {"net": "model"},  # msprobe's old name for the top
            "Block": {"attn": "self_attn", "ffn.out": "mlp.down_proj", "ffn": "mlp"},
            "Attn": {"dense": "o_proj(Linear)"},
        }
    )
    partners = map_records(golden, test, rules)
    assert len(partners) == 48 and sum(v is None for v in partners.values()) == 4
    assert partners["Module.net.layers.1.attn.dense.Linear.forward.1"] == (
        "Module.model.layers.1.self_attn.o_proj.Linear.forward.1"
    )
    assert partners["Module.net.layers.0.ffn.out.Linear.forward.0"] == (
        "Module.model.layers.0.mlp.down_proj.Linear.forward.0"
    )
    assert partners["Module.net.layers.0.ffn.MLP.forward.1"] == "Module.model.layers.0.mlp.MLP.forward.1"
    assert partners["Functional.linear.13.forward"] == "Functional.linear.3.forward"  # by place, not counter
    assert partners["Torch.matmul.3.forward"] == "Torch.matmul.0.forward"
    assert partners["Module.net.layers.0.attn.rotary.Rotary.forward.0"] is None
    assert partners["Module.net.Net.forward.1"] == "Module.model.Net.forward.1"
    assert partners["Tensor.argmax.1.forward"] == "Tensor.argmax.1.forward"


def test_pipeline_stages_are_renumbered_from_their_first_layer() -> None:
    """msprobe's renumber pass: a stage's ParallelTransformer holding layers 4, 5 meets layers 0, 1."""

    def stage(first: int) -> list[tuple[str, str | None]]:
        top, decoder = (
            "Module.module.GPTModel.forward.0",
            "Module.module.decoder.ParallelTransformer.forward.0",
        )
        records: list[tuple[str, str | None]] = []
        for i in (first, first + 1):
            layer = f"Module.module.decoder.layers.{i}.ParallelTransformerLayer.forward.0"
            records += [
                (f"Module.module.decoder.layers.{i}.mlp.dense.Linear.forward.0", layer),
                (layer, decoder),
            ]
        return [*records, (decoder, top), (top, None)]

    partners = map_records(stage(0), stage(4), {})
    assert partners["Module.module.decoder.layers.5.mlp.dense.Linear.forward.0"] == (
        "Module.module.decoder.layers.1.mlp.dense.Linear.forward.0"
    )
    assert None not in partners.values()


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "text", "problem"),
    [
        ("data_mapping", "a: [b", "not valid YAML"),
        ("data_mapping", "- a\n- b\n", "expected a YAML mapping"),
        ("data_mapping", "", "expected a YAML mapping"),
        ("data_mapping", "a.input.0: 3\n", "both names must be strings"),
        ("layer_mapping", "LlamaAttention: dense\n", "must map child names to golden names"),
        ("layer_mapping", "LlamaAttention:\n  dense: [o_proj]\n", "names must be text"),
        ("layer_mapping", "\xff", "expected a YAML mapping"),
    ],
)
def test_a_bad_mapping_file_names_the_file_and_the_problem(tmp_path, option, text, problem) -> None:
    case = REFERENCE / "msprobe-L0" / "statistics"
    path = tmp_path / "mapping.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DumpError, match=problem) as error:
        open_comparison(case / "golden", case / "test", CompareOptions(cache=False, **{option: path}))
    assert str(path) in str(error.value)


def test_a_missing_mapping_file_or_other_formats_are_errors(tmp_path, capsys) -> None:
    msprobe = REFERENCE / "msprobe-L0" / "statistics"
    code = main(["report", str(msprobe / "golden"), str(msprobe / "test"), "-dm", str(tmp_path / "no.yaml")])
    assert code == 2 and "cannot read the mapping file" in capsys.readouterr().err
    msit = REFERENCE / "msit-torch-logits"
    (tmp_path / "layers.yaml").write_text(LAYER_RULES, encoding="utf-8")
    with pytest.raises(DumpError, match="pair two msprobe dumps; these are msit-torch"):
        open_comparison(
            msit / "golden",
            msit / "test",
            CompareOptions(layer_mapping=tmp_path / "layers.yaml", cache=False),
        )
