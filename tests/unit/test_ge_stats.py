"""GE statistics dumps (``dump_data="stats"``): an op's CSV of statistics in place of its tensors.

tests/data/torchair/ge-stats.tar.xz is the Llama fixture's ``ge-clean`` and ``ge-fault`` with each
GE file turned into the CSV the runtime writes (scripts/make_ge_stats_fixture.py: decoded by the
protobuf library, the statistics computed by numpy, nothing of tui-acc's reader); the golden is the
fixture's FX dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import local_operators
from tui_acc import CompareOptions, open_comparison
from tui_acc.dumps import open_dump
from tui_acc.dumps.model import Problem
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchair.ge_stats import dtype_of, read_stats
from tui_acc.reports.pair import build_report


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


@pytest.fixture(scope="module")
def stats(torchair_case) -> Path:
    return torchair_case("ge-stats")


def test_the_faulty_matmul_is_the_one_local_operator_by_its_statistics(llama: Path, stats: Path) -> None:
    case = json.loads((llama / "case.json").read_text(encoding="utf-8"))
    comparison = open_comparison(llama / "fx", stats / "fault", CompareOptions(cache=False))
    assert local_operators(comparison) == [(case["token"], case["fx_node"], case["ge_op"])]
    body = build_report(comparison).body()
    assert body["first_failing_token"] == case["token"]
    assert body["first_failing_op"]["test"] == case["ge_op"]
    assert all(t["stats_only"] for t in body["tokens"])


def test_the_clean_statistics_dump_labels_nothing_local(llama: Path, stats: Path) -> None:
    comparison = open_comparison(llama / "fx", stats / "clean", CompareOptions(cache=False))
    assert local_operators(comparison) == []
    body = build_report(comparison, all_tokens=True).body()
    assert body["first_failing_op"] is None
    assert body["errors"] == []  # statistics files are no damaged GE files


def test_the_inserted_cast_carries_the_logits_and_pairs_with_itself(llama: Path, stats: Path) -> None:
    """As with tensors (test_ge_inserted.py): GE's Cast of the logits is read from its statistics
    file, found to carry the MatMul's output by the shape and dtype its rows give, and paired."""
    case = json.loads((llama / "case.json").read_text(encoding="utf-8"))
    comparison = open_comparison(llama / "fx", stats / "clean", CompareOptions(cache=False))
    pairs = comparison.pairing.nodes[case["token"]]
    assert any(p.test.endswith(case["inserted_cast"]) for p in pairs)
    carried = comparison.pairing.logits_at[case["token"]]
    assert carried.test[-1].endswith(case["inserted_cast"]) and carried.dtype == "bfloat16"
    assert not [u for u in comparison.pairing.unmatched if u.side == "test"]


def test_a_padded_tensors_statistics_are_not_compared_and_said_once(stats: Path) -> None:
    """The lm_head's weight is FRACTAL_NZ: its statistics count the padding (the generator computed
    them over the tiles), so only its NaN count is kept; one note for the dump."""
    index = open_dump(stats / "clean")
    weights = [
        ref
        for token in index.tokens
        for node, refs in index.tokens[token].items()
        if node.endswith("MatMulV2_14")
        for ref in refs
        if ref.slot == "input.1"
    ]
    assert len(weights) == 3
    assert all(ref.stats is not None and ref.stats.norm is None and ref.stats.max is None for ref in weights)
    assert all(ref.stats is not None and ref.stats.is_nan is False for ref in weights)
    said = [n for n in index.notes if "padded device format" in n]
    assert len(said) == 1 and "FRACTAL_NZ" in said[0]


def _read(tmp_path: Path, text: str) -> tuple[list, list[Problem], list[str]]:
    path = tmp_path / "MatMul.mm.1.2.3.csv"
    path.write_text(text, encoding="utf-8")
    problems: list[Problem] = []
    notes: list[str] = []
    return read_stats(str(path), LoadPolicy(tmp_path), problems, notes), problems, notes


def test_columns_are_found_by_name_and_spellings_of_both_writers_read(tmp_path: Path) -> None:
    text = (
        "Input/Output,Index,Data Size,Data Type,Format,Shape,Count,"
        "Avg Value,L2Norm Value,Min Value,Max Value\n"
        "output,0,8,DT_FLOAT16,FORMAT_ND,[2;2],4,0.5,2.0,-1.0,3.0\n"
        "Input,1,8,27,2,2x2,4,N/A,,1,1\n"
    )
    refs, problems, _ = _read(tmp_path, text)
    assert problems == []
    [given, out] = sorted(refs, key=lambda r: r.role)
    assert given.slot == "input.1" and out.slot == "output.0"
    assert (out.stats.max, out.stats.min, out.stats.mean, out.stats.norm) == (3.0, -1.0, 0.5, 2.0)
    assert (out.stats.dtype, out.stats.shape) == ("float16", (2, 2))
    assert (given.stats.dtype, given.stats.mean, given.stats.norm) == ("bfloat16", None, None)


def test_a_nan_count_decides_only_when_not_zero_or_alone(tmp_path: Path) -> None:
    text = (
        "Input/Output,Index,Data Type,Format,Shape,Max Value,Nan Count\n"
        "Output,0,DT_FLOAT,ND,4,1.5,0\n"
        "Output,1,DT_FLOAT,ND,4,nan,2\n"
        "Output,2,DT_FLOAT,ND,4,,0\n"
    )
    refs, _, _ = _read(tmp_path, text)
    assert [r.stats.is_nan for r in refs] == [None, True, False]


def test_statistics_in_columns_it_does_not_know_are_named_not_passed_by_the_nan_count(tmp_path: Path) -> None:
    """Max/Min/Avg/L2 spelled another way beside a NaN count: read by the NaN count alone, a wrong
    value would pass without a word; the columns are named. Known columns beside others are read
    as they are, and the writer's own Count (elements) is no statistic."""
    renamed = "Input/Output,Index,Data Type,Format,Shape,Count,Maximum,Minimum,Average,L2,Nan Count\n"
    refs, problems, _ = _read(tmp_path, renamed + "Output,0,DT_FLOAT,ND,4,4,9.5,-1.0,0.25,2.0,0\n")
    assert [r.slot for r in refs] == ["output.0"]
    assert len(problems) == 1 and "columns tui-acc does not know ('maximum', 'minimum', 'average', 'l2')" in (
        problems[0].message
    )
    extra = "Input/Output,Index,Data Type,Format,Shape,Count,Max Value,Vendor Thing,Nan Count\n"
    refs, problems, _ = _read(tmp_path, extra + "Output,0,DT_FLOAT,ND,4,4,9.5,7,0\n")
    assert problems == [] and refs[0].stats.max == 9.5
    # an overflow check's dump: the runtime's own Inf counts beside the NaN count are no unknown
    overflow = "Input/Output,Index,Data Type,Format,Shape,Nan Count,Negative Inf Count,Positive Inf Count\n"
    refs, problems, _ = _read(tmp_path, overflow + "Output,0,DT_FLOAT,ND,4,0,0,0\n")
    assert problems == [] and [r.slot for r in refs] == ["output.0"]


_HEAD = "Input/Output,Index,Data Type,Format,Shape,Max Value,Min Value,Avg Value,l2norm,Nan Count\n"
_ROW = "Output,0,DT_FLOAT,ND,4,1.5,-1.0,0.25,2.0,0\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a,b\n1,2\n", "not a GE statistics file"),
        ("Input/Output,Index\n" + "Output,0\n" * 200_000, "over"),
        (_HEAD + "Output,0," + "x" * 200_000 + "\n", "not a CSV file"),  # past the csv module's limit
        (_HEAD + 'Output,0,"DT_FLOAT,ND\n', "not a CSV file"),  # a quote left open
        ("Input/Output,Index,Maximum,Minimum,L2\n" + "Output,0,1,2,3\n", "no statistic column"),
        (_HEAD.replace("l2norm", "Max Value") + _ROW, "column 'max value' named twice"),
        (_HEAD + _ROW + _ROW, "output.0 given in more than one row"),
    ],
)
def test_a_broken_statistics_file_is_named_and_its_op_not_compared(
    tmp_path: Path, text: str, problem: str
) -> None:
    refs, problems, _ = _read(tmp_path, text)
    assert refs == []
    assert len(problems) == 1 and problem in problems[0].message and problems[0].path.endswith(".csv")


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ("sideways,0,DT_FLOAT,ND,4,1,1,1,1,0\n", "naming no Input or Output"),
        ("Output,x,DT_FLOAT,ND,4,1,1,1,1,0\n", "naming no Input or Output"),
        ("Output,999999999,DT_FLOAT,ND,4,1,1,1,1,0\n", "index up to 9999"),
        ("Output," + "9" * 5000 + ",DT_FLOAT,ND,4,1,1,1,1,0\n", "index up to 9999"),
        ("Output,1,DT_FLOAT,ND,4,nan,1,1,1,-1\n", "NaN count '-1', not a count"),
        ("Output,1,DT_FLOAT,ND,4,1,1,1,1,0.5\n", "NaN count '0.5', not a count"),
    ],
)
def test_a_row_that_is_not_one_is_named_and_the_others_read(tmp_path: Path, row: str, problem: str) -> None:
    refs, problems, _ = _read(tmp_path, _HEAD + _ROW + row)
    assert [r.slot for r in refs] == ["output.0"]
    assert len(problems) == 1 and problem in problems[0].message


def test_data_types_known_by_any_of_their_names() -> None:
    assert [dtype_of(t) for t in ("DT_BF16", "bf16", "27", "float32", "torch.float16", "DT_FOO", "")] == [
        "bfloat16",
        "bfloat16",
        "bfloat16",
        "float32",
        "float16",
        None,
        None,
    ]


def test_a_statistics_files_shapes_tell_the_prefill_graph_from_the_decode_graph(
    llama: Path, stats: Path
) -> None:
    """Graph texts are matched to GE graphs by their ops' output shapes in the first run: a statistics
    file gives them by its rows (the FX golden's .npy of the same node has the same shape)."""
    import numpy as np

    from tui_acc.dumps.torchair.graph_texts import first_output_shape

    case = json.loads((llama / "case.json").read_text(encoding="utf-8"))
    ge = open_dump(stats / "fault")
    op = case["ge_op"].partition("/")[2]
    fx_file = next((llama / "fx").rglob("graph_2/0/mm_13-aten.mm.default.OUTPUT.0.*.npy"))
    assert first_output_shape(ge, "graph_2", op) == np.load(fx_file).shape
