"""The command line's settings: tui-acc.toml read once, each table checked when a command asks for it,
and every error naming the files the settings came from (or tui-acc.toml where none was read)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui_acc.anomalies.rules import AnomalySettingsError
from tui_acc.cli.parser import build_parser, parse
from tui_acc.cli.toml_settings import Settings
from tui_acc.collectives.margin import DEFAULT_MARGIN, SettingError
from tui_acc.redump.settings import SettingsError
from tui_acc.replay.registry import RegistryError

BROKEN = (
    "[redump]\ntest = 3\n[anomalies]\njump_factor = 'x'\n[replay]\nNorm = 3\n[collectives]\nmargins = 4\n"
)


@pytest.fixture
def no_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user config and no ./tui-acc.toml: only the files a test writes are read."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_without_a_config_file_the_label_is_the_file_name(no_files: Path) -> None:
    settings = Settings.load(None)
    assert settings.config.sources == [] and settings.source == "tui-acc.toml"
    assert settings.margin(None) == DEFAULT_MARGIN and settings.table("redump") is None


def test_every_table_s_error_names_the_files_read(no_files: Path) -> None:
    (no_files / "tui-acc.toml").write_text("[thresholds.logits]\n", encoding="utf-8")
    explicit = no_files / "given.toml"
    explicit.write_text(BROKEN, encoding="utf-8")
    settings = Settings.load(explicit)
    assert settings.source == f"{no_files / 'tui-acc.toml'} or {explicit}"
    for error, ask in (
        (SettingsError, settings.redump),
        (AnomalySettingsError, settings.anomaly_rules),
        (RegistryError, settings.replay_registry),
        (SettingError, lambda: settings.margin(None)),
    ):
        with pytest.raises(error) as raised:
            ask()
        assert str(raised.value).startswith(f"{settings.source}: "), raised.value


def test_margin_option_wins_but_a_malformed_table_is_still_said(no_files: Path) -> None:
    explicit = no_files / "given.toml"
    explicit.write_text("[collectives]\nmargin = 4\n", encoding="utf-8")
    assert Settings.load(explicit).margin(None) == 4.0
    assert Settings.load(explicit).margin(2.0) == 2.0
    with pytest.raises(SettingError, match="--margin must be a number >= 1"):
        Settings.load(explicit).margin(0.5)
    explicit.write_text("[collectives]\nmargins = 4\n", encoding="utf-8")
    with pytest.raises(SettingError, match=r"unknown keys in \[collectives\]"):
        Settings.load(explicit).margin(2.0)


def test_thresholds_defaults_then_files_then_the_command_line(no_files: Path) -> None:
    explicit = no_files / "given.toml"
    explicit.write_text("[thresholds.logits]\ncosine = 0.9\nkl = 0.5\n", encoding="utf-8")
    settings = Settings.load(explicit)
    args = parse(build_parser(), ["open", "g", "t", "--logits-kl", "0.25", "--kl-bf16", "0.125"])
    thresholds = settings.thresholds(args)
    assert thresholds.logits["float32"]["cosine"] == 0.9  # the file's
    assert thresholds.logits["float32"]["kl"] == 0.25  # the option's, over the file's
    assert thresholds.logits["bfloat16"]["kl"] == 0.125  # the per-dtype option, last
    assert settings.config.thresholds.logits["float32"]["kl"] == 0.5  # the config itself untouched
