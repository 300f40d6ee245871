"""``tui-acc report --plot DIR``: where the error sits, as SVG files for a ticket; never over a file."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from tui_acc.cli.main import main

SVG = "{http://www.w3.org/2000/svg}"


def _texts(path: Path) -> str:
    root = ET.parse(path).getroot()  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    return "\n".join(element.text or "" for element in root.iter(f"{SVG}text"))


def test_plot_draws_the_culprits_tensors_and_the_logits(demo_pair, tmp_path: Path, capsys) -> None:
    out = tmp_path / "plots"  # made by --plot
    code = main(["report", str(demo_pair.golden), str(demo_pair.test), "--plot", str(out)])
    text = capsys.readouterr().out
    assert code == 1  # the verdict's exit code: the pictures were all drawn
    token, culprit = demo_pair.fault_token, demo_pair.fault_module
    output = out / f"token{token}-{culprit}-output.svg"
    inputs = out / f"token{token}-{culprit}-input_0.svg"
    logits = out / f"token{token}-root.lm_head-output.svg"
    assert sorted(out.iterdir()) == sorted([output, inputs, logits])
    # the report says where the files went, and what each shows
    assert f"plots: {out.resolve()}" in text
    assert f"  {output.name}: first failing op, failing output, stands out" in text
    assert "channels 16-63 (48 of 64)" in text  # the demo's fault: the last 48 output columns
    drawn = _texts(output)
    assert culprit in drawn and "channels 16-63 (48 of 64)" in drawn and "u = 2^-8" in drawn
    assert str(demo_pair.golden.resolve()) in drawn  # where it came from, for the ticket
    assert "input" in _texts(inputs)
    root = ET.parse(output).getroot()
    cells = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert any("rows 0-0, channels 16-16" in (r.find(f"{SVG}title").text or "") for r in cells)


def test_plot_never_overwrites_and_force_replaces(demo_pair, tmp_path: Path, capsys) -> None:
    out = tmp_path / "plots"
    pair = [str(demo_pair.golden), str(demo_pair.test)]
    assert main(["report", *pair, "--plot", str(out)]) == 1
    capsys.readouterr()
    mine = out / f"token{demo_pair.fault_token}-root.lm_head-output.svg"
    mine.write_text("the user's own notes")
    before = {path: path.read_bytes() for path in out.iterdir()}
    code = main(["report", *pair, "--plot", str(out)])
    captured = capsys.readouterr()
    assert code == 2  # asked for pictures, none drawn: not a pass, not a plain failure either
    assert {path: path.read_bytes() for path in out.iterdir()} == before  # nothing touched
    assert f"{mine}: already exists; not overwritten (--force replaces it)" in captured.err
    assert "first failing token: 3" in captured.out  # the report itself is still printed
    assert main(["report", *pair, "--plot", str(out), "--force", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["plots"]["problems"] == [] and len(report["plots"]["written"]) == 3
    assert mine.read_text().startswith("<svg")


def test_two_tensor_files_draw_their_pair(tmp_path: Path, capsys) -> None:
    import torch

    golden = torch.randn((64, 128), generator=torch.Generator().manual_seed(0))
    test = golden.clone()
    test[9] += 1.0
    torch.save(golden, tmp_path / "golden.pt")
    torch.save(test, tmp_path / "test.pt")
    out = tmp_path / "p"
    code = main(["report", str(tmp_path / "golden.pt"), str(tmp_path / "test.pt"), "--plot", str(out)])
    text = capsys.readouterr().out
    (picture,) = out.iterdir()
    assert "row 9" in _texts(picture) and picture.name in text
    assert code == 1


def test_plot_needs_two_dumps(demo_pair, tmp_path: Path, capsys) -> None:
    code = main(["report", str(demo_pair.test), "--plot", str(tmp_path / "p")])
    assert code == 2 and "--plot compare(s) two dumps" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_folder_that_cannot_be_made_is_said(demo_pair, tmp_path: Path, capsys) -> None:
    (tmp_path / "taken").write_text("a file where the folder would go")
    code = main(["report", str(demo_pair.golden), str(demo_pair.test), "--plot", str(tmp_path / "taken")])
    captured = capsys.readouterr()
    assert code == 2 and "cannot make the folder" in captured.err
    assert (tmp_path / "taken").read_text() == "a file where the folder would go"
