"""The command line's grammar: every command's options, options anywhere (the command is found
in argv before argparse sees it), TEST after options too."""

from __future__ import annotations

import argparse
from pathlib import Path

from tui_acc import __version__
from tui_acc.config import bound_argument

COMMANDS = ("open", "report", "demo", "hunt", "ranks")


def build_parser() -> argparse.ArgumentParser:
    """The ``tui-acc`` parser: one subparser per command of COMMANDS, each with its options and
    help. It expects the command first: ``command_first`` puts it there."""
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
    open_cmd.add_argument(
        "--all-tokens",
        action="store_true",
        help="judge every token's operators in the background, as report --all-tokens does: the token "
        "list shows each token's local operators, and f finds one even where every token's logits pass",
    )

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
        nargs="?",  # required, said by check_ranks.py: `--ray DUMP` takes DUMP for the address first
        help="the run's folder holding its rank folders (msit's tensors/, msprobe's step*), "
        "or the dump above it; with --ray, the same path on every node, or HOST:PATH for each node",
    )
    ranks.add_argument(
        "places",
        nargs="*",
        metavar="HOST:PATH",
        help="with --ray: each further node's folder (docs/cluster.md)",
    )
    ranks.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="read each rank folder on the Ray node that holds it (needs tui-acc[ray]): ADDRESS as ray.init "
        "takes it (auto, the default: RAY_ADDRESS or the cluster started here; host:port; ray://host:port). "
        "RAY_ADDRESS alone never switches a run to Ray",
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
        help="merge the test's ranks (concatenated, or summed before all-reduce) for a single-device golden "
        "(the default where the golden has one rank; --rank R compares one instead)",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="the test's rank folders are on the nodes of a Ray cluster (needs tui-acc[ray]): each tensor's "
        "row computed on the node holding its files, TEST the same path on every node, or HOST:PATH "
        "for each node after GOLDEN (docs/cluster.md); "
        "ADDRESS as ray.init takes it (auto, the default). RAY_ADDRESS alone never switches to Ray",
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


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed, TEST found after options too: with TEST optional (one dump is checked on its
    own), argparse takes ``G --no-cache T``'s G alone as the positionals and leaves T over. With
    ``--ray``, what follows TEST is ``places``: HOST:PATH of each further node (docs/cluster.md)."""
    args, extra = parser.parse_known_args(argv)
    if args.command in ("open", "report"):
        loose = [arg for arg in extra if not arg.startswith("-")]
        if args.test is None and loose:
            args.test = Path(loose.pop(0))
        # --ray: after TEST, HOST:PATH for each further node holding some of the test's rank folders
        args.places = loose if args.ray is not None else []
        extra = [arg for arg in extra if arg.startswith("-")] + ([] if args.ray is not None else loose)
    if extra:
        command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
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
        if arg in COMMANDS:
            return [arg, *argv[:index], *argv[index + 1 :]]
        break
    return ["open", *argv]


def command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subparser of the command ``name`` (one of COMMANDS) in ``build_parser``'s parser, for
    its help and its errors."""
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
