"""A pair that cannot mean anything is refused with the reason (exit 2), in the report and before the
TUI opens: the same dump twice, a tensor file against a folder, dumps with no token in common."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import device_dir
from tui_acc.cli.main import main


@pytest.fixture
def no_tui(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI must not open: a launch that gets as far as running the app fails the test."""
    from tui_acc.tui.app import AccApp

    def run(self: AccApp, *args: object, **kwargs: object) -> None:
        raise AssertionError("the TUI opened on a pair it should have refused")

    monkeypatch.setattr(AccApp, "run", run)


@pytest.mark.parametrize("command", [["report"], ["report", "--json"], []])
def test_the_same_dump_twice_is_refused(demo_pair, no_tui, command, capsys) -> None:
    golden = str(demo_pair.golden)
    assert main([*command, golden, golden]) == 2
    err = capsys.readouterr().err
    assert "golden and test are the same dump" in err
    inner = str(device_dir(demo_pair.golden))  # another level of the same dump: still the same data
    assert main([*command, golden, inner]) == 2
    assert "same dump" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["report"], []])
def test_a_tensor_file_against_a_folder_says_nothing_pairs(demo_pair, no_tui, command, capsys) -> None:
    tensor = device_dir(demo_pair.golden) / "3" / demo_pair.fault_module / "output.pth"
    assert main([*command, str(tensor), str(demo_pair.test)]) == 2
    err = capsys.readouterr().err
    assert "nothing pairs" in err and "single tensor file" in err and "msit-torch dump" in err
    assert str(tensor) in err and str(demo_pair.test) in err
    assert main([*command, str(demo_pair.golden), str(tensor)]) == 2  # either way round
    assert "nothing pairs" in capsys.readouterr().err


def test_dumps_without_a_common_token_are_refused(demo_pair, tmp_path: Path, no_tui, capsys) -> None:
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.test, test)
    for token in range(8):
        shutil.rmtree(device_dir(golden if token >= 4 else test) / str(token))
    assert main(["report", str(golden), str(test)]) == 2
    err = capsys.readouterr().err
    assert "no token is in both dumps" in err and "tokens 0..3" in err and "tokens 4..7" in err


def test_two_tensor_files_and_a_real_pair_still_compare(demo_pair, capsys) -> None:
    tensors = [
        device_dir(getattr(demo_pair, s)) / "3" / demo_pair.fault_module / "output.pth"
        for s in ("golden", "test")
    ]
    assert main(["report", *map(str, tensors)]) == 1  # the faulty operator's output: compared, fails
    assert main(["report", str(demo_pair.golden), str(demo_pair.test)]) == 1
    assert "error" not in capsys.readouterr().err


def test_a_torchair_pair_is_checked_without_pairing_a_token(torchair_case, monkeypatch, tmp_path) -> None:
    """Pairing a GE token reads every op's file header: the check before the TUI opens asks whether
    the token's graph has a golden graph (graphs pair only by the ops they share) instead. A GE dump
    whose graph text shares no op with the golden's is still refused: none of its tokens pairs."""
    from tui_acc import CompareOptions, open_comparison
    from tui_acc.dumps.model import DumpError
    from tui_acc.session import check_comparable

    folder = torchair_case("llama")
    comparison = open_comparison(folder / "fx", folder / "ge-fault", CompareOptions(cache=False))
    check_comparable(comparison)
    assert not any(comparison.pairing.is_paired(t) for t in comparison.pairing.tokens)
    ge = tmp_path / "ge"
    shutil.copytree(folder / "ge-fault", ge)
    for text in ge.glob("msprobe_ge_dump/dynamo_original_graph_*.txt"):  # no op computes an FX node
        text.write_text(text.read_text().replace("_fx_tensor_name", "_other_attr"))
    unrelated = open_comparison(folder / "fx", ge, CompareOptions(cache=False))
    with pytest.raises(DumpError, match="no token is in both dumps"):
        check_comparable(unrelated)
