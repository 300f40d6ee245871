"""``tui-acc demo``: a golden/test pair with a known fault (or, with --ranks N, a tensor-parallel
run with one faulty all-reduce), written and then opened."""

from __future__ import annotations

import argparse
import functools
import shlex
from pathlib import Path

from tui_acc.cli.toml_settings import Settings
from tui_acc.redump.settings import RUNS_DIR


def run(args: argparse.Namespace) -> int:
    """Write the demo (``--ranks N``: the tensor-parallel one), say where its fault is, open it."""
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
    from tui_acc.session import CompareOptions, open_comparison
    from tui_acc.tui.app import AccApp

    hint = (
        "Demo pair: one fault is injected. f finds it: the first failing token, at its first failing "
        "operator; r re-dumps just that operator."
    )
    # the demo's tui-acc.toml tells r how to re-dump it (with the demo's own inference script)
    settings = Settings.load(demo.out / "tui-acc.toml" if (demo.out / "tui-acc.toml").is_file() else None)
    redump = settings.redump()
    options = CompareOptions(thresholds=settings.config.thresholds, baseline=baseline)
    opener = functools.partial(open_comparison, options=options)
    AccApp(opener(demo.golden, demo.test), greeting=hint, redump=redump, opener=opener).run()
    return 0


def _run_ranks_demo(args: argparse.Namespace) -> int:
    from tui_acc.demo.tensor_parallel import make_ranks_demo

    out = args.out if args.out is not None else Path(RUNS_DIR) / "demo-ranks"
    demo = make_ranks_demo(out, world=args.ranks, seed=args.seed, progress=print)
    print(demo.describe())
    if args.no_tui:
        return 0
    from tui_acc.collectives.check import RanksCheck
    from tui_acc.collectives.rank_set import open_ranks
    from tui_acc.tui.ranks_app import RanksApp

    hint = f"Demo run on {demo.world} ranks: one all-reduce is faulty. f jumps to it."
    RanksApp(RanksCheck(open_ranks(str(demo.dump))), greeting=hint).run()
    return 0
