"""What tui-acc.toml and the command line set for a command: the thresholds, the re-dump
settings, the config's other tables."""

from __future__ import annotations

import argparse

from tui_acc.config import Config, load_config
from tui_acc.redump.settings import RedumpSettings, load_settings
from tui_acc.verdicts.thresholds import Thresholds


def _thresholds(args: argparse.Namespace) -> Thresholds:
    """Defaults < config files < command line."""
    thresholds = config_of(args).thresholds
    logits = {k: v for k, v in (("cosine", args.logits_cos), ("kl", args.logits_kl)) if v is not None}
    ops = {"cosine": args.op_cos} if args.op_cos is not None else {}
    thresholds = thresholds.with_bounds(logits=logits, ops=ops)
    for dtype, kl in (("float16", args.kl_fp16), ("bfloat16", args.kl_bf16)):
        if kl is not None:
            thresholds.logits[dtype]["kl"] = kl
    return thresholds


def configured(args: argparse.Namespace) -> tuple[Thresholds, RedumpSettings]:
    """The thresholds and re-dump settings in force (ConfigError, SettingsError: a bad config)."""
    return _thresholds(args), _redump_settings(args)


def config_of(args: argparse.Namespace) -> Config:
    config = getattr(args, "_loaded_config", None)
    if config is None:
        config = args._loaded_config = load_config(getattr(args, "config", None))
    return config


def _redump_settings(args: argparse.Namespace) -> RedumpSettings:
    config = config_of(args)
    return load_settings(config.sections.get("redump"), " or ".join(config.sources) or "tui-acc.toml")
