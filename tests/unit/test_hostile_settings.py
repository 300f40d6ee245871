"""Hostile settings and export targets: a tui-acc.toml that would silently turn off every failure
or crash the parser, and export paths that are not plain files (devices, pipes, links to nothing,
names the file system refuses, extensions that promise another format).

Devices are only reached through links made in a temporary folder, so that even the code this
guards against (a rename over the target) would replace the link, never a real device node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from tui_acc.cli.main import main
from tui_acc.config import ConfigError, load_config
from tui_acc.reports.export import ExportError, write_export

# --- tui-acc.toml -------------------------------------------------------------------------------

BAD_BOUNDS = {
    "cosine nan": (
        "[thresholds.ops]\ncosine = nan\n",
        "thresholds.ops.cosine must be a finite number in [-1, 1]",
    ),
    "cosine above 1": (
        "[thresholds.logits]\ncosine = 1.5\n",
        "thresholds.logits.cosine must be a finite number in [-1, 1]",
    ),
    "kl infinite": (
        "[thresholds.logits.bfloat16]\nkl = inf\n",
        "thresholds.logits.bfloat16.kl must be a finite number >= 0",
    ),
    "a 400-digit integer": (  # no float holds it: refused by name, not an OverflowError
        "[thresholds.ops]\nmax_abs_err = " + "9" * 400 + "\n",
        "thresholds.ops.max_abs_err must be a finite number >= 0, not 99999",
    ),
    "negative error": (
        '[[rules]]\npattern = "*"\nmax_abs_err = -1\n',
        "rules #1.max_abs_err must be a finite number >= 0",
    ),
    "ratio above 1": (
        "[thresholds.ops]\nthousandth_ratio = 2\n",
        "thresholds.ops.thousandth_ratio must be a finite number in [0, 1]",
    ),
    "noise factor nan": (
        "[thresholds.noise]\nfactor = nan\n",
        "thresholds.noise.factor must be a finite number >= 0",
    ),
    "stats tolerance nan": (
        "[thresholds]\nstats_norm_rel = nan\n",
        "stats_norm_rel must be a finite number >= 0",
    ),
    "near-tie gap negative": (
        "[thresholds]\nnear_tie_gap = -0.5\n",
        "near_tie_gap must be a finite number >= 0",
    ),
    "rules a number": ("rules = 5\n", "rules must be [[rules]] tables"),
    "logits a number": ("[thresholds]\nlogits = 5\n", "[thresholds.logits] must be a table"),
    "nested 100k deep": ("a = " + "[" * 100_000 + "\n", "not valid TOML (nested too deeply to read)"),
    "inline tables 100k deep": (
        "a = " + "{b = " * 100_000 + "\n",
        "not valid TOML (nested too deeply to read)",
    ),
    # past Python's 4,300-digit limit: repr() and tomllib's int() raise ValueError on them
    "a 5,000-digit hexadecimal integer": (
        "[thresholds.ops]\nmax_abs_err = 0x" + "f" * 5000 + "\n",
        "thresholds.ops.max_abs_err must be a finite number >= 0, not an integer of some 6021 digits",
    ),
    "a 20,000-digit binary integer": ('[[rules]]\npattern = "*"\nrmse = 0b' + "1" * 20_000 + "\n", "must be"),
    "a 5,000-digit decimal integer": ("[thresholds.logits]\ncosine = " + "9" * 5000 + "\n", "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD_BOUNDS))
def test_a_bound_out_of_its_range_is_refused_with_the_file_and_key(tmp_path: Path, case: str) -> None:
    text, message = BAD_BOUNDS[case]
    config = tmp_path / "tui-acc.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(config, cwd=tmp_path)
    assert str(refused.value).startswith(f"{config}: ") and message in str(refused.value)


def test_a_nan_cosine_no_longer_passes_the_faulty_run(demo_pair, tmp_path: Path, capsys) -> None:
    """What the NaN bound did: every operator passed (NaN compares false), the fault unseen."""
    config = tmp_path / "tui-acc.toml"
    config.write_text("[thresholds.ops]\ncosine = nan\n[thresholds.logits]\ncosine = nan\n")
    code = main(["report", str(demo_pair.golden), str(demo_pair.test), "--config", str(config), "--no-cache"])
    assert code == 2
    assert (
        f"tui-acc: error: {config}: thresholds.logits.cosine must be a finite number"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("flag", "value"), [("--op-cos", "nan"), ("--logits-cos", "2"), ("--logits-kl", "-1")]
)
def test_a_bound_on_the_command_line_is_held_to_the_same_range(
    demo_pair, capsys, flag: str, value: str
) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["report", str(demo_pair.golden), str(demo_pair.test), flag, value])
    assert usage.value.code == 2
    assert f"argument {flag}: must be a finite number" in capsys.readouterr().err


# --- export targets -----------------------------------------------------------------------------

FRAME = pl.DataFrame({"token": [0, 1], "verdict": ["pass", "fail"]})


def test_a_device_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    assert write_export(FRAME, null, overwrite=True) == null
    assert null.is_symlink() and null.readlink() == Path("/dev/null")  # the node is where it was
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    with pytest.raises(ExportError, match=f"{full}: write failed \\(No space left on device"):
        write_export(FRAME, full, overwrite=True)
    assert full.is_symlink() and full.readlink() == Path("/dev/full")
    with pytest.raises(ExportError, match="already exists; not overwritten"):
        write_export(FRAME, null)  # a device is not written without --force either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]  # and no temporary is left


def test_a_pipe_is_written_in_place_and_one_nobody_reads_is_an_error(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ExportError, match=f"{fifo}: cannot write \\(no process reads the pipe\\)"):
        write_export(FRAME, fifo, overwrite=True)  # never a wait without end
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_export(FRAME, fifo, overwrite=True)
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert received.decode().splitlines() == ["token,verdict", "0,pass", "1,fail"]
    assert fifo.is_fifo()


@pytest.mark.parametrize("force", [False, True])
def test_a_link_to_nothing_is_neither_followed_nor_replaced(tmp_path: Path, force: bool) -> None:
    link = tmp_path / "view.csv"
    link.symlink_to(tmp_path / "gone" / "view.csv")
    with pytest.raises(ExportError, match=f"{link}: a symbolic link that leads nowhere"):
        write_export(FRAME, link, overwrite=force)
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["view.csv"]


def test_a_link_to_a_file_is_kept_and_the_file_it_names_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "view.csv"
    link.symlink_to(real)
    with pytest.raises(ExportError, match="already exists"):
        write_export(FRAME, link)
    assert write_export(FRAME, link, overwrite=True) == real
    assert link.is_symlink() and real.read_text().startswith("token,verdict")


def test_a_name_over_255_bytes_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300 + ".csv")
    with pytest.raises(ExportError, match=f"{long}: cannot write here \\(File name too long\\)"):
        write_export(FRAME, long)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["view.json", "view.txt", "view.tsv"])
def test_an_extension_of_another_format_is_refused_not_written_as_csv(tmp_path: Path, name: str) -> None:
    with pytest.raises(
        ExportError, match=f"{tmp_path / name}: tui-acc does not write {Path(name).suffix} files"
    ):
        write_export(FRAME, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_writes_a_csv_to_a_device_and_names_what_it_refuses(
    demo_pair, tmp_path: Path, capsys
) -> None:
    null = tmp_path / "stdout-like"
    null.symlink_to("/dev/null")
    base = ["report", str(demo_pair.golden), str(demo_pair.test), "--json", "--no-cache"]
    assert main([*base, "--csv", str(null), "--force"]) == 1  # the fault: exit 1, the export written
    assert json.loads(capsys.readouterr().out)["csv"] == str(null) and null.is_symlink()
    assert main([*base, "--csv", str(tmp_path / "view.json")]) == 2
    assert f"{tmp_path / 'view.json'}: tui-acc does not write .json files" in capsys.readouterr().err
    assert main([*base, "--csv", str(tmp_path / ("y" * 300 + ".csv"))]) == 2
    assert "File name too long" in capsys.readouterr().err


@pytest.mark.parametrize("table", ["[anomalies]\njump_factor", "[collectives]\nmargin"])
def test_a_setting_past_floats_range_is_refused_by_name(tmp_path: Path, table: str) -> None:
    """A 401-digit integer: no float holds it (float() and math.isfinite raise OverflowError)."""
    from tui_acc.anomalies.rules import AnomalySettingsError
    from tui_acc.cli.toml_settings import Settings
    from tui_acc.collectives.margin import SettingError

    config = tmp_path / "tui-acc.toml"
    config.write_text(f"{table} = 1{'0' * 400}\n")
    settings = Settings.load(config)
    with pytest.raises((AnomalySettingsError, SettingError), match=r"must be a (positive )?number"):
        settings.anomaly_rules() if "anomalies" in table else settings.margin(None)


def test_an_atb_op_name_ending_in_thousands_of_digits_is_no_id() -> None:
    """``LlamaLayer_`` and 5,000 digits in an ATB topology: int() of them raises ValueError (Python's
    digit limit); an id has 18 digits at most."""
    from tui_acc.dumps.msprobe.atb_topology import _suffix_id

    assert _suffix_id({"opName": "LlamaLayer_" + "1" * 5000}) is None
    assert _suffix_id({"opName": "LlamaLayer_12"}) == 12


def test_a_list_holding_a_hexadecimal_integer_past_the_digit_limit_is_named(tmp_path: Path) -> None:
    """tomllib reads ``0x`` and 4,000 f's (Python's digit limit is on decimal conversion): the message
    names the value without repr() of it, which raises ValueError."""
    config = tmp_path / "tui-acc.toml"
    config.write_text("[thresholds.ops]\ncosine = [0x" + "f" * 4000 + "]\n")
    with pytest.raises(
        ConfigError, match="must be a number, not a list holding an integer of over 4,300 digits"
    ):
        load_config(config, cwd=tmp_path)


def test_an_integer_a_float_holds_is_finite() -> None:
    from tui_acc.numbers import as_finite

    assert as_finite(10**308) == 1e308 and as_finite(10**309) is None and as_finite(True) is None
