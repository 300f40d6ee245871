"""``tui-acc report``: JSON contents, text, CSV, and exit codes."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tui_acc.cli.main import main


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["report", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_demo_report_names_the_injected_token_and_operator(demo_pair, capsys) -> None:
    code, report = _json(capsys, str(demo_pair.golden), str(demo_pair.test))
    assert code == 1
    assert report["first_failing_token"] == demo_pair.fault_token
    op = report["first_failing_op"]
    assert op["token"] == demo_pair.fault_token
    assert op["golden"] == op["test"] == demo_pair.fault_module
    assert op["golden_type"] == "Linear" and op["inputs_passed"] is True
    assert report["golden"]["format"] == report["test"]["format"] == "msit-torch"
    assert report["pairs"] > 0 and report["unmatched"] == [] and report["errors"] == []
    first = report["tokens"][0]
    assert set(first) >= {"token", "cosine", "kl", "passed"} and first["passed"] is True
    assert [t["passed"] for t in report["tokens"]][: demo_pair.fault_token + 1] == [True] * 3 + [False]


def test_reference_pair_passes_with_exit_0(reference: Path, capsys) -> None:
    case = reference / "msit-torch-2layer"
    code, report = _json(capsys, str(case / "golden"), str(case / "test"))
    assert code == 0
    assert report["first_failing_token"] is None and report["first_failing_op"] is None
    # every tensor file of the golden dump is paired (61 a token)
    tensors = list((case / "golden").rglob("*.pth"))
    assert report["pairs"] == len(tensors) == 61 * len({p.parents[1].name for p in tensors})
    assert report["logits_node"] == "root.lm_head"


def test_explicit_token_is_analysed(demo_pair, capsys) -> None:
    code, report = _json(capsys, str(demo_pair.golden), str(demo_pair.test), "--token", "1")
    assert report["analysed_token"] == 1
    assert report["first_failing_op"] is None and report["failing_ops"] == 0
    assert code == 1  # later tokens still fail


def test_thresholds_are_configurable(demo_pair, capsys) -> None:
    code, report = _json(
        capsys, str(demo_pair.golden), str(demo_pair.test), "--logits-cos", "0.9", "--kl-bf16", "0.05"
    )
    assert code == 1  # the tokens after the fault still fail
    assert report["thresholds"]["logits"]["bfloat16"] == {"cosine": 0.9, "kl": 0.05}
    assert [t["passed"] for t in report["tokens"]][demo_pair.fault_token] is True


def test_logits_node_override(demo_pair, capsys) -> None:
    _, report = _json(capsys, str(demo_pair.golden), str(demo_pair.test), "--logits-node", "root.model.norm")
    assert report["logits_node"] == "root.model.norm"
    code = main(["report", str(demo_pair.golden), str(demo_pair.test), "--logits-node", "root.nope"])
    assert code == 2 and "root.nope" in capsys.readouterr().err


def test_bad_input_exits_2_with_the_path_named(tmp_path: Path, demo_pair, capsys) -> None:
    assert main(["report", str(tmp_path / "nope"), str(demo_pair.test)]) == 2
    assert f"{tmp_path / 'nope'}: no such file or directory" in capsys.readouterr().err
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--token", "99"]) == 2
    assert "token 99 is not in both dumps (paired tokens: 0..7)" in capsys.readouterr().err


def test_csv_holds_the_operator_table_and_is_never_overwritten(demo_pair, tmp_path: Path, capsys) -> None:
    out = tmp_path / "ops.csv"
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--csv", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"csv: {out}" in text and "first failing op at token 3: root.model.layers.2.mlp.down_proj" in text
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["token"] for r in rows} == {str(demo_pair.fault_token)}
    suspects = [r["golden_node"] for r in rows if r["suspect"] == "true"]
    assert demo_pair.fault_module in suspects
    before = out.read_bytes()
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--csv", str(out)]) == 2
    assert "already exists; not overwritten" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert (
        main(
            [
                "report",
                str(demo_pair.golden),
                str(demo_pair.test),
                "--csv",
                str(out),
                "--force",
                "--token",
                "0",
            ]
        )
        == 1
    )
    with out.open(newline="") as handle:
        assert {r["token"] for r in csv.DictReader(handle)} == {"0"}


def test_the_report_table_says_where_it_came_from_and_takes_the_format_of_its_name(
    demo_pair, tmp_path: Path, capsys
) -> None:
    """As the TUI's export: provenance columns; .parquet (or .xlsx) by the file's name."""
    import polars as pl

    out = tmp_path / "ops.parquet"
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--csv", str(out)]) == 1
    frame = pl.read_parquet(out)
    assert frame["source_golden"].unique().to_list() == [str(Path(demo_pair.golden).resolve())]
    assert demo_pair.fault_module in frame.filter(pl.col("suspect"))["golden_node"].to_list()


def test_no_command_prints_help(capsys) -> None:
    assert main([]) == 2
    assert "report" in capsys.readouterr().out


def test_demo_reuses_an_existing_demo_and_refuses_foreign_folders(demo_pair, tmp_path: Path, capsys) -> None:
    assert main(["demo", "--out", str(demo_pair.out), "--no-tui"]) == 0
    out = capsys.readouterr().out
    assert "reusing the demo" in out and "root.model.layers.2.mlp.down_proj at token 3" in out
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert main(["demo", "--out", str(foreign), "--no-tui"]) == 2
    assert "not an empty folder or an earlier demo" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "keep me"
    # an earlier demo without its weights (p could not replay it) is said, not reused or replaced
    earlier = tmp_path / "earlier"
    shutil.copytree(demo_pair.out, earlier)
    manifest = json.loads((earlier / "demo.json").read_text())
    del manifest["weights"]
    (earlier / "demo.json").write_text(json.dumps(manifest))
    assert main(["demo", "--out", str(earlier), "--no-tui"]) == 2
    assert "an earlier one dumped no weights" in capsys.readouterr().err
    assert (earlier / "golden").is_dir()


def test_json_is_strict_and_says_which_numbers_were_not_finite(tmp_path: Path, capsys) -> None:
    """An all-zero golden makes relative errors infinite: strict JSON has no Infinity, so null."""
    import json

    import torch

    torch.save(torch.zeros(4, 4), tmp_path / "golden.pt")
    torch.save(torch.ones(4, 4), tmp_path / "test.pt")
    main(["report", str(tmp_path / "golden.pt"), str(tmp_path / "test.pt"), "--json", "--no-cache"])

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    report = json.loads(capsys.readouterr().out, parse_constant=refuse)
    tensor = report["tensor"]
    assert tensor["rel_euclidean"] is None and tensor["non_finite"] == {"rel_euclidean": "inf"}
