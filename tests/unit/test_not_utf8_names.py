"""Names that are not UTF-8 (another encoding's bytes, which Python keeps as surrogates): no frame,
JSON reader or terminal takes them. Inside a dump, the folder or file so named is named (shown with
U+FFFD for those bytes) and left out, and the rest compared; a dump so named, or a path given so, is
refused with the reason and what to do. Before, each ended in polars' "surrogates not allowed".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import device_dir
from tests.unit.test_bad_input import _copy, _errors, _msprobe_copy, _report
from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main
from tui_acc.demo.probe_export import export_probe
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
    with pytest.raises(DumpError, match=r"not UTF-8.*rename the folders so named"):
        open_dump(renamed)  # the path itself
    link = tmp_path / "named-in-utf8"
    link.symlink_to(renamed)
    with pytest.raises(DumpError, match=r"caf\ufffd: the path is not UTF-8"):
        open_dump(link)  # where a link named in UTF-8 leads
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


def test_an_atb_probe_operation_folder_and_tensor_file_not_in_utf8_are_named(
    atb_pair, tmp_path: Path
) -> None:
    """msprobe's ATB probe layout: an operation folder so named is named (not dropped without a
    word, its contents with it), and so is a tensor file (its path had reached polars)."""
    _golden, plain, _ = atb_pair
    probe = tmp_path / "run"
    export_probe([plain], probe)
    (device,) = probe.glob("atb_dump_data/data/*")
    (mlp,) = (device / "3").glob("3_LlamaLayer/3_MlpGateLayerV2")
    _renamed(mlp, LATIN1)
    (tensor,) = (device / "2").glob("3_LlamaLayer/3_MlpGateLayerV2/3_LinearOperation/after/outtensor0*.bin")
    shutil.copy(tensor, Path(os.fsdecode(os.fsencode(tensor.parent) + b"/outtensor0_\xe9.bin")))
    comparison = open_comparison(atb_pair[0], probe, CompareOptions(cache=False))
    said = [f"{p.path}: {p.message}" for p in comparison.test.problems]
    assert any("3_MlpGateLayerV2caf\ufffd: its name is not UTF-8" in e for e in said), said
    assert any("outtensor0_\ufffd.bin: its name is not UTF-8" in e for e in said), said
    comparison.engine.tokens_frame()  # every token's rows made: no name reaches a frame
    comparison.verdicts.token(3)


def test_a_dump_json_record_named_with_a_lone_surrogate_is_named_not_read(
    model_case, tmp_path: Path, capsys
) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    text = dump_json.read_text(encoding="utf-8").replace(
        '"Functional.dropout.0.forward"', '"Functional.dropout\\udce9.0.forward"', 1
    )
    dump_json.write_text(text, encoding="utf-8")
    report = _report(golden, test, capsys)
    assert any("records named with an unpaired surrogate" in e for e in _errors(report)), _errors(report)
    assert report["tokens"]


def test_a_folder_of_dumps_beside_one_named_in_another_encoding_still_points_at_the_others(
    demo_pair, tmp_path: Path, capsys
) -> None:
    golden, test, _ = _copy(demo_pair, tmp_path)
    shutil.copytree(test, Path(os.fsdecode(os.fsencode(tmp_path / "copy") + LATIN1)))
    code = main(["report", str(tmp_path), "--json", "--no-cache"])
    said = capsys.readouterr().err
    assert code == 2
    assert "compare them with tui-acc" in said and str(golden) in said and str(test) in said, said
    assert "copycaf\ufffd/ beside them is named in another encoding" in said, said


def test_a_construct_json_call_named_with_a_lone_surrogate_is_named(
    model_case, tmp_path: Path, capsys
) -> None:
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    text = construct.read_text(encoding="utf-8")
    construct.write_text(text.replace("{", '{"Module.x\\udce9.X.forward.0": null, ', 1), encoding="utf-8")
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: ")]
    assert len(said) == 1 and "name a call with an unpaired surrogate" in said[0], _errors(report)
    key = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    assert report["first_failing_op"]["golden"] == key["fault_record"]
