"""The command line takes options anywhere, and a missing dump is named, not a command never typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.cli.parser import build_parser, command_first, parse


def _parsed(*argv: str):
    parser = build_parser()
    return parse(parser, command_first(parser, list(argv)))


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


def test_one_dump_is_checked_on_its_own_and_a_missing_one_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without TEST, GOLDEN is checked on its own (anomalies); a path that is not there is said."""
    assert main(["report", str(tmp_path / "G")]) == 2
    assert f"tui-acc: error: {tmp_path / 'G'}: no such file or directory" in capsys.readouterr().err
    assert main(["--rank", "0", "report", str(tmp_path / "G")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["G", "T", "U"])
    assert exit_.value.code == 2 and "unrecognized arguments: U" in capsys.readouterr().err
