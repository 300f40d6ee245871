"""The command line takes options anywhere, and a missing dump is named, not a command never typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui_acc.cli import build_parser, command_first, main


def _parsed(*argv: str):
    parser = build_parser()
    return parser.parse_args(command_first(parser, list(argv)))


@pytest.mark.parametrize(
    "argv",
    [
        ("--no-cache", "G", "T"),
        ("G", "--no-cache", "T"),
        ("G", "T", "--no-cache"),
        ("--rank", "0", "--no-cache", "G", "T"),
        ("--config", "c.toml", "--rank=0", "--no-cache", "G", "T"),
    ],
)
def test_options_before_between_or_after_the_dumps_open_them(argv: tuple[str, ...]) -> None:
    args = _parsed(*argv)
    assert args.command == "open"
    assert (args.golden, args.test) == (Path("G"), Path("T"))
    assert args.no_cache is True


def test_a_value_that_is_a_number_is_not_taken_for_a_command() -> None:
    args = _parsed("--rank", "0", "G", "T")
    assert (args.command, args.rank, args.golden, args.test) == ("open", 0, Path("G"), Path("T"))


@pytest.mark.parametrize(
    "argv",
    [
        ("report", "--no-cache", "G", "T", "--json"),
        ("--no-cache", "report", "G", "T", "--json"),
        ("--json", "--rank", "1", "report", "G", "T", "--no-cache"),
    ],
)
def test_a_command_is_found_wherever_its_options_are(argv: tuple[str, ...]) -> None:
    args = _parsed(*argv)
    assert (args.command, args.golden, args.test, args.json, args.no_cache) == (
        "report",
        Path("G"),
        Path("T"),
        True,
        True,
    )


def test_a_value_named_like_a_command_stays_a_value() -> None:
    args = _parsed("--config", "report", "G", "T")
    assert (args.command, args.config, args.golden) == ("open", Path("report"), Path("G"))
    demo = _parsed("--out", "x", "demo", "--no-tui")
    assert (demo.command, demo.out, demo.no_tui) == ("demo", Path("x"), True)


def test_help_lists_the_options_of_opening_a_pair(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tui-acc [OPTIONS] GOLDEN TEST")
    for option in ("--no-cache", "--rank R", "--config FILE", "--mapping FILE", "--logits-cos"):
        assert option in out
    assert "report" in out and "demo" in out  # and the commands


def test_each_command_keeps_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: tui-acc report") and "--json" in out and "--no-cache" in out
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--atb" in capsys.readouterr().out


def test_one_dump_says_the_test_dump_is_missing_and_names_no_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["G"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "tui-acc: error: the following arguments are required: TEST" in err
    assert "tui-acc open" not in err
    with pytest.raises(SystemExit):
        main(["--rank", "0", "G"])
    assert "required: TEST" in capsys.readouterr().err
