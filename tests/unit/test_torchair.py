"""TorchAir's graph mode: a GE dump against its FX golden (tests/data/torchair/llama.tar.xz, made by
scripts/make_torchair_fixtures.py as TorchAir's fx_dumper.py and GE's dump write them).

A small Llama in bf16 traced into a prefill and a decode graph, run prefill then decode twice
(tokens 0, 1, 2). The GE dumps hold a fused op (layer 0's silu and mul), an inserted Cast in no
graph text, and the lm_head's weight in FRACTAL_NZ; in ``ge-fault`` layer 1's down-projection
MatMul is wrong at token 2; ``ge-nofusion`` is the clean run with fusion off.
Where the fault is, and what each GE op computes, is the generator's
record (case.json), not tui-acc's reading of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import local_operators
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import load_tensor
from tui_acc.dumps.torchair.graph_text import GraphTextError, parse, read_graph
from tui_acc.reports.pair import build_report

GRAPH_TEXT = """name: "graph_1"
op {
  name: "arg0_1"
  type: "Data"
  output_desc { name: "y" dtype: DT_FLOAT16 shape { dim: 2 dim: 3 } layout: "ND" }
}
op {
  name: "Add_2"
  type: "Add"
  input: "arg0_1:0"
  input: "Mul:0"
  input: "Foo:-1"
  attr { key: "nn_module_stack" value { s: "{'L__self___layers_0': ('layers.0', <class 'x.Layer'>), "
    "'L__self___layers_0_mlp': ('layers.0.mlp', <class 'x.MLP'>)}" } }
  output_desc {
    name: "y"  # a comment
    dtype: DT_FLOAT16
    shape { dim: 2 dim: 3 }
    attr { key: "_fx_tensor_name" value { s: "add_1-aten.add." "Tensor.OUTPUT.1" } }
  }
}
"""


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def test_graph_text_gives_each_op_its_fx_node_inputs_and_module(tmp_path: Path) -> None:
    """The doc's own op (torchair graph_dump.md): control edges are not data, adjacent strings are
    one, the output index is the one ``_fx_tensor_name`` carries, the module the innermost path."""
    path = tmp_path / "dynamo_original_graph_1_rank_0_pid_7_ts_20240101.txt"
    path.write_text(GRAPH_TEXT, encoding="utf-8")
    graph = read_graph(path, LoadPolicy.inside(tmp_path))
    assert (graph.graph_id, graph.rank, graph.name) == (1, 0, "graph_1")
    add = graph.ops["Add_2"]
    assert add.inputs == ["arg0_1:0", "Mul:0"]
    assert (add.fx_outputs, add.fx_indices, add.output_shapes) == (["add_1-aten.add.Tensor"], [1], [(2, 3)])
    assert add.module == "layers.0.mlp"
    assert graph.ops["arg0_1"].fx_node is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("op { name: 'x' ", "ends inside"),
        ("op } ", "unbalanced"),
        ("op { name 'x' }", "a string without"),
        ("a: ~", "line 1: unexpected character '~'"),
        ('# one\na: 1 # two\n\n  b: "c\n', "line 4: unexpected character '\"'"),
        ("a {\n b: 1\n}\n}", "line 4: unbalanced '}'"),
    ],
)
def test_a_broken_graph_text_is_named_with_its_line(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(GraphTextError, match=problem):
        parse(text, tmp_path / "g.txt")


def test_comments_and_white_space_anywhere_are_skipped(tmp_path: Path) -> None:
    # the trailing run is long: a tokenizer that retried it at each character would take minutes
    text = "# head\n a { b: 'x' 'y' # mid\n c: 2 }" + " \n# tail" * 200_000
    assert parse(text, tmp_path / "g.txt") == [("a", [("b", "xy"), ("c", "2")])]


def test_a_graph_text_nested_a_hundred_thousand_deep_is_read_without_recursion(tmp_path: Path) -> None:
    text = "a { " * 100_000 + "} " * 100_000
    assert parse(text, tmp_path / "g.txt")[0][0] == "a"


def test_each_token_is_one_run_of_one_graph_in_time_order(llama: Path) -> None:
    """Prefill ran once (graph_1 step 0), then decode twice (graph_2 steps 0 and 1): tokens 0, 1, 2
    on both sides; FX slots in numeric order, nodes in the order they ran."""
    fx, ge = open_dump(llama / "fx"), open_dump(llama / "ge-fault")
    assert (fx.format, ge.format) == ("torchair-fx", "torchair-ge")
    runs = {0: ("graph_1", 0), 1: ("graph_2", 0), 2: ("graph_2", 1)}
    assert dict(fx.runs) == runs == dict(ge.runs)
    assert fx.tree.children("model") == ["graph_1", "graph_2"]
    first = fx.tree.children("graph_1")[0]
    assert first.startswith("graph_1/embedding-aten.embedding")
    softmax = next(n for n in fx.tree.children("graph_2") if "_softmax-" in n)
    assert [r.slot for r in fx.tensors(2, softmax)] == ["input.0", "input.1", "input.2", "output.0"]


def test_a_ge_dump_is_listed_a_run_at_a_time(llama: Path, tmp_path: Path, monkeypatch) -> None:
    """Opening lists each graph's first run only (one file name orders every run: a device runs one
    graph at a time); a later run is listed when its token is first asked for, and an op only it
    ran joins its graph's tree then, after the ops that ran before it."""
    from tui_acc.dumps.torchair import ge_dump

    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-fault", ge)
    [decode] = [p for p in ge.rglob("graph_2") if p.is_dir()]
    step_1 = decode / "1" / "1"
    last = max(step_1.iterdir(), key=lambda p: int(p.name.rsplit(".", 1)[-1]))
    later = int(last.name.rsplit(".", 1)[-1]) + 1
    shutil.copy(last, step_1 / f"MatMulV2.MatMulV2_99.1.2.{later}")
    listed: list[str] = []
    names = ge_dump._names

    def recorded(folder, *rest):  # type: ignore[no-untyped-def]
        listed.append(folder)
        return names(folder, *rest)

    monkeypatch.setattr(ge_dump, "_names", recorded)
    index = open_dump(ge)
    assert dict(index.runs) == {0: ("graph_1", 0), 1: ("graph_2", 0), 2: ("graph_2", 1)}
    assert [Path(f).parts[-3::2] for f in listed] == [("graph_1", "0"), ("graph_2", "0")]
    assert "graph_2/MatMulV2_99" not in index.tree.nodes
    assert "graph_2/MatMulV2_99" in index.tokens[2]
    assert Path(listed[-1]) == step_1 and len(listed) == 3
    assert index.tree.children("graph_2")[-1] == "graph_2/MatMulV2_99"
    assert index.tree.nodes["graph_2/MatMulV2_99"].type == "MatMulV2"
    assert index.stable_name("graph_2/MatMulV2_99") == "MatMulV2_99"


def test_an_fx_dump_is_listed_a_run_at_a_time(llama: Path, tmp_path: Path, monkeypatch) -> None:
    """The FX golden as the GE dump: each graph's first run listed at opening, a later one when its
    token is first asked for, a node only it ran added to its graph then; the logits stay named by
    each graph's last node with an output."""
    from tui_acc.dumps.torchair import fx_dump

    fx = tmp_path / "fx"
    shutil.copytree(llama / "fx", fx)
    [decode] = [p for p in fx.rglob("graph_2") if p.is_dir()]
    step_1 = decode / "1"
    last = max(step_1.glob("*.OUTPUT.*.npy"), key=lambda p: int(p.name.rsplit(".", 2)[-2]))
    later = int(last.name.rsplit(".", 2)[-2]) + 1
    shutil.copy(last, step_1 / f"add_99-aten.add.Tensor.OUTPUT.0.{later}.npy")
    listed: list[str] = []
    listing = fx_dump._listing

    def recorded(folder: str) -> tuple[str, ...]:
        listed.append(folder)
        return listing(folder)

    monkeypatch.setattr(fx_dump, "_listing", recorded)
    index = open_dump(fx)
    assert [Path(f).parts[-2:] for f in listed] == [("graph_1", "0"), ("graph_2", "0")]
    logits = index.logits_hint
    assert logits is not None and index.stable_name(logits) == "logits"
    assert "graph_2/add_99-aten.add.Tensor" not in index.tree.nodes
    assert [r.slot for r in index.tokens[2]["graph_2/add_99-aten.add.Tensor"]] == ["output.0"]
    assert Path(listed[-1]) == step_1 and len(listed) == 3
    assert index.tree.children("graph_2")[-1] == "graph_2/add_99-aten.add.Tensor"
    assert index.tree.nodes["graph_2/add_99-aten.add.Tensor"].type == "aten.add.Tensor"


def test_a_golden_op_only_a_later_run_holds_is_paired_at_that_token(llama: Path, tmp_path: Path) -> None:
    """The FX golden's add_10 left out of decode's first run: it joins the golden's tree when token 2
    (decode's second run) is listed, and the pairing's module tree too, so token 2 pairs as it did
    with every run listed at opening (its pairs once named a node the module tree lacked, and the
    token read as having none)."""
    fx = tmp_path / "fx"
    shutil.copytree(llama / "fx", fx)
    [decode] = [p for p in fx.rglob("graph_2") if p.is_dir()]
    removed = list((decode / "0").glob("add_10-aten.add.Tensor.*"))
    assert removed
    for path in removed:
        path.unlink()
    whole = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    late = open_comparison(fx, llama / "ge-fault", CompareOptions(cache=False))
    assert "graph_2/add_10-aten.add.Tensor" not in late.pairing.golden.tree.nodes
    pairs = late.pairing.node_pairs(2)
    assert {p.golden for p in pairs} == {p.golden for p in whole.pairing.node_pairs(2)}
    assert "graph_2/add_10-aten.add.Tensor" in late.pairing.golden.tree.nodes
    case = _case(llama)
    assert local_operators(late) == [(case["token"], case["fx_node"], case["ge_op"])]


def test_fx_input_indices_sort_as_numbers_and_list_arguments_flatten(tmp_path: Path) -> None:
    """``INPUT.10`` after ``INPUT.2`` (msprobe sorts them as strings); ``INPUT.1.0``, a list's
    first tensor, between ``INPUT.0`` and ``INPUT.2``; the old layout's folder counts from 1."""
    step = tmp_path / "msprobe_fx_dump" / "data_dump" / "1" / "gm_20240101_dump"
    step.mkdir(parents=True)
    for slot in ("INPUT.10", "INPUT.2", "INPUT.0", "INPUT.1.0", "INPUT.1.1", "OUTPUT.0"):
        np.save(step / f"cat-aten.cat.default.{slot}.20240101000000000001.npy", np.zeros(2, np.float32))
    index = open_dump(tmp_path)
    assert dict(index.runs) == {0: ("gm_20240101_dump", 0)}
    node = "gm_20240101_dump/cat-aten.cat.default"
    slots = [r.slot for r in index.tensors(0, node)]
    assert slots == ["input.0", "input.1.0", "input.1.1", "input.2", "input.10", "output.0"]


def test_the_nz_weight_reads_as_the_fx_golden_holds_it(llama: Path) -> None:
    """The lm_head MatMul's weight, dumped FRACTAL_NZ by GE, is the FX dump's weight (numpy's own
    .npy, saved as float32 from bf16) exactly, in its logical shape."""
    case = _case(llama)
    ge, fx = open_dump(llama / "ge-clean"), open_dump(llama / "fx")
    [weight] = [r for r in ge.tensors(1, case["nz_weight_of"]) if r.slot == "input.1"]
    values = load_tensor(weight.path, ge.load_policy, weight.member)
    node = next(n for n in fx.tree.children("graph_2") if fx.stable_name(n) == "logits")
    [golden] = [r for r in fx.tensors(1, node) if r.slot == "input.1"]
    expected = load_tensor(golden.path, fx.load_policy)
    assert values.shape == expected.shape == (32, 64)
    np.testing.assert_array_equal(values.astype(np.float32), expected)


def test_the_faulty_matmul_is_the_one_local_operator(llama: Path) -> None:
    """At token 2 (decode step 1) the faulty MatMul, paired with its FX node, is the one local
    operator over every token; the report names both."""
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-fault", CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]
    report = build_report(comparison)
    op = report.body()["first_failing_op"]
    assert (op["token"], op["golden"], op["test"], op["label"]) == (
        case["token"],
        case["fx_node"],
        case["ge_op"],
        "local",
    )
    assert report.body()["first_failing_token"] == case["token"]


def test_the_clean_ge_dump_labels_nothing_local(llama: Path) -> None:
    comparison = open_comparison(llama / "fx", llama / "ge-clean", CompareOptions(cache=False))
    assert local_operators(comparison) == []
    assert build_report(comparison, all_tokens=True).body()["first_failing_op"] is None


def test_a_fused_op_takes_its_first_constituents_inputs_and_its_last_ones_outputs(llama: Path) -> None:
    """``SwishMul_8`` (silu, then mul, in one kernel): its two inputs (the gate and up projections,
    from outside the fused pair) against the FX tensors their MatMuls computed, its output against
    mul's."""
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-clean", CompareOptions(cache=False))
    [pair] = [p for p in comparison.pairing.node_pairs(1) if p.test == case["fused"]]
    assert "-aten.mul.Tensor" in pair.golden
    files = [t.golden.path.name for t in sorted(pair.inputs, key=lambda t: t.test.slot)]
    assert len(files) == 2 and len(set(files)) == 2
    assert all("-aten.mm.default.OUTPUT.0." in name for name in files)
    assert all(t.golden_node == pair.golden for t in pair.outputs)


def test_graphs_pair_by_content_not_by_name(llama: Path, tmp_path: Path) -> None:
    """The FX graphs renamed the other way round (graph_1 the decode graph): each GE graph still
    pairs with the FX graph of its shapes, and the same op is named."""
    fx = tmp_path / "fx"
    shutil.copytree(llama / "fx", fx)
    rank = fx / "msprobe_fx_dump" / "worldsize1_global_rank0"
    (rank / "graph_1").rename(rank / "swap")
    (rank / "graph_2").rename(rank / "graph_1")
    (rank / "swap").rename(rank / "graph_2")
    case = _case(llama)
    comparison = open_comparison(fx, llama / "ge-fault", CompareOptions(cache=False))
    fx_node = case["fx_node"].replace("graph_2/", "graph_1/")
    assert local_operators(comparison) == [(case["token"], fx_node, case["ge_op"])]


def test_hashed_file_names_are_read_through_mapping_csv(llama: Path, tmp_path: Path) -> None:
    """A file GE named by a hash is the op mapping.csv names; its tensors load from the hashed file."""
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-fault", ge)
    case = _case(llama)
    op_name = case["ge_op"].split("/")[1]
    [folder] = [
        p for p in ge.rglob("*") if p.is_dir() and p.name == "1" and p.parent.parent.name == "graph_2"
    ]
    [original] = [p for p in folder.iterdir() if p.name.split(".")[1] == op_name]
    original.rename(folder / "1234567890")
    (folder / "mapping.csv").write_text(f"1234567890,{original.name}\n", encoding="utf-8")
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]


def test_the_older_layout_without_the_worldsize_folder_is_read(llama: Path, tmp_path: Path) -> None:
    """torch_npu 7.1.0 and older write {time}/{device}/... right below msprobe_ge_dump."""
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-fault", ge)
    base = ge / "msprobe_ge_dump"
    (base / "worldsize1_global_rank0" / "20261129000000").rename(base / "20261129000000")
    (base / "worldsize1_global_rank0").rmdir()
    case = _case(llama)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]


def test_a_ge_dump_against_a_ge_dump_pairs_ops_by_name(llama: Path) -> None:
    """The clean GE run as the golden (what fusion-off GE dumps are compared as): the faulty op by its
    own name."""
    case = _case(llama)
    comparison = open_comparison(llama / "ge-clean", llama / "ge-fault", CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["ge_op"], case["ge_op"])]


def test_a_fusion_off_ge_dump_is_the_golden_of_the_fused_run(llama: Path) -> None:
    """GE with fusion on against GE with fusion off (msprobe's second TorchAir mode): the fused op
    pairs with its last constituent, its inputs the constituents' inputs from outside them; the
    faulty MatMul is the one local op, and the clean run has none."""
    case = _case(llama)
    comparison = open_comparison(llama / "ge-nofusion", llama / "ge-fault", CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["ge_op"], case["ge_op"])]
    first, last = case["unfused"]
    [pair] = [p for p in comparison.pairing.node_pairs(1) if p.test == case["fused"]]
    assert pair.golden == last
    sources = {t.golden.path.name.split(".")[1] for t in pair.inputs}
    assert first.split("/")[1] in sources and len(pair.inputs) == 2
    clean = open_comparison(llama / "ge-nofusion", llama / "ge-clean", CompareOptions(cache=False))
    assert local_operators(clean) == []
    assert build_report(clean, all_tokens=True).body()["first_failing_op"] is None


def test_the_fx_dump_given_as_the_test_is_refused_by_name(llama: Path) -> None:
    from tui_acc.errors import TuiAccError

    with pytest.raises(TuiAccError, match="FX dump is the golden"):
        open_comparison(llama / "ge-clean", llama / "fx", CompareOptions(cache=False))


def test_a_damaged_ge_file_is_named_and_the_rest_compared(llama: Path, tmp_path: Path) -> None:
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-fault", ge)
    [victim] = [
        p
        for p in ge.rglob("Add.Add_1.*")
        if p.parent.name == "0" and p.parent.parent.parent.name == "graph_1"
    ]
    victim.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00junk")
    case = _case(llama)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]
    assert any(str(victim) == p.path for p in comparison.test.problems)


def test_odd_names_and_numbers_are_named_not_tracebacks(llama: Path, tmp_path: Path) -> None:
    """A data_index folder and a file named with a superscript digit, a graph text dim of 5,000
    digits: skipped or refused by name; the rest is compared."""
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-fault", ge)
    base = ge / "msprobe_ge_dump"
    [folder] = [p for p in base.rglob("graph_2") if p.is_dir()]
    (folder / "1" / "²").mkdir()
    (folder / "1" / "1" / "Add.Add_1.1.2.³").write_bytes(b"x")
    (base / "dynamo_original_graph_9_rank_0_pid_1_ts_1.txt").write_text(
        'name: "graph_9"\nop { name: "A" type: "Add" output_desc { shape { dim: ' + "9" * 5000 + " } } }\n",
        encoding="utf-8",
    )
    case = _case(llama)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]
    assert any(p.path.endswith("Add.Add_1.1.2.³") for p in comparison.test.problems)


def test_a_graph_whose_text_is_gone_is_named_not_described_by_another_graphs(
    llama: Path, tmp_path: Path
) -> None:
    """The decode graph's text deleted: the prefill graph's holds the same op names, and describing
    the decode graph with it had paired its ops with the wrong FX nodes (a view named the culprit).
    Where the texts are named for the dump's graphs, a graph none is named for is not compared, and
    an error says so: its runs are not compared, and the prefill run passing is no pass (exit 1)."""
    test = _without_the_decode_graphs_text(llama / "ge-fault", tmp_path)
    comparison = open_comparison(llama / "fx", test, CompareOptions(cache=False))
    report = build_report(comparison, all_tokens=True)
    body = report.body()
    said = [f"{e['file']}: {e['message']}" for e in body["errors"]]
    missing = f"{test}: GE graph graph_2: no graph text named for it"
    assert any(missing in e for e in said), said
    assert body["first_failing_op"] is None
    assert local_operators(comparison) == []
    assert report.exit_code == 1


def test_against_a_ge_golden_a_graph_without_its_text_is_still_compared(llama: Path, tmp_path: Path) -> None:
    """Two GE dumps pair their ops by name: the decode graph's text gone, its runs are compared all
    the same (a note says its fused ops are not split), and the clean pair passes."""
    test = _without_the_decode_graphs_text(llama / "ge-clean", tmp_path)
    comparison = open_comparison(llama / "ge-nofusion", test, CompareOptions(cache=False))
    report = build_report(comparison, all_tokens=True)
    body = report.body()
    assert body["errors"] == []
    assert any("GE graph graph_2: no graph text named for it" in n for n in body["notes"]), body["notes"]
    assert [row["token"] for row in body["tokens"]] == [0, 1, 2]
    assert report.exit_code == 0


def _without_the_decode_graphs_text(dump: Path, tmp_path: Path) -> Path:
    """A copy of the GE ``dump`` whose decode graph's text (``graph_2``'s) is deleted."""
    copy = shutil.copytree(dump, tmp_path / dump.name)
    next(copy.glob("msprobe_ge_dump/dynamo_original_graph_2_*.txt")).unlink()
    return copy


def test_a_model_folder_with_two_model_ids_keeps_its_graph_text(llama: Path, tmp_path: Path) -> None:
    """A model folder holding two model ids is two GE graphs named ``graph_2_1`` and ``graph_2_2``:
    the text named for ``graph_2`` describes both (not taken for a graph without a text of its own)."""
    from tui_acc.dumps.torchair.graph_texts import texts_by_graph

    test = tmp_path / "ge-fault"
    shutil.copytree(llama / "ge-fault", test)
    model = next(test.glob("msprobe_ge_dump/worldsize1_global_rank0/*/0/graph_2"))
    (model / "2").mkdir()
    (model / "1" / "1").rename(model / "2" / "1")
    index = open_dump(test)
    found = {graph: text.graph_id for graph, text in texts_by_graph(index).items()}
    assert found == {"graph_1": 1, "graph_2_1": 2, "graph_2_2": 2}


def test_a_string_left_open_is_one_token_to_the_end_of_its_line(tmp_path: Path) -> None:
    """Refused at once, with its line; a line of escaped quotes after it is not tokenized again at each
    character (that was quadratic: 40 kB took 7 s)."""
    from tui_acc.dumps.torchair.text_format import _TOKEN

    text = 'a: 1\nb: "' + '\\"' * 20_000 + "\nc: 2\n"
    assert len(_TOKEN.findall(text)) < 20  # a handful (the open string one of them), not 40,000
    with pytest.raises(GraphTextError, match="line 2: unexpected character '\"'"):
        parse(text, tmp_path / "g.txt")
