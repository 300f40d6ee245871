"""What tui-acc.toml and the command line set for a command: read once, its tables checked as a
command asks for them, each error naming the files it came from."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tui_acc.config import Config, load_config
from tui_acc.redump.settings import RedumpSettings, load_settings
from tui_acc.tolerances.thresholds import Thresholds

if TYPE_CHECKING:
    from tui_acc.anomalies.rules import AnomalySettings
    from tui_acc.replay.registry import Registry


@dataclass(frozen=True)
class Settings:
    """The config files in force (the user's, ./tui-acc.toml, ``--config``), merged; ``source``
    names them in every error about one of their tables (Config.source)."""

    config: Config
    source: str

    @classmethod
    def load(cls, explicit: Path | None) -> Settings:
        """The config files, ``explicit`` last (ConfigError: one cannot be read or is malformed); what
        was read and left unused (a ./tui-acc.toml's [replay]) said on stderr, once per command."""
        config = load_config(explicit)
        for note in config.notes:
            print(f"tui-acc: note: {note}", file=sys.stderr)
        return cls(config, config.source)

    def table(self, name: str) -> Any:
        """The ``[name]`` table as read, unchecked (None without one)."""
        return self.config.sections.get(name)

    def thresholds(self, args: argparse.Namespace) -> Thresholds:
        """Defaults < config files < command line (the threshold options)."""
        thresholds = self.config.thresholds
        logits = {k: v for k, v in (("cosine", args.logits_cos), ("kl", args.logits_kl)) if v is not None}
        ops = {"cosine": args.op_cos} if args.op_cos is not None else {}
        thresholds = thresholds.with_bounds(logits=logits, ops=ops)
        for dtype, kl in (("float16", args.kl_fp16), ("bfloat16", args.kl_bf16)):
            if kl is not None:
                thresholds.logits[dtype]["kl"] = kl
        return thresholds

    def redump(self) -> RedumpSettings:
        """``[redump]`` (SettingsError: malformed)."""
        return load_settings(self.table("redump"), self.source)

    def anomaly_rules(self) -> AnomalySettings:
        """``[anomalies]`` (AnomalySettingsError: malformed)."""
        from tui_acc.anomalies.rules import AnomalySettings

        return AnomalySettings.from_table(self.table("anomalies"), self.source)

    def replay_registry(self) -> Registry:
        """``[replay]`` (RegistryError: malformed)."""
        from tui_acc.replay.registry import Registry

        return Registry.from_config(self.table("replay"), self.source)

    def margin(self, given: float | None) -> float:
        """``--margin`` when given, else ``[collectives]`` margin (SettingError: either malformed)."""
        from tui_acc.collectives.margin import checked_margin, margin_of

        margin = margin_of(self.table("collectives"), self.source)  # checked even where --margin wins
        return margin if given is None else checked_margin(given, "--margin")
