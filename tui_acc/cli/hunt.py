"""``tui-acc hunt``: both sides dumped narrowly, coarse to fine, until the culprit; then the view
at it (or, with --no-tui, the steps as a table or JSON)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tui_acc.cli.toml_settings import Settings
from tui_acc.redump.settings import runs_dir


def run(args: argparse.Namespace) -> int:
    """Exit 1 when a culprit is found, 0 when the run is clean, 2 when a step could not run, 130
    when interrupted."""
    from tui_acc.hunt.run import DEFAULT_LOGITS_NODE, Hunt
    from tui_acc.session import CompareOptions, open_comparison

    settings = Settings.load(args.config)
    thresholds, redump = settings.thresholds(args), settings.redump()
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

    options = CompareOptions(thresholds=thresholds, cache=not args.no_cache)
    hunt = Hunt(
        redump,
        options,
        runs_dir(redump.out_dir),
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
            from tui_acc.reports.output import strict_json

            print(json.dumps(strict_json(summary), indent=2))
        else:
            _print_hunt(summary, say)
        return result.exit_code
    _print_hunt(summary, say)
    from tui_acc.tui.app import AccApp

    AccApp(
        result.comparison,
        redump=redump,
        opener=functools.partial(open_comparison, options=options),
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
