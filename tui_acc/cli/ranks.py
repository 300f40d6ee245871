"""``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv): one run's
collectives checked across its ranks."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from tui_acc.cli.settings import Settings

if TYPE_CHECKING:
    from tui_acc.collectives.check import RanksCheck


def run(args: argparse.Namespace) -> int:
    """``tui-acc ranks DUMP`` (the TUI) and ``report --ranks DUMP`` (text, --json, --csv)."""
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.ranks import open_ranks

    margin = Settings.load(args.config).margin(args.margin)
    check = RanksCheck(open_ranks(str(args.dump), follow_links=args.follow_links), margin)
    if args.report or args.json or args.csv is not None:
        return _report_ranks(check, args)
    from tui_acc.tui.ranks_app import RanksApp

    RanksApp(check).run()
    return 0


def _report_ranks(check: RanksCheck, args: argparse.Namespace) -> int:
    from tui_acc.dumps import DumpError
    from tui_acc.reports import ranks as ranks_report
    from tui_acc.reports.export import write_export
    from tui_acc.reports.output import strict_json

    result = ranks_report.build_report(check)
    if not result["collectives"]:
        raise DumpError(
            f"{args.dump}: no collective operator found in any rank (ATB AllReduceOperation, "
            "ReduceScatterOperation, AllGatherOperation; msprobe Distributed.all_reduce/reduce_scatter/"
            "all_gather records)"
        )
    if args.csv is not None:
        frame = ranks_report.with_provenance(ranks_report.csv_frame(result), check)
        result["csv"] = str(write_export(frame, args.csv, overwrite=args.force))
    if args.json:
        print(json.dumps(strict_json(result), indent=2, allow_nan=False))
    else:
        print(ranks_report.format_text(result))
        if args.csv is not None:
            print(f"csv: {result['csv']}")
    return ranks_report.exit_code(result)
