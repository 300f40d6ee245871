"""Command line: ``tui-acc GOLDEN TEST``, ``tui-acc report``, ``tui-acc demo``."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tui_acc import __version__
from tui_acc.config import Config, bound_argument, load_config
from tui_acc.errors import TuiAccError, UsageError
from tui_acc.redump.settings import RUNS_DIR, RedumpSettings, load_settings, runs_dir
from tui_acc.verdicts.thresholds import Thresholds

if TYPE_CHECKING:
    from tui_acc.session import Comparison

_COMMANDS = ("open", "report", "demo", "hunt", "ranks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tui-acc",
        description="Find where an LLM port loses accuracy: compare a golden tensor dump with a test dump.",
        epilog="Without a command, `tui-acc GOLDEN TEST` opens the interactive view (`tui-acc open`).",
    )
    parser.add_argument("--version", action="version", version=f"tui-acc {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="{open,report,demo,hunt,ranks}")

    # The default command: `tui-acc --help` shows its options, and its errors name no command
    open_cmd = commands.add_parser(
        "open",
        prog="tui-acc",
        usage="tui-acc [OPTIONS] GOLDEN TEST\n       tui-acc {open,report,demo,hunt,ranks} [OPTIONS] ...",
        help="browse GOLDEN against TEST interactively (the default)",
        description="Find where an LLM port loses accuracy: open a golden tensor dump against a test "
        "dump in the interactive view. Options go before or after the dumps.",
        epilog="Commands: `tui-acc report GOLDEN TEST` prints the comparison without a UI (for CI); "
        "`tui-acc demo` builds a pair with a known fault; `tui-acc hunt` dumps both sides narrowly, "
        "coarse to fine, until the culprit; `tui-acc ranks DUMP` checks one run's collectives across "
        "its ranks. `tui-acc COMMAND --help` lists each one's options. A dump folder named like a "
        "command is given as ./report.",
    )
    open_cmd.add_argument("--version", action="version", version=f"tui-acc {__version__}")
    _add_dump_args(open_cmd)

    report = commands.add_parser(
        "report", help="print the comparison without a UI (exit 0 pass, 1 fail, 2 bad input)"
    )
    _add_dump_args(report)
    report.add_argument(
        "--token", type=int, help="analyse this token's operators (default: the first failing token)"
    )
    report.add_argument(
        "--all-tokens",
        action="store_true",
        help="compare every token's operators, not only --token's (a CI gate: exit 1 on any failing "
        "operator or damaged file, even where the logits pass)",
    )
    report.add_argument(
        "--ranks",
        action="store_true",
        help="`report --ranks DUMP`: check one run's collectives across its ranks (no TEST; "
        "see `tui-acc ranks --help`)",
    )
    report.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    report.add_argument(
        "--csv", type=Path, metavar="FILE", help="also write the analysed token's operator table"
    )
    report.add_argument(
        "--plot",
        type=Path,
        metavar="DIR",
        help="also draw where the error sits (SVG, one per tensor) for the first failing op's tensors "
        "and the logits, into DIR",
    )
    report.add_argument("--force", action="store_true", help="let --csv and --plot replace existing files")
    report.add_argument(
        "--compat",
        choices=("msit", "msprobe"),
        help="with --csv: every paired tensor in msit's or msprobe's columns, computed their way "
        "(in torch: needs tui-acc[torch])",
    )

    report.add_argument(
        "--redump-command",
        action="store_true",
        help="print the re-dump command for --token (default: the first failing token) and exit",
    )
    report.add_argument(
        "--redump-side",
        choices=("test", "golden"),
        default="test",
        help="which side to re-dump (default: test)",
    )
    report.add_argument(
        "--redump-node",
        metavar="NAME",
        help="re-dump only this golden node's subtree (default: the first failing op; 'all': every node)",
    )
    report.add_argument(
        "--replay",
        metavar="NODE",
        help="recompute this golden node's output (and its test partner's) from its own dumped inputs in "
        "float64, at --token (default: the analysed token): is the operator itself wrong?",
    )

    demo = commands.add_parser("demo", help="generate a golden/test pair with a known fault, then open it")
    demo.add_argument("--out", type=Path, help="where to write (default: ./tui-acc-runs/demo)")
    demo.add_argument(
        "--no-tui", action="store_true", help="only write the dumps and print where the fault is"
    )
    demo.add_argument("--seed", type=int, default=0, help="model and prompt seed (default 0)")
    demo.add_argument("--layers", type=int, default=4, help="decoder layers of the demo model (default 4)")
    demo.add_argument(
        "--baseline",
        action="store_true",
        help="also write a clean bfloat16 run that rounds differently (OUT/baseline), and open with "
        "--baseline",
    )
    demo.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="write an N-rank tensor-parallel test dump with one faulty all-reduce (default --out "
        "./tui-acc-runs/demo-ranks), then open `tui-acc ranks` on it",
    )
    layout = demo.add_mutually_exclusive_group()
    layout.add_argument(
        "--atb", action="store_true", help="write the test run as an msit ATB dump (.bin + topology)"
    )
    layout.add_argument(
        "--mindie", action="store_true", help="as --atb, in MindIE's layout (warm-up, two topologies)"
    )
    hunt = commands.add_parser(
        "hunt",
        help="dump both sides narrowly, coarse to fine, until the culprit operator (exit 1 found, 0 clean)",
        description="Run both sides' dumpers ([redump.golden] and [redump.test] of tui-acc.toml) step by "
        "step: the logits of every token, then the blocks' outputs at the first failing token, then the "
        "failing block's operators; then open the view at the culprit. Every step's dumps go to their own "
        "folder under ./tui-acc-runs/hunt-<timestamp>/ ([redump] out_dir instead of ./tui-acc-runs).",
    )
    hunt.add_argument("--config", type=Path, metavar="FILE", help="tui-acc.toml with [redump] and thresholds")
    hunt.add_argument(
        "--logits-node",
        default=None,
        metavar="NAME",
        help="the module whose output holds the logits, as the dumpers name it (default root.lm_head)",
    )
    hunt.add_argument("--yes", "-y", action="store_true", help="run every step without asking")
    hunt.add_argument("--no-tui", action="store_true", help="print the result instead of opening the view")
    hunt.add_argument("--json", action="store_true", help="with --no-tui: print one JSON object")
    hunt.add_argument("--no-cache", action="store_true", help="neither read nor write the on-disk row cache")
    _add_threshold_args(hunt)
    _add_ranks_parser(commands)
    return parser


def _add_ranks_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ranks = commands.add_parser(
        "ranks",
        help="check one run's collectives across its ranks (all-reduce: the sum of every rank's input)",
        description="For every token and collective operator (all-reduce, reduce-scatter, all-gather), "
        "compare each rank's output with the golden built from every rank's input, judged by the "
        "rounding a sum in the output's dtype may carry. `tui-acc report --ranks DUMP` (or --json, --csv "
        "here) prints it without a UI: exit 0 all agree, 1 one disagrees, 2 bad input.",
    )
    ranks.add_argument(
        "dump",
        type=Path,
        metavar="DUMP",
        help="the run's folder holding its rank folders (msit's tensors/, msprobe's step*), "
        "or the dump above it",
    )
    ranks.add_argument("--report", action="store_true", help=argparse.SUPPRESS)  # `report --ranks`
    ranks.add_argument(
        "--margin",
        type=float,
        metavar="M",
        help="fail an element beyond M x its rounding bound "
        "(default: tui-acc.toml [collectives] margin, or 2)",
    )
    ranks.add_argument("--json", action="store_true", help="no UI: print one JSON object")
    ranks.add_argument("--csv", type=Path, metavar="FILE", help="no UI: also write every row to FILE")
    ranks.add_argument("--force", action="store_true", help="let --csv replace an existing file")
    ranks.add_argument("--config", type=Path, metavar="FILE", help="tui-acc.toml ([collectives] margin)")
    ranks.add_argument(
        "--follow-links",
        action="store_true",
        help="read through symlinks that lead out of the dump (refused by default)",
    )


def _add_dump_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("golden", type=Path, metavar="GOLDEN", help="golden dump (reference run)")
    parser.add_argument(
        "test",
        type=Path,
        metavar="TEST",
        nargs="?",
        help="test dump (the run under suspicion); without it GOLDEN is checked on its own for NaN, Inf, "
        "float16 overflow, all-zero outputs and magnitude jumps",
    )
    parser.add_argument(
        "--logits-node", help="module whose output holds the logits (default: the model's last)"
    )
    parser.add_argument(
        "--mapping",
        type=Path,
        metavar="FILE",
        help="torch<->ATB operator mapping: msit op_mapping_file.json or TOML",
    )
    parser.add_argument(  # msprobe compare's own spellings too: commands are pasted from its docs
        "-dm",
        "--data-mapping",
        "--data_mapping",
        dest="data_mapping",
        type=Path,
        metavar="FILE",
        help="two msprobe dumps: msprobe compare's data mapping YAML (test tensor name: golden tensor name)",
    )
    parser.add_argument(
        "-lm",
        "--layer-mapping",
        "--layer_mapping",
        dest="layer_mapping",
        type=Path,
        nargs="?",
        const=True,
        metavar="FILE",
        help="two msprobe dumps: msprobe compare's layer mapping YAML (Class: {test child: golden child}); "
        "without FILE, records pair by their place in the layer tree",
    )
    parser.add_argument(
        "--token-offset",
        type=int,
        metavar="N",
        help="ATB dumps: token = folder - N (default: automatic, MindIE-aware)",
    )
    ranks = parser.add_mutually_exclusive_group()
    ranks.add_argument(
        "--rank", type=int, metavar="R", help="multi-rank dumps: compare rank R (both sides when both)"
    )
    ranks.add_argument(
        "--gather",
        action="store_true",
        help="merge the test's ranks (concatenated, or summed before all-reduce) for a single-device golden",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="BASE",
        help="a clean run at the test's dtype: an operator fails only where its error exceeds the "
        "baseline's (x2, x3 for fp16/bf16) plus one rounding",
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="tui-acc.toml with thresholds and rules")
    parser.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the on-disk row cache"
    )
    parser.add_argument(
        "--follow-links",
        action="store_true",
        help="read through symlinks (and ATB data= files) that lead out of the dumps (refused by default)",
    )
    _add_threshold_args(parser)


def _add_threshold_args(parser: argparse.ArgumentParser) -> None:
    cosine, kl = bound_argument("cosine"), bound_argument("kl")
    parser.add_argument("--logits-cos", type=cosine, help="min logits cosine, every dtype")
    parser.add_argument("--logits-kl", type=kl, help="max logits KL, every dtype")
    parser.add_argument("--kl-fp16", type=kl, help="max logits KL for float16 (default 1e-4)")
    parser.add_argument("--kl-bf16", type=kl, help="max logits KL for bfloat16 (default 5e-3)")
    parser.add_argument("--op-cos", type=cosine, help="min operator cosine, every dtype")


def _thresholds(args: argparse.Namespace) -> Thresholds:
    """Defaults < config files < command line."""
    thresholds = _config(args).thresholds
    logits = {k: v for k, v in (("cosine", args.logits_cos), ("kl", args.logits_kl)) if v is not None}
    ops = {"cosine": args.op_cos} if args.op_cos is not None else {}
    thresholds = thresholds.with_bounds(logits=logits, ops=ops)
    for dtype, kl in (("float16", args.kl_fp16), ("bfloat16", args.kl_bf16)):
        if kl is not None:
            thresholds.logits[dtype]["kl"] = kl
    return thresholds


def _configured(args: argparse.Namespace) -> tuple[Thresholds, RedumpSettings]:
    """The thresholds and re-dump settings in force (ConfigError, SettingsError: a bad config)."""
    return _thresholds(args), _redump_settings(args)


def _config(args: argparse.Namespace) -> Config:
    config = getattr(args, "_loaded_config", None)
    if config is None:
        config = args._loaded_config = load_config(getattr(args, "config", None))
    return config


def _redump_settings(args: argparse.Namespace) -> RedumpSettings:
    config = _config(args)
    return load_settings(config.sections.get("redump"), " or ".join(config.sources) or "tui-acc.toml")


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP (a dropped SSH session) exit through Python's unwinding, not abruptly:
    ``finally`` blocks run, so a half-written export's temporary file is removed and nothing
    partial is left. (The TUI installs its own handlers, which end it as ``q`` does.)
    """

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        exit_on_signals()
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list:
        _command_parser(parser, "open").print_help()
        return 2
    argv = command_first(parser, args_list)
    if argv[0] == "report" and "--ranks" in argv:  # one dump, not a pair: the ranks command, headless
        argv = ["ranks", "--report", *(a for a in argv[1:] if a != "--ranks")]
    args = _parse(parser, argv)
    args.command_line = args_list  # as typed: what a warning tells the user to run instead
    try:
        return _run_command(args)
    except TuiAccError as exc:  # bad input, said as it is: its message names the file or option
        print(f"tui-acc: error: {exc}", file=sys.stderr)
        return 2


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "ranks":
        return _run_ranks(args)
    if args.command == "demo":
        return _run_demo(args)
    if args.command == "hunt":
        return _run_hunt(args)
    return _run_compare(args)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed, TEST found after options too: with TEST optional (one dump is checked on its
    own), argparse takes ``G --no-cache T``'s G alone as the positionals and leaves T over."""
    args, extra = parser.parse_known_args(argv)
    pair = args.command in ("open", "report")
    if pair and args.test is None and len(extra) == 1 and not extra[0].startswith("-"):
        args.test, extra = Path(extra[0]), []
    if extra:
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def command_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with its command moved to the front (``open`` when none is named), so that options
    go anywhere: before the command, the dumps or after them.

    The command is the first argument that is neither an option nor an option's value; argparse
    alone takes the first positional for the command (``--rank 0 G T`` would say ``invalid choice: '0'``).
    """
    valued = _options_with_values(parser)
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            index += 1 + (valued.get(arg, 0) if "=" not in arg else 0)
            continue
        if arg in _COMMANDS:
            return [arg, *argv[:index], *argv[index + 1 :]]
        break
    return ["open", *argv]


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command: argparse.ArgumentParser = subparsers.choices[name]
    return command


def _options_with_values(parser: argparse.ArgumentParser) -> dict[str, int]:
    """Every command's option strings that take a value: how many arguments each takes."""
    counts: dict[str, int] = {}
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in (p for a in subparsers for p in a.choices.values()):
        for action in command._actions:
            # optional values (nargs="?": -lm [FILE]) are taken only when they look like one
            taken = action.nargs if isinstance(action.nargs, int) else 1 if action.nargs is None else 0
            for option in action.option_strings:
                counts[option] = taken
    return counts


def _run_compare(args: argparse.Namespace) -> int:
    from tui_acc.session import check_comparable, open_comparison

    thresholds, settings = _configured(args)
    _check_forced_kernel()
    if args.test is None:
        return _run_single(args, thresholds, settings)
    if args.command == "report" and not args.redump_command:
        from tui_acc.metrics.kernel_loading import start_loading

        start_loading()  # while the dumps are indexed and paired
    # The same options open a re-dump in place of one side later (the TUI's "open the new dump").
    opener = functools.partial(
        open_comparison,
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
    )
    cmp = opener(args.golden, args.test)
    check_comparable(cmp)  # the same dump twice, or nothing pairs: said, not shown as a result
    if args.command == "report":
        if args.redump_command:
            return _print_redump(cmp, settings, args)
        return _report(cmp, args)
    from tui_acc.redump.runner import EXIT_GRACE
    from tui_acc.tui.app import AccApp

    # a command typed for `r` is remembered in --config when given: read last, it would override ./'s
    app = AccApp(cmp, redump=settings, opener=opener, config_file=args.config, swap=_swapped_command(args))
    try:
        app.run()
    finally:  # however the app ended: a re-dump the user did not choose to leave running stops
        if app.redump_run is not None:
            app.redump_run.stop(EXIT_GRACE)
    return 0


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
}


def _run_single(args: argparse.Namespace, thresholds: Thresholds, settings: RedumpSettings) -> int:
    """``tui-acc DUMP`` and ``report DUMP``: one dump checked on its own (anomalies/)."""
    from tui_acc.anomalies.rules import AnomalySettings
    from tui_acc.anomalies.session import open_single

    given = [flag for name, flag in _PAIR_ONLY.items() if getattr(args, name, None) not in (None, False)]
    if given:
        raise UsageError(f"{', '.join(given)} compare(s) two dumps: give GOLDEN and TEST")
    config = _config(args)
    rules = AnomalySettings.from_table(
        config.sections.get("anomalies"), " or ".join(config.sources) or "tui-acc.toml"
    )
    cmp = open_single(
        args.golden,
        rules,
        thresholds,
        logits_node=args.logits_node,
        token_offset=args.token_offset,
        rank=args.rank,
        follow_links=args.follow_links,
    )
    if args.command == "report":
        return _report_single(cmp, args)
    from tui_acc.redump.runner import EXIT_GRACE
    from tui_acc.tui.app import AccApp

    # the dump plays the test's part for r: it is the run under suspicion
    app = AccApp(cmp, redump=settings, config_file=args.config)
    try:
        app.run()
    finally:
        if app.redump_run is not None:
            app.redump_run.stop(EXIT_GRACE)
    return 0


def _report_single(cmp: Comparison, args: argparse.Namespace) -> int:
    from tui_acc.reports import single
    from tui_acc.reports.export import write_export

    result = single.build_report(cmp, args.token)
    if args.csv is not None:
        result["csv"] = str(write_export(single.csv_frame(result), args.csv, overwrite=args.force))
    if args.json:
        print(json.dumps(single.strict_json(single.public(result)), indent=2, allow_nan=False))
    else:
        print(single.format_text(result))
        if args.csv is not None:
            print(f"csv: {result['csv']}")
    return single.exit_code(result)


def _check_forced_kernel() -> None:
    """KernelUnavailable where a TUI_ACC_KERNEL that is set cannot be honoured (said once here, not
    as every pair's error). Looked at only when set (fastkernel.ENV): fastkernel imports numpy, which
    the TUI's first frame does without."""
    if not os.environ.get("TUI_ACC_KERNEL", "").strip():
        return
    from tui_acc.metrics.fastkernel import check_forced

    check_forced()


def _print_redump(cmp: Comparison, settings: RedumpSettings, args: argparse.Namespace) -> int:
    """``report --redump-command``: what ``r`` in the TUI would run, for scripts."""
    from datetime import datetime

    from tui_acc.redump.select import plan_for

    token = args.token if args.token is not None else cmp.engine.first_failing_token()
    if token is None:
        raise UsageError("no failing token; give --token N")
    if token not in cmp.pairing.tokens:
        raise UsageError(f"token {token} is not in both dumps")
    node = args.redump_node
    if node is None:
        found = cmp.engine.first_failing_op(token)
        node = found["golden_node"] if found else None
    elif node == "all":
        node = None
    elif node not in {n.golden for n in cmp.pairing.node_pairs(token)}:
        raise UsageError(f"--redump-node {node!r} is not a paired node at token {token}")
    plan = plan_for(cmp, settings, args.redump_side, token, node, datetime.now())
    print(plan.describe())
    return 0


def _report(cmp: object, args: argparse.Namespace) -> int:
    from tui_acc.reports import pair as rpt
    from tui_acc.reports.export import with_provenance, write_export

    if args.compat and args.csv is None:  # said before the comparison, which may take minutes
        raise UsageError("--compat writes a CSV: give --csv FILE")
    if args.compat:  # the tools' own arithmetic is torch's: said before the comparison too
        from tui_acc.dumps.torchfile.arrays import require_torch

        require_torch(f"report --compat {args.compat}")
    result = rpt.build_report(cmp, args.token, all_tokens=args.all_tokens)  # type: ignore[arg-type]
    if result["swapped"]:
        result["swapped"]["command"] = _swapped_command(args)
    if args.replay is not None:
        _replay_into(cmp, args, result)  # type: ignore[arg-type]
    if args.csv is not None:
        if args.compat:  # exactly the tool's columns, for the tool's readers
            from tui_acc.reports.compat import compat_frame

            frame = compat_frame(cmp, args.compat)  # type: ignore[arg-type]
        else:  # as the TUI exports it: which dumps and thresholds it came from; .xlsx/.parquet by name
            frame = with_provenance(rpt.csv_frame(result), cmp)  # type: ignore[arg-type]
        result["csv"] = str(write_export(frame, args.csv, overwrite=args.force))
    plots = None
    if args.plot is not None:  # after the CSV: a folder of pictures is the slow part, and the optional one
        from tui_acc.plots.ticket import write_plots

        plots = write_plots(cmp, result, args.plot, overwrite=args.force)  # type: ignore[arg-type]
        result["plots"] = plots.as_dict()
    if args.json:
        print(json.dumps(rpt.strict_json(rpt.public(result)), indent=2, allow_nan=False))
    else:
        print(rpt.format_text(result), end="")
        if "_replay" in result:
            print("\n" + "\n".join(result["_replay"].describe()))
        if args.csv is not None:
            print(f"csv: {result['csv']}")
        if plots is not None:
            print("\n".join(plots.lines()))
    if plots is not None and plots.problems:  # a picture asked for and not drawn: said, and not a pass
        for problem in plots.problems:
            print(f"tui-acc: error: --plot: {problem}", file=sys.stderr)
        return rpt.EXIT_USAGE
    return rpt.exit_code(result)


def _swapped_command(args: argparse.Namespace) -> str | None:
    """The user's command line with GOLDEN and TEST swapped."""
    from tui_acc.sides import swapped_command

    return swapped_command(args.command_line, args.golden, args.test)


def _replay_into(cmp: Comparison, args: argparse.Namespace, result: dict[str, object]) -> None:
    """``report --replay NODE``: the node's replay on both sides into ``result`` (``replay`` in the JSON);
    what stops it (no token, an unknown node, a malformed [replay] table) is a UsageError."""
    from tui_acc.replay.registry import Registry, RegistryError
    from tui_acc.verdicts.replay_check import UnknownNode, replay_node

    token = args.token if args.token is not None else result["analysed_token"]
    if not isinstance(token, int):
        raise UsageError("--replay needs a token: no token fails; give --token N")
    config = _config(args)
    try:
        registry = Registry.from_config(
            config.sections.get("replay"), " or ".join(config.sources) or "tui-acc.toml"
        )
        replay = replay_node(cmp, token, args.replay, registry)
    except (RegistryError, UnknownNode) as exc:
        raise UsageError(f"--replay: {exc}") from exc
    result["replay"] = replay.as_dict()
    result["_replay"] = replay


def _run_hunt(args: argparse.Namespace) -> int:
    from tui_acc.hunt.run import DEFAULT_LOGITS_NODE, Hunt
    from tui_acc.session import open_comparison

    thresholds, settings = _configured(args)
    quiet = args.json and args.no_tui
    log = sys.stderr if quiet else sys.stdout  # --json: stdout holds the one object

    def say(line: str) -> None:
        print(line, file=log, flush=True)

    def confirm(step: str, _plans: object) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            say(f"tui-acc hunt: step {step} needs a yes: run with --yes to run every step without asking")
            return False
        return input(f"run step {step}? [y/N] ").strip().lower() in ("y", "yes")

    opener = functools.partial(open_comparison, thresholds=thresholds, cache=not args.no_cache)
    hunt = Hunt(
        settings,
        opener,
        runs_dir(settings.out_dir),
        say,
        confirm,
        logits_node=args.logits_node or DEFAULT_LOGITS_NODE,
    )
    result = hunt.run()
    summary = result.as_dict()
    if result.error is not None:
        print(f"tui-acc: error: {result.error}", file=sys.stderr)
    if args.no_tui or result.error is not None or result.comparison is None:
        if args.json:
            from tui_acc.reports.pair import strict_json

            print(json.dumps(strict_json(summary), indent=2))
        else:
            _print_hunt(summary, say)
        return result.exit_code
    _print_hunt(summary, say)
    from tui_acc.tui.app import AccApp

    AccApp(
        result.comparison,
        redump=settings,
        opener=opener,
        config_file=args.config,
        start_at=result.first_failing_token if result.culprit is not None else None,
        greeting=result.greeting(Path.cwd()),
    ).run()
    return result.exit_code


def _print_hunt(summary: dict[str, object], say: Callable[[str], None]) -> None:
    """The steps as a table: each side's seconds and bytes, then the finding."""
    steps = summary["steps"]
    assert isinstance(steps, list)
    say("")
    say(f"{'step':<10} {'side':<7} {'seconds':>8} {'bytes':>12}  folder")
    for step in steps:
        for side in step["sides"]:
            figures = f"{side['seconds']:>8.2f} {side['bytes']:>12,}"
            say(f"{step['step']:<10} {side['side']:<7} {figures}  {side['folder']}")
        say(f"  -> {step['finding']}")
    if summary["folder"] is None:
        say("nothing was run, nothing was written")
    else:
        say(f"dumped {summary['bytes_dumped']:,} bytes in all, in {summary['folder']}")


def _run_ranks(args: argparse.Namespace) -> int:
    """``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv)."""
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.ranks import open_ranks
    from tui_acc.collectives.settings import checked_margin, margin_of

    config = _config(args)
    margin = margin_of(config.sections.get("collectives"), " or ".join(config.sources) or "tui-acc.toml")
    if args.margin is not None:
        margin = checked_margin(args.margin, "--margin")
    check = RanksCheck(open_ranks(str(args.dump), follow_links=args.follow_links), margin)
    if args.report or args.json or args.csv is not None:
        return _report_ranks(check, args)
    from tui_acc.tui.ranks_app import RanksApp

    RanksApp(check).run()
    return 0


def _report_ranks(check: object, args: argparse.Namespace) -> int:
    from tui_acc.dumps import DumpError
    from tui_acc.reports import ranks as ranks_report
    from tui_acc.reports.export import write_export
    from tui_acc.reports.pair import strict_json

    result = ranks_report.build_report(check)  # type: ignore[arg-type]
    if not result["collectives"]:
        raise DumpError(
            f"{args.dump}: no collective operator found in any rank (ATB AllReduceOperation, "
            "ReduceScatterOperation, AllGatherOperation; msprobe Distributed.all_reduce/reduce_scatter/"
            "all_gather records)"
        )
    if args.csv is not None:
        frame = ranks_report.with_provenance(ranks_report.csv_frame(result), check)  # type: ignore[arg-type]
        result["csv"] = str(write_export(frame, args.csv, overwrite=args.force))
    if args.json:
        print(json.dumps(strict_json(result), indent=2, allow_nan=False))
    else:
        print(ranks_report.format_text(result))
        if args.csv is not None:
            print(f"csv: {result['csv']}")
    return ranks_report.exit_code(result)


def _run_ranks_demo(args: argparse.Namespace) -> int:
    from tui_acc.demo.tensor_parallel import make_ranks_demo

    out = args.out if args.out is not None else Path(RUNS_DIR) / "demo-ranks"
    demo = make_ranks_demo(out, world=args.ranks, seed=args.seed, progress=print)
    print(demo.describe())
    if args.no_tui:
        return 0
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.ranks import open_ranks
    from tui_acc.tui.ranks_app import RanksApp

    hint = f"Demo run on {demo.world} ranks: one all-reduce is faulty. f jumps to it."
    RanksApp(RanksCheck(open_ranks(str(demo.dump))), greeting=hint).run()
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from tui_acc.demo import make_baseline, make_demo

    if args.ranks is not None:
        return _run_ranks_demo(args)
    if args.out is None:
        args.out = Path(RUNS_DIR) / "demo"
    layout = "mindie" if args.mindie else "atb" if args.atb else "torch"
    demo = make_demo(args.out, seed=args.seed, progress=print, layout=layout, layers=args.layers)
    baseline = make_baseline(demo, progress=print) if args.baseline else None
    print(demo.describe())
    if baseline is not None:
        print(f"baseline dump (bfloat16, rounding toward zero): {baseline}")
        print(f"judge against its noise:  {shlex.join([*demo.open_argv(), '--baseline', str(baseline)])}")
    if args.no_tui:
        return 0
    from tui_acc.session import open_comparison
    from tui_acc.tui.app import AccApp

    hint = (
        "Demo pair: one fault is injected. f finds it: the first failing token, at its first failing "
        "operator; r re-dumps just that operator."
    )
    # the demo's tui-acc.toml tells r how to re-dump it (with the demo's own inference script)
    config = load_config(demo.out / "tui-acc.toml" if (demo.out / "tui-acc.toml").is_file() else None)
    settings = load_settings(config.sections.get("redump"), " or ".join(config.sources))
    opener = functools.partial(open_comparison, thresholds=config.thresholds, baseline=baseline)
    AccApp(opener(demo.golden, demo.test), greeting=hint, redump=settings, opener=opener).run()
    return 0
