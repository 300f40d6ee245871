"""Re-dumps of a TorchAir run: msprobe's ``set_ge_dump_config`` for the GE side, ``set_fx_dump_config``
for the FX side (docs/formats.md §7.6).

Facts from msprobe (``python/msprobe/pytorch/torchair_dump/torchair_dump.py``):

* ``set_ge_dump_config(dump_path, dump_mode="all", fusion_switch_file=None, dump_token=None,
  dump_layer=None, compiler_config=None)`` returns TorchAir's ``CompilerConfig`` with the GE dump on
  below ``{dump_path}/msprobe_ge_dump``: ``dump_token`` is joined with ``|`` into
  ``dump_config.dump_step`` (GE's iteration count, which each graph keeps for itself: the GE dump's
  ``data_index``), ``dump_layer`` with spaces into ``dump_config.dump_layer`` (op names), and
  ``dump_mode`` is ``input``, ``output`` or ``all``.
* ``set_fx_dump_config(dump_path, op_list=None, compiler_config=None)`` writes below
  ``{dump_path}/msprobe_fx_dump``; ``op_list`` keeps the FX nodes whose name contains one of its
  words (case-insensitive); it has no step: every run of every graph is dumped.

tui-acc writes the keyword arguments as JSON; the user's script passes them on
(``set_ge_dump_config(**json.load(...))``) and hands the config to ``torchair.get_npu_backend``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

CONFIG_VARIABLE = "TUI_ACC_TORCHAIR_CONFIG"


def ge_dump_config(
    runs: Sequence[tuple[int, str, int]],
    tokens: Sequence[int] | None,
    nodes: Sequence[str],
    outputs_only: bool,
    out: str,
    notes: list[str],
) -> str:
    """``set_ge_dump_config``'s keyword arguments for ``tokens`` (None: every one) and ``nodes`` (GE
    dump names, ``graph_2/MatMulV2_13``; a graph alone: its every op). ``runs``: each token's graph
    and that graph's own step (``DumpIndex.runs``)."""
    chosen = [(graph, step) for token, graph, step in runs if tokens is None or token in tokens]
    steps = sorted({step for _, step in chosen})
    graphs = sorted({graph for graph, _ in chosen})
    arguments: dict[str, object] = {"dump_path": out, "dump_mode": "output" if outputs_only else "all"}
    if tokens is not None and not chosen:
        notes.append("the dump names no graph run for these tokens: every step is dumped")
    elif tokens is not None:
        arguments["dump_token"] = steps
        others = sorted({graph for _, graph, step in runs if step in steps} - set(graphs))
        if others:
            notes.append(
                f"GE's dump_step counts each graph's own runs: step {_spelled(steps)} of "
                f"{', '.join(others)} is dumped too, where it runs"
            )
    ops = [name.partition("/")[2] for name in nodes if "/" in name]
    if ops and len(ops) == len(nodes):
        arguments["dump_layer"] = ops
        if len({graph for _, graph, _ in runs}) > 1:
            notes.append(
                "dump_layer names ops, not graphs: an op of the same name in another graph is dumped too"
            )
    elif nodes:
        notes.append(f"{', '.join(n for n in nodes if '/' not in n)}: a whole graph; every op is dumped")
    notes.append(
        f"your script: config = set_ge_dump_config(**json.load(open(os.environ['{CONFIG_VARIABLE}']))) "
        "(msprobe.pytorch), then torchair.get_npu_backend(compiler_config=config)"
    )
    return json.dumps(arguments, indent=2)


def fx_dump_config(nodes: Sequence[str], out: str, notes: list[str]) -> str:
    """``set_fx_dump_config``'s keyword arguments for ``nodes`` (FX dump names,
    ``graph_2/mm_13-aten.mm.default``: the FX node is ``mm_13``)."""
    arguments: dict[str, object] = {"dump_path": out}
    names = [name.partition("/")[2].partition("-")[0] for name in nodes if "/" in name]
    if names and len(names) == len(nodes):
        arguments["op_list"] = names
        notes.append(
            "set_fx_dump_config keeps every FX node whose name contains a word of op_list: "
            f"{', '.join(names)} may keep others (mm_1 keeps mm_13)"
        )
    notes.append("the FX dump has no step: every run of every graph is dumped")
    notes.append(
        f"your script: config = set_fx_dump_config(**json.load(open(os.environ['{CONFIG_VARIABLE}']))) "
        "(msprobe.pytorch), then torchair.get_npu_backend(compiler_config=config)"
    )
    return json.dumps(arguments, indent=2)


def _spelled(steps: Sequence[int]) -> str:
    return ", ".join(str(s) for s in steps)
