"""``tui-acc report --ranks DUMP`` (and ``ranks DUMP --json``): JSON, text, CSV, exit codes, margin."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.unit.ranks_dumps import op_name, write_atb_run
from tui_acc.cli.main import main

ROW_KEYS = {
    "token",
    "op",
    "rank",
    "cosine_similarity",
    "max_relative_error",
    "mean_relative_error",
    "relative_euclidean_distance",
    "passed",
}


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_demo_run_reports_its_fault_and_exits_1(ranks_demo, capsys) -> None:
    code, report = _json(capsys, "report", "--ranks", str(ranks_demo.dump))
    assert code == 1
    fault = ranks_demo.fault
    assert report["first_bad"] == {"token": fault.token, "op": ranks_demo.fault_op, "rank": fault.rank}
    rows = report["collectives"]
    assert all(set(row) >= ROW_KEYS for row in rows)
    assert {row["op"] for row in rows if row["token"] == 0} >= {"1_LlamaLayer/3_AllReduceOperation"}
    assert [r for r in rows if not r["passed"]] == [
        next(
            r
            for r in rows
            if (r["token"], r["op"], r["rank"]) == (fault.token, ranks_demo.fault_op, fault.rank)
        )
    ]
    assert report["ranks"] == ["0_5100", "1_5101"] and report["errors"] == []


@pytest.mark.parametrize("where", ["tensors", "root"])
def test_a_clean_run_exits_0_from_tensors_or_the_dump_root(tmp_path: Path, capsys, where: str) -> None:
    tensors = write_atb_run(tmp_path, 4)
    path = tensors if where == "tensors" else tmp_path
    code, report = _json(capsys, "report", "--ranks", str(path))
    assert code == 0 and report["first_bad"] is None
    assert len(report["collectives"]) == 3 * 2 * 4 and all(r["passed"] for r in report["collectives"])


def test_options_go_anywhere_and_ranks_json_is_headless(tmp_path: Path, capsys) -> None:
    tensors = write_atb_run(tmp_path, 2, fault=(2, 0, 0))
    code, report = _json(capsys, "--margin", "3", "report", str(tensors), "--ranks")
    assert code == 1 and report["margin"] == 3.0
    assert report["first_bad"] == {"token": 2, "op": op_name(0), "rank": 0}
    code, again = _json(capsys, "ranks", str(tensors))
    assert code == 1 and again["first_bad"] == report["first_bad"]


def test_a_rank_lacking_an_op_exits_1_and_is_named_in_text(tmp_path: Path, capsys) -> None:
    tensors = write_atb_run(tmp_path, 2, skip=frozenset({(1, 1, 0)}))
    code = main(["report", "--ranks", str(tensors)])
    out = capsys.readouterr().out
    assert code == 1  # not every rank could be judged
    assert "ERROR" in out and "has no such operator at token 1" in out and "first disagreeing: none" in out


def test_csv_is_written_atomically_and_never_over_a_file(tmp_path: Path, capsys) -> None:
    tensors = write_atb_run(tmp_path / "run", 2, fault=(0, 1, 1))
    target = tmp_path / "ranks.csv"
    code, report = _json(capsys, "report", "--ranks", str(tensors), "--csv", str(target))
    assert code == 1 and report["csv"] == str(target.resolve())
    with target.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 2 * 2
    assert ROW_KEYS | {"beyond_bound", "source_dump", "source_margin"} <= set(rows[0])
    assert [(r["token"], r["op"], r["rank"]) for r in rows if r["passed"] == "false"] == [
        ("0", op_name(1), "1")
    ]
    assert main(["report", "--ranks", str(tensors), "--csv", str(target)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["report", "--ranks", str(tensors), "--csv", str(target), "--force"]) == 1


def test_bad_input_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["report", "--ranks", str(tmp_path / "nowhere")]) == 2
    assert "no such file" in capsys.readouterr().err
    tensors = write_atb_run(tmp_path / "one", 2, tokens=1)
    assert main(["report", "--ranks", str(next(tensors.iterdir()))]) == 2
    assert "holds one rank" in capsys.readouterr().err
    assert main(["report", "--ranks", str(tensors), "--margin", "0.5"]) == 2
    assert "--margin must be a number >= 1" in capsys.readouterr().err


def test_the_margin_comes_from_tui_acc_toml(tmp_path: Path, capsys) -> None:
    tensors = write_atb_run(tmp_path / "run", 2, tokens=1)
    config = tmp_path / "tui-acc.toml"
    config.write_text("[collectives]\nmargin = 4\n", encoding="utf-8")
    code, report = _json(capsys, "report", "--ranks", str(tensors), "--config", str(config))
    assert code == 0 and report["margin"] == 4.0
    config.write_text("[collectives]\nmargins = 4\n", encoding="utf-8")
    assert main(["report", "--ranks", str(tensors), "--config", str(config)]) == 2
    assert "unknown keys in [collectives]" in capsys.readouterr().err


def test_demo_ranks_no_tui_writes_the_run_and_says_where_the_fault_is(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--ranks", "2", "--no-tui", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "injected fault: token 3, 3_LlamaLayer/8_AllReduceOperation, rank 1" in said
    assert f"tui-acc ranks {out / 'test'}" in said
    assert main(["demo", "--ranks", "2", "--no-tui", "--out", str(out)]) == 0  # reused
    assert "reusing the demo" in capsys.readouterr().out
    assert main(["demo", "--ranks", "1", "--no-tui", "--out", str(tmp_path / "one")]) == 2


def test_a_run_without_collectives_exits_2(tmp_path: Path, capsys) -> None:
    import shutil

    tensors = write_atb_run(tmp_path, 2, tokens=1)
    for folder in list(tensors.rglob("1_AllReduceOperation")):
        shutil.rmtree(folder)
    assert main(["report", "--ranks", str(tensors)]) == 2
    assert "no collective operator found" in capsys.readouterr().err
