"""``tui-acc``'s entry point: parse, run the command, say a TuiAccError as ``tui-acc: error: ...``
(exit 2)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from tui_acc.cli import check_ranks, compare, demo, hunt, report
from tui_acc.cli.parser import build_parser, command_first, command_parser, parse
from tui_acc.errors import TuiAccError

# each command's module runs it
_RUN: dict[str, Callable[[argparse.Namespace], int]] = {
    "open": compare.run,
    "report": report.run,
    "demo": demo.run,
    "hunt": hunt.run,
    "ranks": check_ranks.run,
}


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
    """Run ``tui-acc ARGV`` (``sys.argv`` by default); the exit code to leave with."""
    if threading.current_thread() is threading.main_thread():
        exit_on_signals()
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list:
        command_parser(parser, "open").print_help()
        return 2
    argv = command_first(parser, args_list)
    if argv[0] == "report" and "--ranks" in argv:  # one dump, not a pair: the ranks command, headless
        argv = ["ranks", "--report", *(a for a in argv[1:] if a != "--ranks")]
    args = parse(parser, argv)
    args.command_line = args_list  # as typed: what a warning tells the user to run instead
    try:
        return _RUN[args.command](args)
    except TuiAccError as exc:  # bad input, said as it is: its message names the file or option
        print(f"tui-acc: error: {exc}", file=sys.stderr)
        return 2
