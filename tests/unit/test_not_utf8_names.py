"""Names that are not UTF-8 (another encoding's bytes, which Python keeps as surrogates): no frame,
JSON reader or terminal takes them. Inside a dump, the folder or file so named is named (shown with
U+FFFD for those bytes) and left out, and the rest compared; a dump so named, or a path given so, is
refused with the reason and what to do. Before, each ended in polars' "surrogates not allowed".
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import device_dir
from tests.unit.test_bad_input import _copy, _errors, _report
from tui_acc.cli.main import main
from tui_acc.dumps import DumpError, open_dump

FAULT_OP = "root.model.layers.2.mlp.down_proj"
LATIN1 = b"caf\xe9"  # "café" in Latin-1: not UTF-8


def _renamed(path: Path, suffix: bytes) -> Path:
    """``path`` renamed with ``suffix``'s bytes appended; the new path (surrogates where not UTF-8)."""
    target = os.fsencode(path) + suffix
    os.rename(os.fsencode(path), target)  # noqa: PTH104 (a bytes name)
    return Path(os.fsdecode(target))


def test_an_msit_device_folder_not_in_utf8_is_named_as_the_reason(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    _renamed(device_dir(test), LATIN1)
    code = main(["report", str(golden), str(test), "--json", "--no-cache"])
    said = capsys.readouterr().err
    assert code == 2
    assert "caf\ufffd: its name is not UTF-8" in said, said


def test_a_dump_named_in_another_encoding_is_refused_with_what_to_do(
    demo_pair, tmp_path: Path, capsys
) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    holder = tmp_path / "runs"
    holder.mkdir()
    moved = Path(shutil.move(test, holder / "test"))
    renamed = _renamed(moved, LATIN1)
    with pytest.raises(DumpError, match=r"not UTF-8.*rename the folder, or give a link to it"):
        open_dump(renamed)  # the path itself
    code = main(["report", str(golden), str(holder), "--json", "--no-cache"])
    said = capsys.readouterr().err
    assert code == 2  # the folder holding it points at it, and says it would be refused
    assert "testcaf\ufffd: a dump whose name is not UTF-8" in said, said


@pytest.fixture
def torchair_pair(torchair_case, tmp_path: Path) -> tuple[Path, Path]:
    """The FX golden and the GE fault dump of tests/data/torchair/llama, copied to be damaged."""
    llama = torchair_case("llama")
    golden = shutil.copytree(llama / "fx", tmp_path / "golden")
    return golden, shutil.copytree(llama / "ge-fault", tmp_path / "test")


def test_an_fx_file_not_in_utf8_is_named_and_the_ge_fault_still_found(torchair_pair, capsys) -> None:
    golden, test = torchair_pair
    first = sorted(golden.glob("msprobe_fx_dump/*/graph_1/0/*.npy"))[0]
    _renamed(first, LATIN1)
    report = _report(golden, test, capsys)
    assert any("caf\ufffd: its name is not UTF-8" in e for e in _errors(report)), _errors(report)
    assert report["first_failing_op"]["token"] == 2
    assert report["first_failing_op"]["golden"] == "graph_2/mm_13-aten.mm.default"


def test_a_ge_graph_folder_not_in_utf8_is_named_and_the_rest_compared(torchair_pair, capsys) -> None:
    golden, test = torchair_pair
    (decode,) = test.glob("msprobe_ge_dump/*/*/*/graph_2")
    _renamed(decode, LATIN1)
    report = _report(golden, test, capsys)
    assert any("graph_2caf\ufffd: its name is not UTF-8" in e for e in _errors(report)), _errors(report)
    # the prefill graph's token compared, the decode graph's (and its fault) named as not
    assert [row["token"] for row in report["tokens"]] == [0]
    assert report["tokens"][0]["verdict"] == "pass"
