"""Golden and test given the wrong way round: the golden is the less precise side,
and the report says so with the user's command line, the two paths swapped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.sides import less_precise, swapped_command, swapped_sides


@pytest.mark.parametrize(
    ("golden", "test", "less"),
    [
        ("bfloat16", "float32", True),
        ("float16", "float32", True),
        ("float8_e4m3fn", "bfloat16", True),
        ("float32", "float64", True),
        ("float32", "bfloat16", False),
        ("float16", "bfloat16", False),  # float16 holds more significand bits than bfloat16
        ("float32", "float32", False),
        ("int64", "float32", None),
        (None, "float32", None),
    ],
)
def test_which_side_is_less_precise(golden: str | None, test: str, less: bool | None) -> None:
    assert less_precise(golden, test) is less


def test_the_token_rows_decide_and_a_row_the_other_way_cancels() -> None:
    bf16_golden = {"golden_dtype": "bfloat16", "test_dtype": "float32"}
    swapped = swapped_sides([{"golden_dtype": None, "test_dtype": "float32"}, bf16_golden])
    assert swapped is not None and (swapped.golden_dtype, swapped.test_dtype) == ("bfloat16", "float32")
    assert swapped_sides([bf16_golden, {"golden_dtype": "float32", "test_dtype": "bfloat16"}]) is None
    assert swapped_sides([{"golden_dtype": "float32", "test_dtype": "float32"}]) is None


def test_the_command_line_has_the_two_paths_swapped_wherever_they_were() -> None:
    argv = ["report", "--json", "./runs/bf16/", "--token", "3", "runs/fp32"]
    assert swapped_command(argv, Path("runs/bf16"), Path("runs/fp32")) == (
        "tui-acc report --json runs/fp32 --token 3 ./runs/bf16/"
    )
    assert swapped_command(["a b", "c"], Path("a b"), Path("c")) == "tui-acc c 'a b'"  # quoted for a shell
    assert swapped_command(["x", "y"], Path("a"), Path("y")) is None


def test_a_demo_pair_opened_the_wrong_way_round_is_said_with_the_command_that_swaps_it(
    demo_pair, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(demo_pair.out)
    assert main(["report", "test", "golden", "--no-cache"]) == 1
    text = capsys.readouterr().out
    assert "warning: golden is bfloat16, test is float32: the reference is less precise" in text
    assert "To swap them: tui-acc report golden test --no-cache\n" in text
    assert main(["report", "--json", "test", "golden", "--no-cache"]) == 1
    assert json.loads(capsys.readouterr().out)["swapped"] == {
        "golden_dtype": "bfloat16",
        "test_dtype": "float32",
        "command": "tui-acc report --json golden test --no-cache",
    }


def test_the_right_way_round_says_nothing(demo_pair, capsys) -> None:
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--no-cache"]) == 1
    assert "swap" not in capsys.readouterr().out
    assert main(["report", "--json", str(demo_pair.golden), str(demo_pair.test), "--no-cache"]) == 1
    assert json.loads(capsys.readouterr().out)["swapped"] is None
