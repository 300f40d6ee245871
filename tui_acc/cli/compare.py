"""``tui-acc [open] GOLDEN [TEST]``: the interactive view; and how a command opens the dumps it is
given (``report`` too): a pair, or one dump checked on its own."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from tui_acc.cli.toml_settings import Settings
from tui_acc.errors import UsageError
from tui_acc.redump.settings import RedumpSettings
from tui_acc.tolerances.thresholds import Thresholds

if TYPE_CHECKING:
    from tui_acc.cluster.pair_on_ray import RayPair
    from tui_acc.session import CompareOptions, Comparison
    from tui_acc.tui.app import AccApp


def run(args: argparse.Namespace) -> int:
    """The view of a pair, or of one dump (it plays the test's part for r: the run under suspicion)."""
    settings, thresholds, redump = prepared(args)
    if args.test is None:
        cmp = open_single_dump(args, settings, thresholds)
        from tui_acc.tui.app import AccApp  # once the dumps open: textual is not imported to say an error

        _run_app(AccApp(cmp, redump=redump, config_file=args.config))
        return 0
    ray_pair = None
    if args.ray is not None:
        ray_pair = open_ray_pair(args, thresholds, settings, progress=None)
        cmp = ray_pair.comparison
    opener = pair_opener(args, thresholds, settings) if ray_pair is None else _not_on_ray
    if ray_pair is None:
        cmp = open_pair(opener, args)
    try:
        from tui_acc.tui.app import AccApp

        # a command typed for `r` is remembered in --config when given: read last, it would override ./'s
        app = AccApp(
            cmp,
            redump=redump,
            opener=opener,
            config_file=args.config,
            swap=swapped_command(args) if ray_pair is None else None,
            all_tokens=args.all_tokens,
            nodes_said=ray_pair.run.status if ray_pair is not None else None,
        )
    except BaseException:
        if ray_pair is not None:
            ray_pair.close()
        raise
    _run_app(app, ray_pair)
    return 0


def _not_on_ray(golden: object, test: object) -> Comparison:
    """The view's opener under ``--ray`` (a re-dump opened, back to the original dumps): a local pair
    would compare the ranks this host holds, as if they were all: refused, said in the view."""
    from tui_acc.dumps import DumpError

    raise DumpError(f"{test}: under --ray a dump is opened with its own command (tui-acc GOLDEN TEST --ray)")


def _run_app(app: AccApp, ray_pair: RayPair | None = None) -> None:
    from tui_acc.redump.runner import EXIT_GRACE

    try:
        app.run()
    finally:  # however the app ended: a re-dump the user did not choose to leave running stops
        if app.redump_run is not None:
            app.redump_run.stop(EXIT_GRACE)
        if ray_pair is not None:
            ray_pair.close()


def prepared(args: argparse.Namespace) -> tuple[Settings, Thresholds, RedumpSettings]:
    """The config files, the thresholds and the re-dump settings in force, once a forced kernel is
    known to be there (ConfigError, SettingsError: a bad config)."""
    settings = Settings.load(args.config)
    thresholds, redump = settings.thresholds(args), settings.redump()
    _check_forced_kernel()
    return settings, thresholds, redump


def pair_opener(
    args: argparse.Namespace, thresholds: Thresholds, settings: Settings
) -> Callable[..., Comparison]:
    """``opener(golden, test)`` with the command line's options and the config's ``[replay]``
    references (RegistryError: malformed, said at start). The same options open a re-dump in place
    of one side later (the TUI's "open the new dump")."""
    from tui_acc.session import open_comparison

    return functools.partial(open_comparison, options=compare_options(args, thresholds, settings))


def open_ray_pair(
    args: argparse.Namespace,
    thresholds: Thresholds,
    settings: Settings,
    progress: Callable[[str], None] | None,
) -> RayPair:
    """``--ray``: GOLDEN here against TEST's rank folders on the Ray cluster's nodes (the same path on
    each, or HOST:PATH for each: TEST and ``places``), checked as ``open_pair`` checks a local pair
    (``tui_acc/cluster``, imported only here)."""
    from tui_acc.cluster.connect import is_address
    from tui_acc.session import check_comparable

    if not is_address(args.ray):
        raise UsageError(
            f"--ray {args.ray}: not a Ray address (auto, host:port, ray://...); put --ray after TEST"
        )
    if args.baseline is not None or args.rank is not None:
        raise UsageError("--ray compares the test's ranks gathered: not with --baseline or --rank")
    if args.token_offset is not None:  # the ranks are opened on their nodes, each numbered by itself
        raise UsageError("--ray numbers each rank's tokens as its dump does: not with --token-offset")
    from tui_acc.cluster.pair_on_ray import open_pair_on_ray

    where = [str(args.test), *args.places]  # one path on every node, or HOST:PATH for each
    ray_pair = open_pair_on_ray(
        args.golden, where, args.ray, compare_options(args, thresholds, settings), progress
    )
    try:
        check_comparable(ray_pair.comparison)
    except BaseException:
        ray_pair.close()
        raise
    return ray_pair


def compare_options(args: argparse.Namespace, thresholds: Thresholds, settings: Settings) -> CompareOptions:
    """The command line's options of a pair, and the config's ``[replay]`` references."""
    from tui_acc.session import CompareOptions

    return CompareOptions(
        logits_node=args.logits_node,
        thresholds=thresholds,
        mapping=args.mapping,
        data_mapping=args.data_mapping,
        layer_mapping=args.layer_mapping,
        token_offset=args.token_offset,
        rank=args.rank,
        gather=args.gather,
        cache=not args.no_cache,
        follow_links=args.follow_links,
        baseline=args.baseline,
        replay_registry=settings.replay_registry(),
    )


def open_pair(opener: Callable[..., Comparison], args: argparse.Namespace) -> Comparison:
    """``args.golden`` against ``args.test``, opened with ``opener`` (both dumps indexed now) and
    checked to mean something.

    Raises:
        DumpError: a root or the mapping cannot be used, the same dump was given twice, or nothing
            pairs (``check_comparable``); the message says which.
    """
    from tui_acc.session import check_comparable

    cmp = opener(args.golden, args.test)
    check_comparable(cmp)  # the same dump twice, or nothing pairs: said, not shown as a result
    return cmp


# what only a pair has: refused with one dump rather than ignored
_PAIR_ONLY = {
    "mapping": "--mapping",
    "data_mapping": "-dm",
    "layer_mapping": "-lm",
    "gather": "--gather",
    "baseline": "--baseline",
    "compat": "--compat",
    "redump_command": "--redump-command",
    "replay": "--replay",
    "plot": "--plot",
    "ray": "--ray",
}


def open_single_dump(args: argparse.Namespace, settings: Settings, thresholds: Thresholds) -> Comparison:
    """``tui-acc DUMP`` and ``report DUMP``: one dump checked on its own (anomalies/)."""
    from tui_acc.anomalies.session import open_single

    given = [flag for name, flag in _PAIR_ONLY.items() if getattr(args, name, None) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)} compare(s) two dumps: give GOLDEN and TEST")
    return open_single(
        args.golden,
        settings.anomaly_rules(),
        thresholds,
        logits_node=args.logits_node,
        token_offset=args.token_offset,
        rank=args.rank,
        follow_links=args.follow_links,
    )


def _check_forced_kernel() -> None:
    """KernelUnavailable where a TUI_ACC_KERNEL that is set cannot be honoured (said once here, not
    as every pair's error). Looked at only when set (fastkernel.ENV): fastkernel imports numpy, which
    the TUI's first frame does without."""
    if not os.environ.get("TUI_ACC_KERNEL", "").strip():
        return
    from tui_acc.metrics.fastkernel import check_forced

    check_forced()


def swapped_command(args: argparse.Namespace) -> str | None:
    """The user's command line with GOLDEN and TEST swapped."""
    from tui_acc.sides import swapped_command

    return swapped_command(args.command_line, args.golden, args.test)
