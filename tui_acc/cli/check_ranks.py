"""``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv): one run's
collectives checked across its ranks; with ``--ray ADDRESS``, each rank folder read on the Ray node that
holds it (``tui_acc/cluster``, imported only then: Ray is an optional extra)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tui_acc.cli.stdout_guard import emit_report, names_stdout, report_stdout
from tui_acc.cli.toml_settings import Settings
from tui_acc.errors import UsageError

if TYPE_CHECKING:
    from tui_acc.collectives.check import RanksCheck


def run(args: argparse.Namespace) -> int:
    """``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv)."""
    arguments, address = _where(args)
    margin = Settings.load(args.config).margin(args.margin)
    if not (args.report or args.json or args.csv is not None):
        check = _opened(args, arguments, address, margin, progress=None)  # the TUI has a line of nodes
        try:
            from tui_acc.tui.ranks_app import RanksApp

            RanksApp(check).run()
            return 0
        finally:
            check.close()
    # stdout holds the report alone (--json's object): what Ray or a library prints goes to stderr,
    # as report GOLDEN TEST's (stdout_guard.py); a --csv that names stdout is written there
    named_csv = args.csv
    to_stdout = names_stdout(named_csv)
    with report_stdout() as guarded:
        if to_stdout and guarded.path is not None:
            args.csv = Path(guarded.path)  # the real stdout, which descriptor 1 no longer is
        check = _opened(args, arguments, address, margin, progress=_said_on_stderr)
        try:
            return _report_ranks(check, args, named_csv, guarded.stream)
        finally:
            check.close()


def _opened(
    args: argparse.Namespace, arguments: list[str], address: str | None, margin: float, progress: Any
) -> RanksCheck:
    """The check of the ranks here, or (``address``) on the Ray cluster's nodes, ``progress`` getting
    a line per node as it finishes."""
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.rank_set import open_ranks

    if address is None:
        return RanksCheck(open_ranks(arguments[0], follow_links=args.follow_links), margin)
    from tui_acc.cluster.ray_check import open_on_ray

    return open_on_ray(arguments, address, margin, args.follow_links, progress)


def _where(args: argparse.Namespace) -> tuple[list[str], str | None]:
    """The dump's arguments (DUMP, or HOST:PATH pairs) and the Ray address (None: read here).

    ``--ray`` takes an optional value, so ``--ray DUMP`` (or ``--ray HOST:PATH ...``) gives the dump
    to it: a value that is no Ray address is taken back as the first of the dump's arguments."""
    arguments = [str(a) for a in ([args.dump] if args.dump is not None else []) + list(args.places)]
    address = args.ray
    if address is not None:
        from tui_acc.cluster.connect import is_address

        if not is_address(address):
            arguments, address = [address, *arguments], "auto"
    if not arguments:
        raise UsageError("ranks: give DUMP, the run's folder holding its rank folders")
    if address is None and len(arguments) > 1:
        raise UsageError(
            f"ranks: {' '.join(arguments[1:])}: one DUMP without --ray (HOST:PATH pairs name each Ray "
            "node's folder, with --ray)"
        )
    return arguments, address


def _said_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report_ranks(check: RanksCheck, args: argparse.Namespace, named_csv: Any, out: TextIO) -> int:
    from tui_acc.dumps import DumpError
    from tui_acc.reports import collectives as ranks_report
    from tui_acc.reports.output import exported

    report = ranks_report.build_report(check)
    if not report.collectives:
        raise DumpError(
            f"{args.dump}: no collective operator found in any rank (ATB AllReduceOperation, "
            "ReduceScatterOperation, AllGatherOperation; msprobe Distributed.all_reduce/reduce_scatter/"
            "all_gather records)"
        )
    return emit_report(exported(report, args.csv, overwrite=args.force), args.json, out, args.csv, named_csv)
