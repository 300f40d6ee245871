"""Torch golden vs (synthetic) ATB test: pairing and metrics against msit's own CSV."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.msit_definitions import assert_cosine_and_distance_agree
from tui_acc import open_comparison

CASE = "msit-torch-12layer-vs-atb"


def _msit_rows(case_dir: Path) -> list[dict[str, str]]:
    (csv_path,) = sorted((case_dir / "compare").glob("msit_cmp_report_*.csv"))
    with csv_path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def ours(reference: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Our tensor rows keyed by (golden path, test path), relative to the case folder."""
    case_dir = reference / CASE
    cmp = open_comparison(case_dir / "golden", case_dir / "test_atb")
    rows = {}
    for token in cmp.pairing.tokens:
        for row in cmp.engine.tensors_frame(token).iter_rows(named=True):
            golden, test = Path(row["golden_path"]), Path(row["test_path"])
            rows[(str(golden.relative_to(case_dir)), str(test.relative_to(case_dir)))] = row
    return rows


def _atb_token_dirs(case_dir: Path) -> dict[int, Path]:
    (tensors,) = (case_dir / "test_atb").glob("msit_dump_*/tensors/*_*")
    return {int(p.name): p for p in tensors.iterdir() if p.name.isdigit()}


def test_every_pair_msit_makes_we_make_identically(reference: Path, ours) -> None:
    case_dir = reference / CASE
    msit = _msit_rows(case_dir)
    atb_tokens = _atb_token_dirs(case_dir)
    per_token = Counter(int(row["token_id"]) for row in msit)
    # msit pairs every ATB node that has an output (123 here: embedding, 12 layers of 1 + 9 ops,
    # norm, lm head), at every token both sides hold
    assert (
        sorted(per_token)
        == sorted(atb_tokens)
        == open_comparison(case_dir / "golden", case_dir / "test_atb").pairing.tokens
    )
    for token, folder in atb_tokens.items():
        assert per_token[token] == len(list(folder.rglob("after/outtensor0.bin"))) == 123, token
    for row in msit:
        key = (row["golden_data_path"], row["my_data_path"])
        assert key in ours, f"msit pairs {key}; we do not"


def test_operator_names_are_the_atb_folders(reference: Path) -> None:
    case_dir = reference / CASE
    cmp = open_comparison(case_dir / "golden", case_dir / "test_atb")
    pairs = {n.golden: (n.test, n.test_type) for n in cmp.pairing.node_pairs(cmp.pairing.tokens[-1])}
    assert pairs["root.model.layers.7.mlp.up_proj"] == ("8_LlamaLayer/7_LinearOperation", "LinearOperation")
    assert pairs["root.model.layers.0.input_layernorm"] == (
        "1_LlamaLayer/0_RmsNormOperation",
        "RmsNormOperation",
    )
    assert pairs["root.model.embed_tokens"] == ("0_WordEmbedding", "WordEmbedding")
    assert pairs["root.lm_head"] == ("14_LmHead", "LmHead")
    assert cmp.test.format == "msit-atb"


def test_metrics_agree_with_msit(reference: Path, ours) -> None:
    for row in _msit_rows(reference / CASE):
        key = (row["golden_data_path"], row["my_data_path"])
        mine = ours[key]
        assert_cosine_and_distance_agree(mine, row, key)
        assert mine["test_max"] == float(row["my_max_value"]), key  # an extreme: exact in any precision
        assert mine["test_dtype"] == row["my_dtype"].removeprefix("torch.")


def test_atb_reader_is_bit_identical_to_the_torch_dump_it_was_made_from(reference: Path) -> None:
    """test_atb holds the bf16 torch tensors re-encoded as .bin: every pair must match exactly."""
    case_dir = reference / CASE
    cmp = open_comparison(case_dir / "test_torch_bf16", case_dir / "test_atb")
    atb_tokens = _atb_token_dirs(case_dir)
    assert cmp.pairing.tokens == sorted(atb_tokens)
    for token in cmp.pairing.tokens:
        frame = cmp.engine.tensors_frame(token)
        assert frame["error"].null_count() == frame.height
        assert frame["max_abs_err"].max() == 0.0
        # every ATB tensor (138 a token: 123 outputs, 15 top-level inputs) met its torch original
        assert frame.height == len(list(atb_tokens[token].rglob("*.bin"))) == 138, token
    assert cmp.engine.first_failing_token() is None
