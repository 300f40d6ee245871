"""Ops GE inserted into a TorchAir graph (a Cast, a TransData: in no graph text, with no golden)
judged against their own input, and the Cast of the logits GE inserted at the end of a run held
against the golden's logits (tui_acc/pairing/ge_inserted.py).

The fixture is tests/data/torchair/llama.tar.xz (scripts/make_torchair_fixtures.py): its GE dumps
end each run with ``trans_Cast_0``, the bf16 logits cast to float32 (case.json's ``inserted_cast``).
A GE dump file holds its header, then its inputs' bytes, then its outputs' (docs/formats.md §7.2):
the Cast's float32 output is the file's last 256 bytes (a [1, 64] decode logits row), which the
faults below scale without reading the header.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import local_operators
from tui_acc import CompareOptions, open_comparison
from tui_acc.reports.pair import build_report

LOGITS_BYTES = 64 * 4  # the decode graph's logits row, float32


@pytest.fixture(scope="module")
def llama(torchair_case) -> Path:
    return torchair_case("llama")


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _run_folder(ge: Path, graph: str, step: int) -> Path:
    [folder] = [p for p in ge.rglob(str(step)) if p.is_dir() and p.parent.parent.name == graph]
    return folder


def _scale_output(path: Path, factor: float) -> None:
    """The file's float32 output, its last LOGITS_BYTES, its first 8 values times ``factor``."""
    content = bytearray(path.read_bytes())
    values = np.frombuffer(bytes(content[-LOGITS_BYTES:]), dtype="<f4").copy()
    values[:8] *= factor
    content[-LOGITS_BYTES:] = values.tobytes()
    path.write_bytes(bytes(content))


def test_a_wrong_cast_of_the_logits_fails_its_token_and_is_the_culprit(llama: Path, tmp_path: Path) -> None:
    """GE's Cast of the logits to float32 wrong at token 2 (decode step 1), every op of the graph
    text right: the token fails on the logits the graph returned, and the Cast is the one local
    operator, paired with itself, its input held against the golden's logits."""
    case = _case(llama)
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    [cast] = _run_folder(ge, case["graph"], case["step"]).glob(f"Cast.{case['inserted_cast']}.*")
    _scale_output(cast, 1.25)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    culprit = f"{case['graph']}/{case['inserted_cast']}"
    assert [(t, test) for t, _, test in local_operators(comparison)] == [(case["token"], culprit)]
    body = build_report(comparison).body()
    assert body["first_failing_token"] == case["token"]
    assert (body["first_failing_op"]["test"], body["first_failing_op"]["label"]) == (culprit, "local")
    [pair] = [p for p in comparison.pairing.node_pairs(case["token"]) if p.test == culprit]
    fx_logits = comparison.pairing.logits_pair(case["token"])
    assert fx_logits is not None and fx_logits.test.path == cast
    assert {t.golden.path for t in pair.tensors} == {fx_logits.golden.path}
    assert "-aten.mm.default.OUTPUT.0." in fx_logits.golden.path.name


def test_the_clean_run_still_passes_with_its_casts_paired(llama: Path) -> None:
    """Clean: every token passes on the Cast's output, nothing is local, and the Cast is paired at
    every token (not named unpaired)."""
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-clean", CompareOptions(cache=False))
    assert local_operators(comparison) == []
    body = build_report(comparison, all_tokens=True).body()
    assert body["first_failing_token"] is None and body["first_failing_op"] is None
    unpaired = {u.name for u in comparison.pairing.unmatched if u.side == "test"}
    assert not any(name.endswith(case["inserted_cast"]) for name in unpaired)


def _insert_cast(ge: Path, graph: str, after: str, name: str, source: str) -> list[Path]:
    """A copy of the logits' Cast file as an op GE inserted right after ``after`` in every run of
    ``graph`` (its file time, its name sorting after it): a Cast in the middle of the graph."""
    written = []
    for step in (0, 1):
        folder = _run_folder(ge, graph, step)
        [anchor] = folder.glob(f"*.{after}.*")
        [cast] = folder.glob(f"Cast.{source}.*")
        time = anchor.name.rsplit(".", 1)[1]
        target = folder / f"Cast.{name}.999.6.{time}"
        target.write_bytes(cast.read_bytes())
        written.append(target)
    return written


def test_a_wrong_cast_in_the_middle_is_judged_against_its_own_input(llama: Path, tmp_path: Path) -> None:
    """A Cast GE inserted after layer 0's first Add (no golden: not the logits' op), wrong at token
    2 only: it is the one local operator, its output held against its own input; right at token 1,
    it is not."""
    case = _case(llama)
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    _, wrong = _insert_cast(ge, case["graph"], "Add", "trans_Cast_7", case["inserted_cast"])
    _scale_output(wrong, 3.0)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    culprit = f"{case['graph']}/trans_Cast_7"
    assert [(t, test) for t, _, test in local_operators(comparison)] == [(case["token"], culprit)]
    [pair] = [p for p in comparison.pairing.node_pairs(case["token"]) if p.test == culprit]
    assert pair.inserted and all(t.golden_from_test for t in pair.tensors)
    assert {t.golden.path for t in pair.tensors} == {t.test.path for t in pair.tensors} == {wrong}
    assert [t.golden.member for t in pair.outputs] == ["input.0"]
    # in execution order: right after the golden node of the Add it followed
    order = [p.test for p in comparison.pairing.node_pairs(case["token"])]
    assert order[order.index(culprit) - 1] == f"{case['graph']}/Add"
    golden_tree = comparison.pairing.golden.tree
    assert golden_tree.nodes[pair.golden].type == pair.golden_type == "Cast, inserted by GE"
    # its golden input is its golden output by construction: no in-place op, and replayed
    [row] = [r for r in comparison.verdicts.token(case["token"]).rows if r["test_node"] == culprit]
    assert row["in_place"] is None and "replay" in row["reason"]


def test_without_module_stacks_an_inserted_cast_is_judged_and_nothing_crashes(
    llama: Path, tmp_path: Path
) -> None:
    """Graph texts without ``nn_module_stack`` (no module to nest under): the pairing's tree is the
    reader's until an inserted op is placed, and the judge keeps the same tree object (it crashed on
    the placed Cast); the clean run labels nothing local at any token, the wrong Cast is named."""
    case = _case(llama)
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    for text in ge.glob("msprobe_ge_dump/dynamo_original_graph_*.txt"):
        flat = re.sub(
            r'\n *attr \{\n *key: "nn_module_stack"\n *value \{ s: "(?:[^"\\]|\\.)*" \}\n *\}',
            "",
            text.read_text(),
        )
        assert "nn_module_stack" not in flat
        text.write_text(flat)
    clean = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(clean) == []
    [cast] = _run_folder(ge, case["graph"], case["step"]).glob(f"Cast.{case['inserted_cast']}.*")
    _scale_output(cast, 1.25)
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert comparison.pairing.golden.tree is comparison.pairing.golden.tree  # one object
    culprit = f"{case['graph']}/{case['inserted_cast']}"
    assert [(t, test) for t, _, test in local_operators(comparison)] == [(case["token"], culprit)]


@pytest.mark.parametrize("where", ["between", "after"])
def test_the_logits_cast_is_found_by_its_input_not_by_its_place(
    llama: Path, tmp_path: Path, where: str
) -> None:
    """A paired op (the KV cache's Scatter) run between the logits' MatMul and GE's Cast of its
    output, or after the Cast: the Cast still carries the logits (its input is what the MatMul
    wrote, by the headers), and a wrong one fails its token (it passed, exit 0)."""
    case = _case(llama)
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    for step in (0, 1):
        folder = _run_folder(ge, case["graph"], step)
        [scatter] = folder.glob("Scatter.Scatter_3.*")
        [cast] = folder.glob(f"Cast.{case['inserted_cast']}.*")
        time = int(cast.name.rsplit(".", 1)[1])
        scatter.rename(
            folder / f"{scatter.name.rsplit('.', 1)[0]}.{time if where == 'between' else time + 1}"
        )
        if where == "between":
            cast.rename(folder / f"{cast.name.rsplit('.', 1)[0]}.{time + 1}")
    [cast] = _run_folder(ge, case["graph"], case["step"]).glob(f"Cast.{case['inserted_cast']}.*")
    _scale_output(cast, 1.25)
    body = build_report(open_comparison(llama / "fx", ge, CompareOptions(cache=False))).body()
    assert body["first_failing_token"] == case["token"]
    assert body["first_failing_op"]["test"] == f"{case['graph']}/{case['inserted_cast']}"


def test_carried_logits_are_judged_as_logits_at_the_dtype_the_matmul_wrote(llama: Path) -> None:
    """The token's logits are the Cast's float32 output, judged as logits (a KL, the logits'
    bounds) at bfloat16's class, what the lm_head's MatMul wrote, not float32's."""
    case = _case(llama)
    comparison = open_comparison(llama / "fx", llama / "ge-clean", CompareOptions(cache=False))
    row = comparison.engine.token_row(case["token"])
    assert row["kl"] is not None and row["test_dtype"] == "float32"
    assert comparison.pairing.logits_at[case["token"]].dtype == "bfloat16"
    assert comparison.engine.pass_fail.computed_in(row) == row["computed_in"] == "bfloat16"
    thresholds = comparison.engine.thresholds
    bf16 = thresholds.for_logits("float32", "float32", "bfloat16")
    assert (
        bf16 == thresholds.for_logits("bfloat16", "bfloat16") != thresholds.for_logits("float32", "float32")
    )


def test_a_transdata_to_a_format_read_as_laid_out_is_left_unpaired(llama: Path, tmp_path: Path) -> None:
    """A TransData to FRACTAL_Z (format 4), which the reader leaves as laid out: its output's
    elements are in another order than its input's, correctly. Held against its input it would be
    a false culprit; it is left unpaired. Made from the logits' Cast file: its header's output
    descriptor (``1a 0d 08 01 10 02``: data_type 1, format 2) given format 4, its 64 values reversed."""
    case = _case(llama)
    ge = tmp_path / "ge"
    shutil.copytree(llama / "ge-clean", ge)
    written = _insert_cast(ge, case["graph"], "Add", "trans_TransData_9", case["inserted_cast"])
    for path in written:
        content = bytearray(path.read_bytes())
        at = content.index(bytes.fromhex("1a0d08011002"))
        content[at + 5] = 4  # FRACTAL_Z
        values = np.frombuffer(bytes(content[-LOGITS_BYTES:]), dtype="<f4")
        content[-LOGITS_BYTES:] = values[::-1].tobytes()
        path.unlink()
        path.with_name(path.name.replace("Cast.", "TransData.", 1)).write_bytes(bytes(content))
    comparison = open_comparison(llama / "fx", ge, CompareOptions(cache=False))
    assert local_operators(comparison) == []
    unpaired = {u.name for u in comparison.pairing.unmatched if u.side == "test"}
    assert f"{case['graph']}/trans_TransData_9" in unpaired
