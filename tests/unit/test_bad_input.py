"""The bad-input matrix: each damaged file is a named error, the rest of the comparison goes on.

Every case is a copy of a generated dump pair with one thing broken the way crashed runs, full
disks, half-copied folders and other people's machines break them; ``report --json`` must list
the error with the file and the problem, and still report everything else.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import device_dir
from tui_acc import CompareOptions, open_comparison
from tui_acc.cli.main import main

FAULT_OP = "root.model.layers.2.mlp.down_proj"


@pytest.mark.parametrize("copied_as", [["03"], ["03", "003"]], ids=["beside the dumper's", "two spellings"])
def test_two_folders_naming_one_token_are_named(demo_pair, tmp_path: Path, capsys, copied_as) -> None:
    """The golden's token 3 copied into the test as 03 (beside the test's own 3, where the fault
    starts): both read as token 3, the copy replaced the test's token and the run passed (exit 0).
    The dumper's spelling is read and the copy named; two spellings that are neither: neither."""
    golden, test, device = _copy(demo_pair, tmp_path)
    for name in copied_as:
        shutil.copytree(device_dir(golden) / "3", device / name)
    if len(copied_as) > 1:
        shutil.rmtree(device / "3")
    report = _report(golden, test, capsys)
    named = [e for e in _errors(report) if "names token 3, as " in e]
    assert len(named) == len(copied_as), _errors(report)
    assert all(
        e.startswith(str(device / name)) for e, name in zip(sorted(named), sorted(copied_as), strict=True)
    )
    if len(copied_as) == 1:
        assert report["exit"] == 1 and report["first_failing_token"] == 3
    else:  # the test's token 3 is not compared: listed unmatched, and no pass claimed for it
        assert ("token", "golden", 3) in {(u["kind"], u["side"], u["token"]) for u in report["unmatched"]}
        assert report["exit"] == 1


def _copy(demo_pair, tmp_path: Path) -> tuple[Path, Path, Path]:
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.test, test)
    return golden, test, device_dir(test)


def _report(golden: Path, test: Path, capsys, *extra: str) -> dict:
    code = main(["report", str(golden), str(test), "--json", "--no-cache", *extra])
    report = json.loads(capsys.readouterr().out)
    report["exit"] = code
    return report


def _errors(report: dict) -> list[str]:
    return [f"{e['file']}: {e['message']}" for e in report["errors"]]


# (what is done to test/<device>/1/<module>/<file>, the problem the error must name)
TORCH_FILE_CASES = {
    "empty .pth": (lambda f: f.write_bytes(b""), "unreadable torch file"),
    "truncated .pth": (lambda f: f.write_bytes(f.read_bytes()[:100]), "unreadable torch file"),
    "a pickle of a dict": (lambda f: torch.save({"x": torch.ones(2)}, f), "holds a dict, not a tensor"),
    "a tensor of another shape": (lambda f: torch.save(torch.ones(3, 5), f), "element counts differ"),
    "dangling symlink": (lambda f: (f.unlink(), f.symlink_to(f.parent / "gone.pth")), "file not found"),
}


@pytest.mark.parametrize("case", sorted(TORCH_FILE_CASES))
def test_a_damaged_torch_file_is_named_and_the_rest_goes_on(
    demo_pair, tmp_path: Path, capsys, case: str
) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    damage, problem = TORCH_FILE_CASES[case]
    target = device / "3" / "root.model.layers.3.mlp.up_proj" / "output.pth"  # after the fault
    damage(target)
    report = _report(golden, test, capsys, "--token", "3")
    assert report["exit"] == 1
    named = [e for e in _errors(report) if str(target) in e or "up_proj/output" in e]
    assert named and problem in named[0], _errors(report)
    about_the_file = [e for e in report["errors"] if e["message"].startswith(f"{target}:")]
    assert all(e["file"] == str(target) for e in about_the_file)  # the test's file, not the golden's
    assert about_the_file or case == "a tensor of another shape"
    if case == "a tensor of another shape":  # which file is odd is not known: both named
        assert str(target) in named[0] and str(golden) in named[0]
    # the rest goes on: the injected fault is still found, the token verdicts are all there
    assert report["first_failing_op"]["golden"] == FAULT_OP
    assert len(report["tokens"]) == 8


def test_a_dtype_mismatch_is_compared_and_flagged(demo_pair, tmp_path: Path) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    target = device / "3" / "root.model.layers.0.mlp.up_proj" / "output.pth"
    torch.save(torch.load(target, weights_only=True).to(torch.float16), target)
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    row = next(
        r
        for r in cmp.engine.tensors_frame(3).to_dicts()
        if r["golden_node"] == "root.model.layers.0.mlp.up_proj" and r["role"] == "output"
    )
    assert (row["golden_dtype"], row["test_dtype"]) == ("float32", "float16")
    assert row["cosine"] is not None and row["error"] is None  # compared where meaningful


def test_empty_and_missing_token_folders(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    shutil.rmtree(device / "5")
    (device / "5").mkdir()  # an empty token folder: a run that died before dumping it
    shutil.rmtree(device / "6")  # a token that is not there at all
    report = _report(golden, test, capsys)
    unmatched = {(u["kind"], u["side"], u["token"]) for u in report["unmatched"]}
    assert ("token", "golden", 6) in unmatched
    tokens = {t["token"]: t for t in report["tokens"]}
    assert sorted(tokens) == [0, 1, 2, 3, 4, 5, 7]
    assert tokens[5]["error"] == "token 5: root.lm_head has no output on both sides (no logits)"
    assert tokens[5]["verdict"] == "error"  # compared, and says why: not a token left pending
    assert report["first_failing_token"] == 3


def test_a_model_tree_json_that_is_a_folder_is_named_and_rebuilt(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    (device / "model_tree.json").unlink()
    (device / "model_tree.json").mkdir()
    report = _report(golden, test, capsys)
    named = [e for e in report["errors"] if e["file"] == str(device / "model_tree.json")]
    assert named and "unreadable module tree" in named[0]["message"], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


@pytest.mark.parametrize("text", ["{", '{"name": "root", "children": [NaN]}', "", "[1, 2]"])
def test_a_bad_model_tree_is_reported_and_rebuilt(demo_pair, tmp_path: Path, capsys, text: str) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    (device / "model_tree.json").write_text(text)
    report = _report(golden, test, capsys)
    assert any("model_tree.json" in e and "unreadable module tree" in e for e in _errors(report)), _errors(
        report
    )
    assert report["first_failing_token"] == 3


def test_a_file_that_changes_while_read_is_an_error_and_not_cached(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tui_acc.metrics import kernels

    golden, test, device = _copy(demo_pair, tmp_path)
    target = device / "3" / FAULT_OP / "output.pth"
    compare = kernels.compare_tensors

    def while_a_writer_appends(g, t, kl=True):  # type: ignore[no-untyped-def]
        os.utime(target, ns=(1, target.stat().st_mtime_ns + 10**9))  # the writer touched it meanwhile
        return compare(g, t, kl=kl)

    monkeypatch.setattr(kernels, "compare_tensors", while_a_writer_appends)
    cmp = open_comparison(golden, test)
    pair = next(
        p for n in cmp.pairing.node_pairs(3) if n.golden == FAULT_OP for p in n.tensors if p.role == "output"
    )
    row = cmp.engine.tensor_row(pair)
    assert row["error"] == f"{target}: changed while being read; compare again when it is complete"
    cmp.engine.flush()
    monkeypatch.setattr(kernels, "compare_tensors", compare)
    again = open_comparison(golden, test).engine.tensor_row(pair)  # a new launch reads it again
    assert again["error"] is None and again["cosine"] < 0.99


def test_a_file_rewritten_while_read_is_said_so_not_called_damaged(
    demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dumper writing the file again while it is read: its bytes then miss their CRC-32, which alone
    would read as a damaged copy. The file changed meanwhile, so it is said to have changed."""
    from tui_acc.dumps.torchfile import reader

    golden, test, device = _copy(demo_pair, tmp_path)
    target = device / "3" / FAULT_OP / "output.pth"

    def rewritten_meanwhile(info, data, listed, file, start):  # type: ignore[no-untyped-def]
        if info.filename.endswith("/data/0") and target.stat().st_mtime_ns != 10**9:
            os.utime(target, ns=(10**9, 10**9))
            raise reader.TorchFileError(f"{info.filename}: its bytes do not match the CRC-32")

    monkeypatch.setattr(reader, "check_crc", rewritten_meanwhile)
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    pair = next(
        p for n in cmp.pairing.node_pairs(3) if n.golden == FAULT_OP for p in n.tensors if p.role == "output"
    )
    row = cmp.engine.tensor_row(pair)
    assert row["error"] == f"{target}: changed while being read; compare again when it is complete"


def test_an_unreadable_file_is_named(demo_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permissions (simulated: the tests may run as root, who reads everything)."""
    from tui_acc.dumps import tensors

    golden, test, device = _copy(demo_pair, tmp_path)
    target = device / "3" / FAULT_OP / "output.pth"
    real = tensors.read_torch_file

    def denied(path: Path, *, mapped: bool) -> object:
        if path == target:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, mapped=mapped)

    monkeypatch.setattr(tensors, "read_torch_file", denied)
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(3).rows}
    assert rows[FAULT_OP]["error"] == f"{target}: cannot read (Permission denied)"
    assert rows["root.model.layers.2.mlp.up_proj"]["outputs_passed"] is True


def test_a_symlink_out_of_the_dump_is_not_followed(demo_pair, tmp_path: Path, capsys) -> None:
    golden, test, device = _copy(demo_pair, tmp_path)
    outside = tmp_path / "elsewhere.pth"
    target = device / "3" / FAULT_OP / "output.pth"
    shutil.move(target, outside)
    target.symlink_to(outside)
    report = _report(golden, test, capsys, "--token", "3")
    assert any("outside the dump" in e and "--follow-links" in e for e in _errors(report)), _errors(report)
    allowed = _report(golden, test, capsys, "--token", "3", "--follow-links")
    assert allowed["first_failing_op"]["golden"] == FAULT_OP


# --- ATB ----------------------------------------------------------------------------------------


def _atb_copy(atb_pair, tmp_path: Path) -> tuple[Path, Path, Path]:
    golden, plain, _ = atb_pair
    test = tmp_path / "atb"
    shutil.copytree(plain, test)
    return golden, test, test / "tensors" / "0_4242"


def _header(dims: str = "1,1,64", dtype: int = 0, extra: str = "") -> bytes:
    return f"$Version=1.0\n$Object.Count=1\nformat=2\ndtype={dtype}\ndims={dims}\n{extra}".encode()


ATB_FILE_CASES = {
    "empty .bin": (b"", "no '$End=1' line"),
    "missing $End": (_header() + b"\x00" * 16, "no '$End=1' line"),
    "dims lie (bigger than the payload)": (_header("1,1,4096") + b"$End=1\n" + b"\x00" * 256, "truncated"),
    "unknown dtype code": (_header(dtype=99) + b"$End=1\n" + b"\x00" * 256, "dtype"),
    "malformed line": (_header() + b"garbage line\n$End=1\n", "malformed header line"),
    "data= outside the dump": (_header(extra="data=/etc/hostname\n") + b"$End=1\n", "outside the dump"),
    "not a number in dims": (_header("1,x,64") + b"$End=1\n", "dims"),
    # which line the writer meant is not known: bf16 bytes read as fp16 by the last one
    "a key given twice": (_header(dtype=27) + b"dtype=1\n$End=1\n" + b"\x00" * 128, "gives dtype twice"),
    "101 dims": (
        _header(",".join(["1"] * 101)) + b"$End=1\n",
        "dims has 101 entries; at most 64",
    ),
}


@pytest.mark.parametrize("case", sorted(ATB_FILE_CASES))
def test_a_damaged_bin_file_is_named_and_the_rest_goes_on(
    atb_pair, tmp_path: Path, capsys, case: str
) -> None:
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    content, problem = ATB_FILE_CASES[case]
    layers = sorted((device / "3").glob("*_LlamaLayer"), key=lambda d: int(d.name.split("_")[0]))
    target = next(layers[-1].glob("*_Attention/after/outtensor0.bin"))  # the last layer: after the fault
    target.write_bytes(content)
    report = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(report) if str(target) in e]
    assert named and problem in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_a_data_file_that_is_itself_an_atb_tensor_file_is_refused(atb_pair, tmp_path: Path, capsys) -> None:
    """msit's data= names a raw payload: one naming another .bin would decode that file's header
    text as values (3e32 against the golden), and is refused by name."""
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    layers = sorted((device / "3").glob("*_LlamaLayer"), key=lambda d: int(d.name.split("_")[0]))
    target = next(layers[-1].glob("*_Attention/after/outtensor0.bin"))
    shutil.copy(target, target.with_name("another.bin"))
    target.write_bytes(_header(extra="data=another.bin\n$Object.data=0,256\n") + b"$End=1\n")
    report = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(report) if str(target) in e]
    assert named and "is itself an ATB tensor file, not a payload" in named[0], _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


@pytest.mark.parametrize("replaced", ["operation", "after"])
def test_a_file_where_an_atb_folder_belongs_is_named(atb_pair, tmp_path: Path, capsys, replaced: str) -> None:
    """An operation's folder, or its after/, replaced by a file: its tensors were lost without a
    word (the operation only listed unmatched); now named, and the fault still found."""
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    layers = sorted((device / "3").glob("*_LlamaLayer"), key=lambda d: int(d.name.split("_")[0]))
    attention = next(layers[-1].glob("*_Attention"))
    target = attention if replaced == "operation" else attention / "after"
    shutil.rmtree(target)
    target.write_text("x")
    report = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(report) if e.startswith(f"{target}: ")]
    assert named and ("folder belongs" in named[0] or "not a folder" in named[0]), _errors(report)
    assert report["first_failing_op"]["golden"] == FAULT_OP


def test_follow_links_lets_an_atb_data_file_lead_out_of_the_dump(atb_pair, tmp_path: Path, capsys) -> None:
    """--follow-links loosens ATB ``data=`` files as it loosens links: one policy for both (it used
    to confine them to the .bin's own folder, stricter than without it)."""
    golden, test, device = _atb_copy(atb_pair, tmp_path)
    layers = sorted((device / "3").glob("*_LlamaLayer"), key=lambda d: int(d.name.split("_")[0]))
    target = next(layers[-1].glob("*_Attention/after/outtensor0.bin"))
    raw = target.read_bytes()
    end = raw.index(b"$End=1\n") + len(b"$End=1\n")
    header = raw[:end].decode()
    data_line = next((line for line in header.splitlines() if line.startswith("$Object.data=")), None)
    payload = tmp_path / "elsewhere" / "payload.raw"  # outside the dump: a sibling of it
    payload.parent.mkdir()
    payload.write_bytes(raw[end:])
    kept = [line for line in header.splitlines() if line != data_line and line != "$End=1"]
    target.write_bytes(("\n".join([*kept, f"data={payload}", "$End=1"]) + "\n").encode())
    refused = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(refused) if str(target) in e]
    assert named and "outside the dump" in named[0] and "--follow-links" in named[0], _errors(refused)
    allowed = _report(golden, test, capsys, "--token", "3", "--follow-links")
    assert not [e for e in _errors(allowed) if str(target) in e], _errors(allowed)
    assert allowed["first_failing_op"]["golden"] == FAULT_OP


def test_a_metadata_file_linked_out_of_the_dump_is_refused_like_a_tensor(
    demo_pair, tmp_path: Path, capsys
) -> None:
    """model_tree.json (as statistics CSVs, dump.json, topologies) is read under the dump's policy."""
    golden, test, device = _copy(demo_pair, tmp_path)
    tree = device / "model_tree.json"
    outside = tmp_path / "elsewhere.json"
    shutil.move(tree, outside)
    tree.symlink_to(outside)
    refused = _report(golden, test, capsys, "--token", "3")
    named = [e for e in _errors(refused) if str(tree) in e]
    assert named and "outside the dump" in named[0] and "--follow-links" in named[0], _errors(refused)
    allowed = _report(golden, test, capsys, "--token", "3", "--follow-links")
    assert not [e for e in _errors(allowed) if str(tree) in e], _errors(allowed)


@pytest.mark.parametrize("text", ["{", '{"modelName": "m", "nodes": ', "null", "[]"])
def test_a_bad_topology_is_reported(atb_pair, tmp_path: Path, capsys, text: str) -> None:
    golden, test, _ = _atb_copy(atb_pair, tmp_path)
    (topology,) = test.glob("model/*/*.json")
    topology.write_text(text)
    report = _report(golden, test, capsys)
    assert any(str(topology) in e and "unreadable model topology" in e for e in _errors(report)), _errors(
        report
    )
    assert report["first_failing_op"]["golden"] == FAULT_OP  # the folders alone still pair


def test_nan_and_infinity_literals_in_a_topology_read_as_msit_reads_them(
    atb_pair, tmp_path: Path, capsys
) -> None:
    golden, test, _ = _atb_copy(atb_pair, tmp_path)
    (topology,) = test.glob("model/*/*.json")
    text = topology.read_text().replace('"nodes"', '"weight": NaN, "scale": -Infinity, "nodes"', 1)
    assert "NaN" in text
    topology.write_text(text)
    report = _report(golden, test, capsys)
    assert report["errors"] == [] and report["first_failing_op"]["golden"] == FAULT_OP


# --- exports ------------------------------------------------------------------------------------


def test_a_full_disk_while_exporting_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import polars as pl

    from tui_acc.reports import export

    target = tmp_path / "view.csv"
    target.write_text("the user's old file\n")
    real = pl.DataFrame.write_csv

    def full(self, file, *args, **kwargs):  # type: ignore[no-untyped-def]
        real(self.head(1), file, *args, **kwargs)  # some bytes made it, then the disk filled up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_csv", full)
    with pytest.raises(export.ExportError, match="No space left on device"):
        export.write_csv(pl.DataFrame({"a": [1, 2, 3]}), target, overwrite=True)
    assert target.read_text() == "the user's old file\n"  # what the user had is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["view.csv"]  # and no temporary file is left


def test_exports_caches_and_config_edits_get_the_users_umask(demo_pair, tmp_path: Path) -> None:
    import polars as pl

    from tui_acc.redump import remember_exec
    from tui_acc.reports.export import write_csv

    old = os.umask(0o027)
    try:
        exported = write_csv(pl.DataFrame({"a": [1]}), tmp_path / "view.csv")
        remember_exec(tmp_path / "tui-acc.toml", "test", "bash run.sh")
        cmp = open_comparison(demo_pair.golden, demo_pair.test)
        cmp.engine.token_rows([0])
        cmp.engine.flush()
        cache_file = cmp.engine.cache.path  # type: ignore[union-attr]
    finally:
        os.umask(old)
    for path in (exported, tmp_path / "tui-acc.toml", cache_file):
        assert path.stat().st_mode & 0o777 == 0o640, path  # 0o666 & ~0o027, not mkstemp's 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tui-acc.toml", "view.csv"]  # no temporaries


# --- msprobe ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda text: text[: len(text) // 2], "dump.json"),
        (lambda text: "", "dump.json"),
        (lambda text: "[]", "dump.json"),
        (None, "not a regular file (a folder)"),
    ],
    ids=["truncated", "empty", "not an object", "a folder"],
)
def test_a_bad_dump_json_names_the_file(
    reference: Path, tmp_path: Path, capsys, damage, problem: str
) -> None:
    case = reference / "msprobe-L0" / "tensor"
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(case / "golden", golden)
    shutil.copytree(case / "test", test)
    (dump_json,) = test.glob("step0/*/dump.json")
    if damage is None:  # a folder of that name: not taken for graph mode's tensors without one
        dump_json.unlink()
        dump_json.mkdir()
    else:
        dump_json.write_text(damage(dump_json.read_text()))
    code = main(["report", str(golden), str(test), "--json", "--no-cache"])
    captured = capsys.readouterr()
    assert code == 2 and str(dump_json) in captured.err and problem in captured.err


def test_nan_literals_in_dump_json_are_read(reference: Path, tmp_path: Path) -> None:
    case = reference / "msprobe-L0" / "statistics"
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(case / "golden", golden)
    shutil.copytree(case / "test", test)
    (dump_json,) = test.glob("step0/*/dump.json")
    text = dump_json.read_text()
    first_max = text.index('"Max":')
    end = text.index(",", first_max)
    dump_json.write_text(text[:first_max] + '"Max": NaN' + text[end:])
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    rows = cmp.verdicts.token(cmp.pairing.tokens[0]).rows
    assert rows  # the comparison goes on; the NaN statistic is a failing (not a crashing) row


def test_a_kill_during_an_export_leaves_neither_a_partial_file_nor_a_temporary(tmp_path: Path) -> None:
    """SIGTERM arrives while the CSV is being written: the process exits, and nothing half-done stays."""
    import subprocess
    import sys

    script = f"""
import os, signal
import polars as pl
from tui_acc.cli.main import exit_on_signals
from tui_acc.reports.export import write_csv

exit_on_signals()
real = pl.DataFrame.write_csv

def killed_halfway(self, file, *args, **kwargs):
    real(self.head(1), file, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)  # e.g. the job scheduler, or the SSH session going away

pl.DataFrame.write_csv = killed_halfway
write_csv(pl.DataFrame({{"a": [1, 2, 3]}}), __import__("pathlib").Path({str(tmp_path / "view.csv")!r}))
print("not reached")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 128 + 15 and "not reached" not in result.stdout
    assert list(tmp_path.iterdir()) == []


def _msprobe_copy(model_case, name: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of a real msprobe L1/mix case: (golden, test, the test's rank folder)."""
    folder = model_case(name)
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(folder / "golden", golden)
    shutil.copytree(folder / "test", test)
    (rank,) = test.glob("step0/*")
    return golden, test, rank


def test_a_missing_msprobe_tensor_file_is_named_and_the_rest_compared(model_case, tmp_path, capsys):
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    lost = rank / "dump_tensor_data" / "Functional.linear.0.forward.output.0.pt"
    lost.unlink()
    report = _report(golden, test, capsys)
    assert f"{lost}: listed in dump.json but missing; compared by its statistics" in _errors(report)
    assert report["first_failing_token"] == 2  # the rest is compared as before


def test_an_unknown_msprobe_level_is_named_and_read_by_record_names(model_case, tmp_path, capsys):
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-L1", tmp_path)
    dump_json = rank / "dump.json"
    dump = json.loads(dump_json.read_text())
    dump["level"] = "L7"
    dump_json.write_text(json.dumps(dump))
    report = _report(golden, test, capsys)
    assert any(e.startswith(f"{dump_json}: level 'L7' is not one tui-acc knows") for e in _errors(report))
    assert report["first_failing_token"] == 2


@pytest.mark.parametrize("damage", ["cycle", "api parent", "unplaced"])
def test_a_construct_json_that_disagrees_with_dump_json_is_named(model_case, tmp_path, capsys, damage):
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    layer = "Module.model.layers.0.LlamaDecoderLayer.forward.0"
    if damage == "cycle":  # the model's top module made a child of one of its own layers
        parents["Module.model.LlamaModel.forward.0"] = layer
    elif damage == "api parent":
        parents["Tensor.__add__.9.forward"] = "Functional.linear.6.forward"
    else:
        del parents["Functional.linear.6.forward"]
    construct.write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    errors = [e for e in _errors(report) if e.startswith(f"{construct}: ")]
    expected = {"cycle": "form a cycle", "api parent": "is not a module call", "unplaced": "are not in it"}
    assert len(errors) == 1 and expected[damage] in errors[0], errors
    assert report["tokens"], "the rest is compared"


def test_a_deep_construct_json_cycle_is_named_once(model_case, tmp_path, capsys):
    """Hooks left unbalanced make each record the previous one's parent: a chain as long as the dump,
    closed into a cycle. It is named once and the dump is still read."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    parents = json.loads((rank / "construct.json").read_text())
    modules = [name for name in parents if name.startswith("Module.")]
    parents.update(
        zip(modules, [modules[-1], *modules[:-1]], strict=True)
    )  # each module's parent: the one before
    (rank / "construct.json").write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    cycles = [e for e in _errors(report) if "form a cycle" in e]
    assert len(cycles) == 1 and str(rank / "construct.json") in cycles[0]


def test_a_cycle_through_the_models_top_calls_loses_no_token(model_case, tmp_path, capsys):
    """Each forward of the model made a child of the next, the last of the first: cut where the cycle
    closes, every pass would nest under one and the dump read as one token. Every edge of a cycle is
    cut instead, so each pass stays its own token and the fault at token 2 is still found."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    calls = sorted(name for name, up in parents.items() if name.startswith("Module.model.") and not up)
    assert len(calls) == 4, calls
    parents.update(zip(calls, [*calls[1:], calls[0]], strict=True))
    construct.write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    cycles = [e for e in _errors(report) if "form a cycle" in e]
    assert len(cycles) == 1 and all(call in cycles[0] for call in calls), cycles
    assert [row["token"] for row in report["tokens"]] == [0, 1, 2, 3]
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    assert report["first_failing_token"] == case["fault_token"] == 2
    op = report["first_failing_op"]
    assert op is not None and op["golden"] == case["fault_record"] and op["label"] == "local", op


@pytest.mark.parametrize(
    ("side", "damage"), [("test", "missing"), ("golden", "missing"), ("test", "chained")]
)
def test_one_side_without_its_call_tree_still_pairs_call_for_call(model_case, tmp_path, capsys, side, damage):
    """One side's construct.json lost (read flat), or chaining every record to the one before (each
    cut, named once): its records are aligned with the other side's in the order they completed,
    which no call tree changes, so the fault is still the one named."""
    golden, test, _ = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    (rank,) = (golden if side == "golden" else test).glob("step0/*")
    construct = rank / "construct.json"
    if damage == "missing":
        construct.unlink()
    else:
        names = list(json.loads((rank / "dump.json").read_text())["data"])
        construct.write_text(json.dumps(dict(zip(names, [None, *names[:-1]], strict=True))))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: ")]
    assert 1 <= len(said) <= 2, _errors(report)  # once per kind of damage, not once per record
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    op = report["first_failing_op"]
    assert op is not None and op["golden"] == case["fault_record"] and op["label"] == "local", op


@pytest.mark.parametrize(
    ("move", "said_as"),
    [
        ("into the pass before", "returned before them"),
        ("two passes swapped", "returned before them"),
        ("into the pass after", "before the module call they name began"),
        ("the faulty call into the pass after", "before the module call they name began"),
    ],
)
def test_a_call_put_in_another_pass_s_module_is_named_and_cut(model_case, tmp_path, capsys, move, said_as):
    """A module's record is written when it returns, after every call inside it, and its calls are
    the records since its previous sibling returned: a call put under another pass's module (before
    or after its own) is named and cut, and the fault at token 2 is still the operator named, not
    counted in the pass it was moved into."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    mlp = "Module.model.layers.1.mlp.LlamaMLP.forward."
    down_proj = "Module.model.layers.1.mlp.down_proj.Linear.forward."
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    if move == "into the pass before":
        parents[f"{down_proj}2"] = f"{mlp}1"
    elif move == "two passes swapped":
        parents[f"{mlp}1"], parents[f"{mlp}2"] = parents[f"{mlp}2"], parents[f"{mlp}1"]
    elif move == "into the pass after":
        parents[f"{down_proj}2"] = f"{mlp}3"
    else:
        assert parents[case["fault_record"]] == f"{down_proj}2"
        parents[case["fault_record"]] = f"{down_proj}3"
    construct.write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: ") and said_as in e]
    assert len(said) == 1, _errors(report)
    op = report["first_failing_op"]
    assert op is not None and op["golden"] == case["fault_record"] and op["label"] == "local", op
    assert report["first_failing_token"] == 2


def test_a_step_folder_msprobe_does_not_name_is_named_and_not_read(model_case, tmp_path, capsys):
    """The golden's step0 copied into the test as step00: read as the test's step (or as a second
    step beside it), the fault vanished without a word. msprobe writes step{n}: step00 is named and
    not read; the fault is found as before."""
    golden, test, _rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    shutil.copytree(golden / "step0", test / "step00")
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{test / 'step00'}: ")]
    assert said and "without leading zeros" in said[0], _errors(report)
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    op = report["first_failing_op"]
    assert op is not None and op["golden"] == case["fault_record"] and report["first_failing_token"] == 2


@pytest.mark.parametrize("parent", [None, ""])
def test_a_call_given_no_parent_inside_a_module_is_the_one_named(model_case, tmp_path, capsys, parent):
    """The faulty call given no parent in the middle of its pass: it is the call named (it completed
    inside a module call it does not name), not the fifteen calls of that pass recorded before it;
    the fault is still found."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    parents[case["fault_record"]] = parent
    construct.write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: ")]
    assert len(said) == 1, said
    assert (
        f"1 calls were recorded inside a module call they do not name (e.g. {case['fault_record']}" in said[0]
    )
    assert report["first_failing_token"] == 2 and report["first_failing_op"]["label"] == "local"


def test_parents_construct_json_does_not_list_are_named_and_cut(model_case, tmp_path, capsys):
    """Every call's parent made one module no key names: all four passes would nest under it and read
    as token 0 alone, a pass (exit 0) with three tokens never compared. msprobe lists every module it
    saw as a key, so such a parent is named and cut: each pass is its own token, the fault found."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    construct.write_text(json.dumps(dict.fromkeys(parents, "Module.nowhere.Missing.forward.0")))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: ") and "does not list" in e]
    assert len(said) == 1 and "Module.nowhere.Missing.forward.0" in said[0], _errors(report)
    assert [row["token"] for row in report["tokens"]] == [0, 1, 2, 3]
    assert report["exit"] == 1 and report["first_failing_token"] == 2


def test_a_call_chain_deeper_than_a_run_nests_is_named_and_left_out(model_case, tmp_path, capsys):
    """5,000 modules without records, each the next one's parent, above the model's first pass: no
    run nests calls that deep (each is Python frames, under the recursion limit), so those modules
    are left out, named once; the records keep their own tree and the fault is found as before."""
    golden, test, rank = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    construct = rank / "construct.json"
    parents = json.loads(construct.read_text())
    chain = [f"Module.model.deep{i}.Deep.forward.0" for i in range(5000)]
    parents.update(zip(chain, [*chain[1:], None], strict=True))
    parents["Module.model.LlamaModel.forward.0"] = chain[0]
    construct.write_text(json.dumps(parents))
    report = _report(golden, test, capsys)
    said = [e for e in _errors(report) if e.startswith(f"{construct}: nests calls 5,00")]  # and the model
    assert len(said) == 1 and "the modules it lists without records are left out" in said[0], _errors(report)
    assert not any("deep" in u["name"] for u in report["unmatched"])
    case = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    assert report["first_failing_op"]["golden"] == case["fault_record"]
    assert report["first_failing_op"]["label"] == "local"


def test_any_failure_of_one_pair_is_an_error_row_and_the_token_goes_on(demo_pair, tmp_path: Path) -> None:
    """A sparse tensor loads but cannot be compared like a dense one: that pair is an error, not a stop."""
    golden, test, device = _copy(demo_pair, tmp_path)
    target = device / "1" / "root.model.layers.0.mlp.act_fn" / "output.pth"
    torch.save(torch.load(target).reshape(-1, torch.load(target).shape[-1]).to_sparse(), target)
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(1).rows}
    assert str(target) in str(rows["root.model.layers.0.mlp.act_fn"]["error"])
    assert rows["root.model.layers.0.mlp.up_proj"]["outputs_passed"] is True  # the rest is compared


def test_an_unreadable_file_is_never_taken_for_the_culprit(demo_pair, tmp_path: Path) -> None:
    """An error row says nothing about the numbers: it is not a suspect, and what it fed is judged
    past it, so the real culprit keeps its place."""
    golden, test, device = _copy(demo_pair, tmp_path)
    before = device / "3" / "root.model.layers.2.mlp.up_proj" / "output.pth"  # runs before the fault
    before.write_bytes(before.read_bytes()[:100])
    own_input = next((device / "3" / FAULT_OP).glob("input*.pth"))  # the culprit's own input file
    own_input.write_bytes(b"")
    cmp = open_comparison(golden, test, CompareOptions(cache=False))
    rows = {r["golden_node"]: r for r in cmp.verdicts.token(3).rows}
    assert (
        rows["root.model.layers.2.mlp.up_proj"]["error"]
        and rows["root.model.layers.2.mlp.up_proj"]["label"] is None
    )
    op = cmp.verdicts.culprit(3)
    assert op is not None and op["golden_node"] == FAULT_OP and op["label"] == "local"
    assert op["inputs_from"] != "files"  # its own input unreadable: judged by what fed it


def test_the_compat_export_keeps_to_the_dump_as_the_comparison_does(demo_pair, tmp_path: Path) -> None:
    """One path policy: --compat reads tensor files only as the comparison would (no link out)."""
    from tui_acc.reports.compat import compat_frame

    golden, test, device = _copy(demo_pair, tmp_path)
    outside = tmp_path / "elsewhere.pth"
    target = device / "3" / FAULT_OP / "output.pth"
    shutil.move(target, outside)
    target.symlink_to(outside)
    frame = compat_frame(open_comparison(golden, test, CompareOptions(cache=False)), "msit")
    refused = frame.filter(frame["my_data_path"] == str(target))
    assert "outside the dump" in refused["cmp_fail_reason"][0]
    allowed = compat_frame(
        open_comparison(golden, test, CompareOptions(cache=False, follow_links=True)), "msit"
    )
    assert allowed.filter(allowed["my_data_path"] == str(target))["cmp_fail_reason"][0] == ""
