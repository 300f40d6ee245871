"""``tui-acc.toml``: thresholds, per-operator rules and (later) re-dump templates.

Looked up, later ones overriding earlier ones: the user's config directory
(``$XDG_CONFIG_HOME/tui-acc/tui-acc.toml``, else ``~/.config/tui-acc/tui-acc.toml``), then
``./tui-acc.toml``, then ``--config FILE``; command-line flags override all of them. ``[replay]``
names modules to import: it is read from the user's own file and ``--config`` only, never from a
``./tui-acc.toml`` (which may have come with the dumps; a note says it was ignored)::

    [thresholds]
    stats_norm_rel = 0.01          # statistics-only dumps: every statistic within 1% (default by dtype)
    near_tie_gap = 0.1             # log-prob gap under which a top-1 flip is a near tie

    [thresholds.logits]            # every dtype
    cosine = 0.999
    [thresholds.logits.bfloat16]   # one dtype: float32, float16, bfloat16, int8
    kl = 5e-3

    [thresholds.ops]
    cosine = 0.99
    [thresholds.ops.int8]
    cosine = 0.97

    [thresholds.noise]             # --baseline: fail when error > factor * baseline's error + epsilon
    factor = 2                     # every dtype (default 2; 3 for float16, bfloat16, int8)
    [thresholds.noise.bfloat16]
    epsilon = 0.004                # relative error (default: the dtype's unit roundoff)

    [[rules]]                      # operators whose golden or test name matches (globs)
    pattern = "*.mlp.act_fn"
    cosine = 0.95
    max_abs_err = 0.05
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui_acc.errors import TuiAccError
from tui_acc.numbers import shown_value
from tui_acc.tolerances.thresholds import DTYPES, Rule, Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

FILE_NAME = "tui-acc.toml"
_METRICS = {
    "cosine",
    "kl",
    "max_abs_err",
    "mean_abs_err",
    "max_rel_err",
    "mean_rel_err",
    "rel_euclidean",
    "abs_euclidean",
    "rmse",
    "topk_overlap",
    "thousandth_ratio",
    "five_thousandths_ratio",
}


# where each metric's bound may lie; every other bound (errors, distances, KL, tolerances) is >= 0
_AT_LEAST_ZERO = (0.0, math.inf)
_RANGES: dict[str, tuple[float, float]] = {
    "cosine": (-1.0, 1.0),
    "topk_overlap": (0.0, 1.0),
    "thousandth_ratio": (0.0, 1.0),
    "five_thousandths_ratio": (0.0, 1.0),
}


class ConfigError(TuiAccError, ValueError):
    """A config file that cannot be used; the message names the file and the problem."""


@dataclass
class Config:
    thresholds: Thresholds = field(default_factory=Thresholds)
    sources: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)  # other tables, for other features
    notes: list[str] = field(default_factory=list)  # what was read and left unused, said at start

    @property
    def source(self) -> str:
        """The files read, as every error about one of their tables names them ("a.toml or b.toml";
        the file name alone where none was read)."""
        return " or ".join(self.sources) or FILE_NAME


def user_config_path() -> Path:
    """The user's config file, ``$XDG_CONFIG_HOME/tui-acc/tui-acc.toml`` (``~/.config`` where the
    variable is unset or empty); whether it exists is not checked."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else Path.home() / ".config") / "tui-acc" / FILE_NAME


def load_config(explicit: Path | None = None, cwd: Path | None = None) -> Config:
    """Defaults, then the user's file, then ./tui-acc.toml (without the tables that name code to
    import: it may have come with the dumps), then ``explicit``."""
    config = Config()
    if user_config_path().is_file():
        _merge(config, user_config_path())
    local = (cwd or Path.cwd()) / FILE_NAME
    if local.is_file():
        _merge(config, local, found_here=True)
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"{explicit}: no such config file")
        _merge(config, explicit)
    return config


# tables that name code to import: only the user's own config and ``--config`` may set them
OWN_FILES_ONLY = ("replay",)


def _merge(config: Config, path: Path, found_here: bool = False) -> None:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from exc
    except (tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: an integer past Python's digit limit
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
    except RecursionError as exc:  # arrays or inline tables nested past what the parser follows
        raise ConfigError(f"{path}: not valid TOML (nested too deeply to read)") from exc
    config.sources.append(str(path))
    for name in OWN_FILES_ONLY if found_here else ():
        if raw.pop(name, None) is not None:
            config.notes.append(
                f"{path}: [{name}] ignored: it names code to import, and a tui-acc.toml in the folder "
                f"tui-acc runs in may have come with the dumps; put it in {user_config_path()} or "
                f"pass --config {path}"
            )
    thresholds = config.thresholds
    table = raw.pop("thresholds", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [thresholds] must be a table")
    if "stats_norm_rel" in table:
        thresholds = replace(
            thresholds, stats_norm_rel=_number(path, "stats_norm_rel", table.pop("stats_norm_rel"))
        )
    if "near_tie_gap" in table:
        thresholds = replace(
            thresholds, near_tie_gap=_number(path, "near_tie_gap", table.pop("near_tie_gap"))
        )
    if "noise" in table:
        thresholds = _noise(path, thresholds, table.pop("noise"))
    logits = {d: dict(b) for d, b in thresholds.logits.items()}
    ops = {d: dict(b) for d, b in thresholds.ops.items()}
    for kind, target in (("logits", logits), ("ops", ops)):
        section = table.pop(kind, {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [thresholds.{kind}] must be a table, not {shown_value(section)}")
        for key, value in section.items():
            if key in DTYPES:
                target[key].update(_bounds(path, f"thresholds.{kind}.{key}", value))
            else:
                for bounds in target.values():
                    bounds.update(_bounds(path, f"thresholds.{kind}", {key: value}))
    if table:
        raise ConfigError(f"{path}: unknown keys in [thresholds]: {sorted(table)}")
    rules = list(thresholds.rules)
    given = raw.pop("rules", [])
    if not isinstance(given, list):
        raise ConfigError(
            f'{path}: rules must be [[rules]] tables (pattern = "...", bounds), not {shown_value(given)}'
        )
    for index, rule in enumerate(given):
        if not isinstance(rule, dict) or not isinstance(rule.get("pattern"), str):
            raise ConfigError(f'{path}: [[rules]] #{index + 1} needs a pattern = "..."')
        pattern = rule.pop("pattern")
        rules.append(Rule(pattern, _bounds(path, f"rules #{index + 1}", rule)))
    config.thresholds = replace(thresholds, logits=logits, ops=ops, rules=tuple(rules))
    _merge_tables(config.sections, raw)


def _noise(path: Path, thresholds: Thresholds, table: Any) -> Thresholds:
    """``[thresholds.noise]``: factor and epsilon for every dtype, or in a dtype's own table."""
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [thresholds.noise] must be a table")
    limits = {"factor": dict(thresholds.noise_factor), "epsilon": dict(thresholds.noise_epsilon)}
    for key, value in table.items():
        if key in DTYPES and isinstance(value, dict):
            scoped, dtypes = value, [key]
        else:
            scoped, dtypes = {key: value}, list(DTYPES)
        for name, number in scoped.items():
            if name not in limits:
                raise ConfigError(f"{path}: [thresholds.noise]: unknown key {name!r}; known: factor, epsilon")
            checked = _number(path, f"thresholds.noise.{name}", number)
            for dtype in dtypes:
                limits[name][dtype] = checked
    return replace(thresholds, noise_factor=limits["factor"], noise_epsilon=limits["epsilon"])


def _merge_tables(into: dict[str, Any], later: dict[str, Any]) -> None:
    """A later file overrides key by key, nested tables included (not table by table)."""
    for key, value in later.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge_tables(into[key], value)
        else:
            into[key] = value


def _bounds(path: Path, where: str, table: Any) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table of metric = bound")
    unknown = set(table) - _METRICS
    if unknown:
        raise ConfigError(f"{path}: {where}: unknown metric(s) {sorted(unknown)}; known: {sorted(_METRICS)}")
    return {k: _number(path, f"{where}.{k}", v, *_RANGES.get(k, _AT_LEAST_ZERO)) for k, v in table.items()}


def _number(path: Path, where: str, value: Any, low: float = 0.0, high: float = math.inf) -> float:
    """``value`` as a bound: a finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: {where} must be a number, not {shown_value(value)}")
    wanted = _unfit(value, low, high)
    if wanted:
        raise ConfigError(f"{path}: {where} must be {wanted}, not {shown_value(value)}")
    return float(value)


def _unfit(value: float, low: float, high: float) -> str | None:
    """What a bound must be, if ``value`` is not that: a NaN bound would pass or fail every tensor
    silently (every comparison with NaN is false), an infinite one is no bound at all."""
    # an integer past float's range (a 400-digit bound) is no finite float: compared as it is, not
    # converted (math.isfinite would raise OverflowError on it)
    fits = low <= value <= high if isinstance(value, int) else math.isfinite(value) and low <= value <= high
    if fits and (not isinstance(value, int) or abs(value) < 2**1023):
        return None
    return f"a finite number {f'>= {low:g}' if high == math.inf else f'in [{low:g}, {high:g}]'}"


def bound_argument(metric: str) -> Callable[[str], float]:
    """An argparse ``type`` for a command-line bound on ``metric``, held to what tui-acc.toml's is."""
    low, high = _RANGES.get(metric, _AT_LEAST_ZERO)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        wanted = _unfit(value, low, high)
        if wanted:
            raise argparse.ArgumentTypeError(f"must be {wanted}, not {text}")
        return value

    return parse
