"""``tui-acc report GOLDEN [TEST]``: the comparison without a UI (text or JSON, --csv, --plot,
--replay, --compat, --redump-command); exit 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from tui_acc.cli.compare import open_pair, open_single_dump, pair_opener, prepared, swapped_command
from tui_acc.cli.settings import Settings
from tui_acc.errors import UsageError
from tui_acc.redump.settings import RedumpSettings

if TYPE_CHECKING:
    from tui_acc.session import Comparison


def run(args: argparse.Namespace) -> int:
    """A pair's report (or its re-dump command), or one dump's anomalies; the exit code to leave with."""
    settings, thresholds, redump = prepared(args)
    if args.test is None:
        return _report_single(open_single_dump(args, settings, thresholds), args)
    if not args.redump_command:
        from tui_acc.metrics.kernel_loading import start_loading

        start_loading()  # while the dumps are indexed and paired
    cmp = open_pair(pair_opener(args, thresholds), args)
    if args.redump_command:
        return _print_redump(cmp, redump, args)
    return _report(cmp, args, settings)


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


def _print_redump(cmp: Comparison, redump: RedumpSettings, args: argparse.Namespace) -> int:
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
    plan = plan_for(cmp, redump, args.redump_side, token, node, datetime.now())
    print(plan.describe())
    return 0


def _report(cmp: Comparison, args: argparse.Namespace, settings: Settings) -> int:
    from tui_acc.reports import pair as rpt
    from tui_acc.reports.export import with_provenance, write_export
    from tui_acc.reports.output import EXIT_USAGE, strict_json
    from tui_acc.reports.pair_text import format_text

    if args.compat and args.csv is None:  # said before the comparison, which may take minutes
        raise UsageError("--compat writes a CSV: give --csv FILE")
    if args.compat:  # the tools' own arithmetic is torch's: said before the comparison too
        from tui_acc.dumps.torchfile.arrays import require_torch

        require_torch(f"report --compat {args.compat}")
    result = rpt.build_report(cmp, args.token, all_tokens=args.all_tokens)
    if result["swapped"]:
        result["swapped"]["command"] = swapped_command(args)
    if args.replay is not None:
        _replay_into(cmp, args, settings, result)
    if args.csv is not None:
        if args.compat:  # exactly the tool's columns, for the tool's readers
            from tui_acc.reports.compat import compat_frame

            frame = compat_frame(cmp, args.compat)
        else:  # as the TUI exports it: which dumps and thresholds it came from; .xlsx/.parquet by name
            frame = with_provenance(rpt.csv_frame(result), cmp)
        result["csv"] = str(write_export(frame, args.csv, overwrite=args.force))
    plots = None
    if args.plot is not None:  # after the CSV: a folder of pictures is the slow part, and the optional one
        from tui_acc.plots.ticket import write_plots

        plots = write_plots(cmp, result, args.plot, overwrite=args.force)
        result["plots"] = plots.as_dict()
    if args.json:
        print(json.dumps(strict_json(rpt.public(result)), indent=2, allow_nan=False))
    else:
        print(format_text(result), end="")
        if "_replay" in result:
            print("\n" + "\n".join(result["_replay"].describe()))
        if args.csv is not None:
            print(f"csv: {result['csv']}")
        if plots is not None:
            print("\n".join(plots.lines()))
    if plots is not None and plots.problems:  # a picture asked for and not drawn: said, and not a pass
        for problem in plots.problems:
            print(f"tui-acc: error: --plot: {problem}", file=sys.stderr)
        return EXIT_USAGE
    return rpt.exit_code(result)


def _replay_into(
    cmp: Comparison, args: argparse.Namespace, settings: Settings, result: dict[str, object]
) -> None:
    """``report --replay NODE``: the node's replay on both sides into ``result`` (``replay`` in the JSON);
    what stops it (no token, an unknown node, a malformed [replay] table) is a UsageError."""
    from tui_acc.replay.registry import RegistryError
    from tui_acc.verdicts.replay_check import UnknownNode, replay_node

    token = args.token if args.token is not None else result["analysed_token"]
    if not isinstance(token, int):
        raise UsageError("--replay needs a token: no token fails; give --token N")
    try:
        replay = replay_node(cmp, token, args.replay, settings.replay_registry())
    except (RegistryError, UnknownNode) as exc:
        raise UsageError(f"--replay: {exc}") from exc
    result["replay"] = replay.as_dict()
    result["_replay"] = replay
