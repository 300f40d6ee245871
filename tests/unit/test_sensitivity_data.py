"""The sensitivity sweep's data (tests/data/sensitivity): its answer key holds on the committed dumps.

scripts/make_sensitivity_fixtures.py dumped every run with msprobe 26.2.0 itself and checked the key
as it made them; these tests check it again on what is committed, with tui-acc's own torch reader,
and that tui-acc opens the runs and pairs them with the golden. They assert nothing about verdicts:
the data is there to test those.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import sensitivity_key
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps.torchfile.reader import read_torch_file

KEY = sensitivity_key()
LEVELS = ["L0", "mix"]
SITES = {
    "linear": "model.layers.1.self_attn.o_proj",
    "norm": "model.layers.1.post_attention_layernorm",
    "attention": "model.layers.2.self_attn",
    "activation": "model.layers.2.mlp.act_fn",
}
STRENGTHS = {"noise-5pct", "noise-2pct", "noise-1pct", "scale-1.02", "scale-1.05"}
FAULTY = [(level, run) for level in LEVELS for run in KEY[level] if run != "clean"]
# opened with tui-acc: the clean run, the bugs and one fault per site
OPENED = [
    (level, run)
    for level in LEVELS
    for run in KEY[level]
    if run in ("clean", "bug-int8-weight", "bug-rope-theta") or run.endswith("noise-5pct")
]
# what eager attention (golden) has and SDPA (test) has not: its mask, its weights, its own calls
EAGER_ONLY_TENSORS = re.compile(
    r"Module\.model\.layers\.\d\.(LlamaDecoderLayer|self_attn\.LlamaAttention)\.forward\.\d/input\.attention_mask"
    r"|Module\.model\.layers\.\d\.self_attn\.LlamaAttention\.forward\.\d/output\.1"
)
EAGER_ONLY_CALLS = {
    "LlamaAttention": {
        "Torch.matmul",
        "Tensor.__mul__",
        "Tensor.__add__",
        "Functional.softmax",
        "Functional.dropout",
    },
    "LlamaModel": {"Tensor.__add__", "Tensor.__le__", "Torch.where"},  # the causal mask eager attention takes
}


class Dump:
    """One side's msprobe dump: dump.json's tensor files in execution order (record, place, file)."""

    def __init__(self, root: Path) -> None:
        (dump_json,) = root.glob("step0/proc*/dump.json")
        self.data_dir = dump_json.parent / "dump_tensor_data"
        self.records: dict[str, Any] = json.loads(dump_json.read_text(encoding="utf-8"))["data"]
        self.parents = json.loads((dump_json.parent / "construct.json").read_text(encoding="utf-8"))
        self.files = [
            (name, place, file) for name, record in self.records.items() for place, file in _files(record)
        ]

    def array(self, file: str) -> np.ndarray:
        value = read_torch_file(self.data_dir / file, mapped=False)
        assert isinstance(value, np.ndarray)
        return value


def _files(record: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(value: Any, place: str) -> None:
        if isinstance(value, dict) and "data_name" in value:
            found.append((place, value["data_name"]))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{place}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{place}.{index}")

    places = {"input_args": "input", "input_kwargs": "kwargs", "output": "output", "parameters": "parameters"}
    for key, value in record.items():
        if key in places:
            walk(value, places[key])
    return found


def _identical(a: Dump, b: Dump, file: str) -> bool:
    if (a.data_dir / file).read_bytes() == (b.data_dir / file).read_bytes():
        return True
    x, y = a.array(file), b.array(file)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _first_difference(clean: Dump, faulty: Dump) -> tuple[int, str, str, str]:
    for index, (ours, theirs) in enumerate(zip(clean.files, faulty.files, strict=False)):
        assert ours[:2] == theirs[:2], f"the runs part at file {index} before any tensor differs"
        if not _identical(clean, faulty, theirs[2]):
            return (index, *theirs)
    raise AssertionError("no tensor differs from the clean run")


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


def test_the_sweep_is_complete():
    for level in LEVELS:
        runs = KEY[level]
        assert {"clean", "bug-int8-weight", "bug-rope-theta"} <= set(runs)
        faults = {name for name, case in runs.items() if case["kind"] in ("noise", "scale")}
        assert faults == {f"{site}-{strength}" for site in SITES for strength in STRENGTHS}
        for name in faults:
            case = runs[name]
            assert case["site"] == SITES[case["site_kind"]] and case["token"] == 2
            assert (case["noise"] > 0) is (case["kind"] == "noise")
            assert (case["scale"] != 1) is (case["kind"] == "scale")
    assert len(FAULTY) == 2 * 22


@pytest.mark.parametrize("level", LEVELS)
def test_each_case_json_is_its_key_and_the_clean_run_keeps_the_golden_tokens(sensitivity_case, level):
    """cases.json is each run's case.json; the clean run generates the golden's tokens, so every
    decode step compares like with like."""
    for run in KEY[level]:
        case = sensitivity_case(level, run)
        assert {k: v for k, v in case.info.items() if k in KEY[level][run]} == KEY[level][run]
        assert case.info["generated"]["golden"] == KEY[level]["clean"]["generated"]["test"]
        if run == "clean":
            assert "first_difference" not in case.info


@pytest.mark.parametrize(("level", "run"), FAULTY)
def test_a_faulty_run_equals_the_clean_one_up_to_the_faulted_output(sensitivity_case, level, run):
    case = sensitivity_case(level, run)
    clean, faulty = Dump(sensitivity_case(level, "clean").test), Dump(case.test)
    index, record, place, file = _first_difference(clean, faulty)
    expected = case.info["first_difference"]
    keys = ("position", "record", "tensor", "file")
    assert (index, record, place, file) == tuple(expected[k] for k in keys)
    site = re.escape(case.info["site"])
    if case.info["token"] is not None:  # one token: the module's own output at that call
        assert re.fullmatch(rf"Module\.{site}\.\w+\.forward\.{case.info['token']}", record)
        assert place.startswith("output.0")
        strength = case.info["noise"] or abs(case.info["scale"] - 1)
        added = _rel(faulty.array(file), clean.array(file))
        assert 0.7 * strength < added < 1.3 * strength
        assert added == pytest.approx(case.info["added_rel_error"], rel=1e-6)
        return
    # a bug: at forward 0, in the module or (mix) an API call inside it
    module = rf"Module\.{site}\.\w+\.forward\.0"
    inside = re.fullmatch(module, record) or re.fullmatch(module, faulty.parents.get(record) or "")
    assert inside, (record, faulty.parents.get(record))
    if case.info["kind"] == "int8-weight":
        assert place in ("output.0", "parameters.weight", "input.1")  # input.1: F.linear's weight
        weights = {
            side: [f for r, p, f in dump.files if re.fullmatch(module, r) and p == "parameters.weight"]
            for side, dump in (("clean", clean), ("faulty", faulty))
        }
        quantised, cast = faulty.array(weights["faulty"][0]), clean.array(weights["clean"][0])
        golden = Dump(case.golden)
        (golden_file,) = [
            f for r, p, f in golden.files if re.fullmatch(module, r) and p == "parameters.weight"
        ]
        reference = golden.array(golden_file)
        assert _rel(quantised, reference) > 3 * _rel(cast, reference)  # beyond what the bf16 cast explains
    else:
        assert place.startswith("output") or place == "input.1"  # the wrong inv_freq, where mix records it


@pytest.mark.parametrize(("level", "run"), OPENED)
def test_tui_acc_pairs_the_run_with_the_golden(sensitivity_case, level, run):
    """Every tensor pairs, but what eager attention (golden) has and SDPA (test) has not."""
    case = sensitivity_case(level, run)
    comparison = open_comparison(case.golden, case.test, CompareOptions(cache=False))
    assert comparison.pairing.tokens == [0, 1, 2, 3]
    assert not comparison.golden.problems and not comparison.test.problems
    assert comparison.golden.format == comparison.test.format == "msprobe"
    tree = comparison.golden.tree
    for item in comparison.pairing.unmatched:
        if item.kind == "tensor":
            assert item.side == "golden" and EAGER_ONLY_TENSORS.fullmatch(item.name), item
            continue
        assert item.kind == "node", item
        api = re.sub(r"\.\d+\.forward$", "", item.name)
        if item.side == "test":
            assert api == "Functional.scaled_dot_product_attention", item
            continue
        parent = tree.nodes[item.name].parent or ""
        owner = next((kind for kind in EAGER_ONLY_CALLS if f".{kind}.forward." in parent), None)
        assert owner is not None and api in EAGER_ONLY_CALLS[owner], (item, parent)
    if level == "L0":
        assert all(u.kind == "tensor" for u in comparison.pairing.unmatched)
    pairing = comparison.pairing
    paired = {pair.test for token in pairing.tokens for pair in pairing.node_pairs(token)}
    modules = {name for name in Dump(case.test).records if name.startswith("Module.")}
    assert modules <= paired
