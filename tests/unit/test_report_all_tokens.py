"""``report --all-tokens``: the CI gate compares every token's operators, so a failing operator or a
damaged file at a token whose logits pass fails the run; every report says whose operators it compared."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import device_dir
from tui_acc.cli.main import main

BROKEN_OP = "root.model.layers.1.mlp.down_proj"  # not the logits: the token's verdict stays a pass
DAMAGED = "root.model.layers.0.mlp.up_proj"


@pytest.fixture
def hidden_faults(demo_pair, tmp_path: Path) -> tuple[Path, Path]:
    """The golden against a copy of it with one operator's output negated at token 2 and one file
    truncated at token 1: every token's logits still pass."""
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.golden, test)
    output = device_dir(test) / "2" / BROKEN_OP / "output.pth"
    torch.save(-torch.load(output), output)
    (device_dir(test) / "1" / DAMAGED / "output.pth").write_bytes(b"truncated")
    return golden, test


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["report", *args, "--json", "--no-cache"])
    return code, json.loads(capsys.readouterr().out)


def test_default_report_compares_no_operator_when_the_logits_pass_and_says_so(hidden_faults, capsys) -> None:
    golden, test = map(str, hidden_faults)
    code, report = _report(capsys, golden, test)
    assert all(t["passed"] for t in report["tokens"])
    assert report["operators_compared_at"] == [] and code == 0  # the default is unchanged
    assert main(["report", golden, test, "--no-cache"]) == 0
    assert "operators compared at: no token" in capsys.readouterr().out


def test_all_tokens_finds_a_failing_operator_and_a_damaged_file_where_the_logits_pass(
    hidden_faults, capsys
) -> None:
    golden, test = map(str, hidden_faults)
    code, report = _report(capsys, golden, test, "--all-tokens")
    assert code == 1
    assert report["operators_compared_at"] == list(range(8))
    assert report["first_failing_token"] is None
    assert {(f["token"], f["golden"], f["label"]) for f in report["failing"]} >= {(2, BROKEN_OP, "local")}
    assert report["failing_ops"] == len(report["failing"]) > 0
    op = report["first_failing_op"]
    assert (op["token"], op["golden"]) == (2, BROKEN_OP)
    damaged = [e for e in report["errors"] if e["file"].endswith(f"/1/{DAMAGED}/output.pth")]
    assert damaged, report["errors"]
    assert main(["report", golden, test, "--no-cache", "--all-tokens"]) == 1
    text = capsys.readouterr().out
    assert "operators compared at: every token (0..7)" in text
    assert f"first failing op at token 2: {BROKEN_OP}" in text


def test_all_tokens_on_a_clean_pair_passes(demo_pair, tmp_path: Path, capsys) -> None:
    test = tmp_path / "test"
    shutil.copytree(demo_pair.golden, test)
    code, report = _report(capsys, str(demo_pair.golden), str(test), "--all-tokens")
    assert (code, report["failing_ops"], report["errors"]) == (0, 0, [])
    assert report["operators_compared_at"] == list(range(8))


def test_the_default_report_names_the_token_it_compared(demo_pair, capsys) -> None:
    code, report = _report(capsys, str(demo_pair.golden), str(demo_pair.test))
    assert code == 1 and report["operators_compared_at"] == [demo_pair.fault_token]
    assert {f["token"] for f in report["failing"]} == {demo_pair.fault_token}
    main(["report", str(demo_pair.golden), str(demo_pair.test)])
    assert f"operators compared at: token {demo_pair.fault_token}\n" in capsys.readouterr().out


def test_the_demo_fault_is_the_one_local_operator_of_every_token(demo_pair, capsys) -> None:
    # the demo's bf16 test drifts from its fp32 golden at every operator of every token: only the
    # injected fault adds error of its own
    code, report = _report(capsys, str(demo_pair.golden), str(demo_pair.test), "--all-tokens")
    local = {(f["token"], f["golden"]) for f in report["failing"] if f["label"] == "local"}
    assert code == 1 and local == {(demo_pair.fault_token, demo_pair.fault_module)}
