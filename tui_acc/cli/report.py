"""``tui-acc report GOLDEN [TEST]``: the comparison without a UI (text or JSON, --csv, --plot,
--replay, --compat, --redump-command); exit 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tui_acc.cli.compare import open_pair, open_single_dump, pair_opener, prepared, swapped_command
from tui_acc.cli.stdout_guard import emit_report, names_stdout, report_stdout
from tui_acc.cli.toml_settings import Settings
from tui_acc.errors import UsageError
from tui_acc.redump.settings import RedumpSettings

if TYPE_CHECKING:
    from tui_acc.reports.pair import PairReport
    from tui_acc.session import Comparison
    from tui_acc.tolerances.thresholds import Thresholds
    from tui_acc.verdicts.replay_check import Replay


def run(args: argparse.Namespace) -> int:
    """A pair's report (or its re-dump command), or one dump's anomalies; the exit code to leave with."""
    from tui_acc.reports.output import Report, exported

    settings, thresholds, redump = prepared(args)
    report: Report
    # what a plug-in (or a library, or a process either starts) writes goes to stderr: stdout holds
    # the report alone (--json's object), and a --csv that names stdout is written there
    named_csv = args.csv
    to_stdout = names_stdout(named_csv)
    with report_stdout() as guarded:
        out = guarded.stream
        if to_stdout and guarded.path is not None:
            args.csv = Path(guarded.path)  # the real stdout, which descriptor 1 no longer is
        if args.test is None:
            from tui_acc.reports import single

            one = open_single_dump(args, settings, thresholds)
            report = exported(single.build_report(one, args.token), args.csv, overwrite=args.force)
        else:
            if not args.redump_command:
                from tui_acc.metrics.kernel_loading import start_loading

                start_loading()  # while the dumps are indexed and paired
            if args.ray is not None:
                report = _ray_report(args, settings, thresholds)
            else:
                cmp = open_pair(pair_opener(args, thresholds, settings), args)
                if args.redump_command:
                    return _print_redump(cmp, redump, args, out)
                report = _pair_report(cmp, args, settings)
        return emit_report(report, args.json, out, args.csv, named_csv)


def _print_redump(cmp: Comparison, redump: RedumpSettings, args: argparse.Namespace, out: TextIO) -> int:
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
        found = cmp.verdicts.culprit(token)
        node = found["golden_node"] if found else None
    elif node == "all":
        node = None
    elif node not in {n.golden for n in cmp.pairing.node_pairs(token)}:
        raise UsageError(f"--redump-node {node!r} is not a paired node at token {token}")
    plan = plan_for(cmp, redump, args.redump_side, token, node, datetime.now())
    print(plan.describe(), file=out)
    return 0


def _ray_report(args: argparse.Namespace, settings: Settings, thresholds: Thresholds) -> PairReport:
    """``report GOLDEN TEST --ray``: the pair's report with the test's rows computed on the cluster's
    nodes; a line per node on stderr as the report is made, then the bytes that crossed; ``ray`` in
    the JSON."""
    from tui_acc.cli.compare import open_ray_pair

    if args.redump_command:
        raise UsageError("--redump-command plans a re-dump of a local dump: not with --ray")
    ray_pair = open_ray_pair(args, thresholds, settings, progress=_said_on_stderr)
    try:
        report = _pair_report(ray_pair.comparison, args, settings)
        ray_pair.finish()
        return replace(report, ray=ray_pair.said())
    finally:
        ray_pair.close()


def _said_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _pair_report(cmp: Comparison, args: argparse.Namespace, settings: Settings) -> PairReport:
    """The pair's report with what the command line asked besides: the replay, the CSV, the plots."""
    from tui_acc.reports import pair as rpt
    from tui_acc.reports.output import exported

    if args.compat and args.csv is None:  # said before the comparison, which may take minutes
        raise UsageError("--compat writes a CSV: give --csv FILE")
    if args.compat:  # the tools' own arithmetic is torch's: said before the comparison too
        from tui_acc.dumps.torchfile.arrays import require_torch

        require_torch(f"report --compat {args.compat}")
    report = rpt.build_report(cmp, args.token, all_tokens=args.all_tokens, swap_command=swapped_command(args))
    if args.replay is not None:
        report = replace(report, replay=_replayed(cmp, args, settings, report))
    frame = None
    if args.compat:  # exactly the tool's columns, for the tool's readers (else as the TUI exports it:
        # which dumps and thresholds it came from; .xlsx/.parquet by name)
        from tui_acc.reports.compat import compat_frame

        frame = compat_frame(cmp, args.compat)
    report = exported(report, args.csv, overwrite=args.force, frame=frame)
    if args.plot is not None:  # after the CSV: a folder of pictures is the slow part, and the optional one
        from tui_acc.plots.ticket import write_plots

        report = replace(report, plots=write_plots(cmp, report, args.plot, overwrite=args.force))
    return report


def _replayed(cmp: Comparison, args: argparse.Namespace, settings: Settings, report: PairReport) -> Replay:
    """``report --replay NODE``: the node's replay on both sides (``replay`` in the JSON); what stops
    it (no token, an unknown node, a malformed [replay] table) is a UsageError."""
    from tui_acc.replay.registry import RegistryError
    from tui_acc.verdicts.replay_check import UnknownNode, replay_node

    token = args.token if args.token is not None else report.analysed_token
    if not isinstance(token, int):
        raise UsageError("--replay needs a token: no token fails; give --token N")
    try:
        return replay_node(cmp, token, args.replay, settings.replay_registry(), cmp.engine.tensor_row)
    except (RegistryError, UnknownNode) as exc:
        raise UsageError(f"--replay: {exc}") from exc
