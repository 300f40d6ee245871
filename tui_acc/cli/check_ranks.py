"""``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv): one run's
collectives checked across its ranks."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tui_acc.cli.toml_settings import Settings

if TYPE_CHECKING:
    from tui_acc.collectives.check import RanksCheck


def run(args: argparse.Namespace) -> int:
    """``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv)."""
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.rank_set import open_ranks

    margin = Settings.load(args.config).margin(args.margin)
    check = RanksCheck(open_ranks(str(args.dump), follow_links=args.follow_links), margin)
    if args.report or args.json or args.csv is not None:
        return _report_ranks(check, args)
    from tui_acc.tui.ranks_app import RanksApp

    RanksApp(check).run()
    return 0


def _report_ranks(check: RanksCheck, args: argparse.Namespace) -> int:
    from tui_acc.dumps import DumpError
    from tui_acc.reports import collectives as ranks_report
    from tui_acc.reports.output import emit, exported

    report = ranks_report.build_report(check)
    if not report.collectives:
        raise DumpError(
            f"{args.dump}: no collective operator found in any rank (ATB AllReduceOperation, "
            "ReduceScatterOperation, AllGatherOperation; msprobe Distributed.all_reduce/reduce_scatter/"
            "all_gather records)"
        )
    return emit(exported(report, args.csv, overwrite=args.force), args.json)
