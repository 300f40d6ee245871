"""Reader for msprobe's graph-mode dumps (``AclGraphDumper``, ACLGraph / NPUGraph replays).

Layout (msprobe ``python/msprobe/pytorch/aclgraph_dumper.py``, ``ccsrc/aclgraph_dump/aclgraph_dump.cpp``)::

    {dump_path}/step{N}/{rank{R} | pid{P}}/dump.json                       task "statistics"
    {dump_path}/step{N}/{rank{R} | pid{P}}/dump_tensor_data/
        {api}.{call}.{input | input_kwargs | output}[.{i}].pt             task "tensor" (no dump.json)

``step()`` closes each replay (aclgraph_dumper.py:740-762), so a step is one forward pass: the
token here is N. Neither task writes construct.json or stack.json; a statistics ``dump.json``
without them is how graph mode is told from an eager one. Record names are msprobe's statistics
names (aclgraph_dumper.py:503-518), for both tasks: ``Aten.mm.43.forward``,
``Module.model.layers.0.mlp.LlamaMLP.forward.3``. The tensor task's call counters run on across
steps (only the statistics task clears them, aclgraph_dump.cpp:745-749), so every record also gets
a stable name, its order among the step's calls of the same API (``Aten.mm#13``).

See docs/formats.md §3.7.
"""

from __future__ import annotations

import os
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

from tui_acc.dumps.fs import names_a_file, open_regular, subdirs, unreadable
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Order,
    Problem,
    Role,
    TensorRef,
    float_dtypes_of,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.msprobe.dump import RANK_FOLDER, STEP_FOLDER, odd_copies
from tui_acc.dumps.msprobe.graph_order import (
    ROOT,
    Record,
    logits_record,
    natural_key,
    order_by_data_flow,
    order_like,
    place,
    stable_names,
)
from tui_acc.dumps.msprobe.passes import output_last_dims
from tui_acc.dumps.msprobe.refs import RefBuilder
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

# the same records as eager msprobe dumps: pairs, verdicts and re-dumps as for them
FORMAT: Format = "msprobe"
TENSOR_DIR = "dump_tensor_data"  # msprobe's Const.DUMP_TENSOR_DATA (its docs say tensor_data/)
# the orders a step's calls can be in: all execution orders but the file names'
_STARTED = Order("dump.json order (when each call started)", execution=True)
_TIMED = Order("file times", execution=True)
_UNTIMED = Order(
    "file names (the file times do not hold the call order: a copy made without keeping them, "
    "cp -r or scp without -p? copy dumps with cp -a or rsync -a): calls of different APIs are in "
    "name order, not in the order they ran, and the logits may need --logits-node",
    execution=False,
)
# {scope}.{call}.{io}[.{suffix}].pt (aclgraph_dump.cpp:170-189); the scope is the longest that fits,
# as module paths hold numbers of their own (Module.model.layers.0.mlp.LlamaMLP.3.input.0.pt)
_FILE = re.compile(
    r"^(?P<scope>.+)\.(?P<call>\d+)\.(?P<io>input_kwargs|input|output)(?:\.(?P<suffix>.+))?\.pt$"
)
_MODULE_SCOPE = "Module."


def claims(path: Path) -> bool:
    """Whether ``path`` holds graph mode's rank folders at or below it: folder listings, and the
    first 64 KiB of a dump.json to tell it from an eager one copied without its construct.json."""
    return bool(_rank_dirs(path))


def read(path: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index every step of the graph-mode dump at or below ``path`` now, a token each (``rank``:
    which rank folder, when several).

    Calls are ordered by when each started (statistics) or by file times (tensors); where the times
    were lost, by data flow, which opens the first such step's tensor files. A step without the rank's
    folder or without tensors is a problem.

    Raises:
        DumpError: no graph-mode step below ``path``, none holding a tensor, or ``rank`` out of range.
    """
    policy = LoadPolicy.for_dump(path, follow_links)
    problems: list[Problem] = []
    steps = _steps(path)
    if not steps:
        raise DumpError(
            f"{path}: not an msprobe graph-mode dump (expected step*/rank*|pid*/dump_tensor_data/)"
        )
    if RANK_FOLDER.match(path.name) and _is_graph_rank(path):  # the user picked the rank folder
        names = [path.name]
    else:
        names = sorted({d.name for _, step in steps for d in _rank_dirs_in(step)}, key=rank_sort_key)
    where = path if len(steps) > 1 or not STEP_FOLDER.match(path.name) else path.parent
    chosen, picked, notes = pick_rank(where, [where / n for n in names], rank)
    problems += odd_copies({where, *(step for _, step in steps)})  # step03, rank01: named, not read
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    tree = NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "model", None, 0)})
    stable: dict[str, str] = {}
    logits: str | None = None
    statistics = False
    orders: set[Order] = set()
    flow: tuple[dict[str, int], int, int] | None = None  # stable name -> place, calls placed, calls
    float_dtypes: set[str] = set()
    for number, step in steps:
        folder = step / chosen.name
        if not folder.is_dir():
            problems.append(Problem(str(step), f"no {chosen.name} folder; token {number} is not compared"))
            continue
        if names_a_file(folder / "dump.json"):
            statistics = True
            records, unread = _statistics_records(folder / "dump.json", policy)
            problems += unread
            orders.add(_STARTED)
        else:
            records, order, unread = _tensor_records(folder / TENSOR_DIR)
            problems += unread
            if not order.execution and records:  # times lost: the first such step's data flow
                if flow is None:
                    flow = order_by_data_flow(records, policy) or ({}, 0, 0)
                elif flow[0]:
                    order_like(records, flow[0])
                if flow[0]:
                    order = _data_flow_source(*flow[1:])
            orders.add(order)
        if not records:
            if not any(p.path == str(folder / "dump.json") for p in problems):  # named once
                message = f"no tensors; token {number} (step{number}) is not compared"
                problems.append(Problem(str(folder), message))
            continue
        place(records, tree)
        stable.update(stable_names(records))
        tokens[number] = {r.name: r.refs for r in sorted(records, key=lambda r: r.first)}
        logits = logits or logits_record(records)
        float_dtypes |= float_dtypes_of(ref for r in records for ref in r.refs)
    if not tokens:
        raise DumpError(f"{path}: no step of this graph-mode dump holds any tensor")
    leftover = path / TENSOR_DIR / chosen.name
    if leftover.is_dir() and any(leftover.iterdir()):
        notes.append(f"{leftover}: files of a replay that step() never archived; not compared")
    nesting = (
        "calls sit in the module calls whose file times span them"
        if _TIMED in orders
        else "modules nest by their names, API calls under the model's call"
    )
    notes.append(
        "msprobe graph mode (AclGraphDumper): one step per replay, so a token is a step; "
        f"no construct.json or stack.json is written in this mode (expected): {nesting}; "
        f"order from {' and '.join(sorted(order.source for order in orders))}"
    )
    if logits is None:
        notes.append(
            "the logits could not be told from the dump (no vocabulary-wide output, no lm_head module); "
            "the last call with an output is taken, --logits-node names them"
        )
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=path,
        format=FORMAT,
        tree=tree,
        tokens=dict(sorted(tokens.items())),
        order_source=", ".join(sorted(order.source for order in orders)),
        order_is_execution=all(order.execution for order in orders),
        problems=problems,
        notes=notes,
        statistics_only=statistics,
        ranks=names if len(names) > 1 else [],
        rank=picked,
        stable=stable,
        float_dtypes=frozenset(float_dtypes),
        logits_hint=logits,
    )


# --- finding the steps ----------------------------------------------------------------------------


def _is_graph_rank(folder: Path) -> bool:
    """A rank folder of graph mode: tensors without a dump.json, or a dump.json alone (eager msprobe
    writes construct.json and stack.json beside it, and ``requires_grad`` with every tensor)."""
    if unreadable(folder):  # not known to be graph mode: eager msprobe's reader names it
        return False
    dump_json = folder / "dump.json"
    if os.path.lexists(dump_json) and not names_a_file(dump_json):
        return False  # a folder named dump.json: eager msprobe's reader names it
    if names_a_file(dump_json):
        beside = (folder / "construct.json").exists() or (folder / "stack.json").exists()
        return not beside and not _written_eagerly(dump_json)
    # level debug's saves have a dump_tensor_data/ too, described by a debug.json
    return (folder / TENSOR_DIR).is_dir() and not (folder / "debug.json").is_file()


def _written_eagerly(dump_json: Path) -> bool:
    """Whether its tensors carry ``requires_grad``, as eager msprobe writes them
    (pytorch_processor.py ``_analyze_tensor``) and graph mode never does (aclgraph_dumper.py:749-762):
    an eager dump.json copied without its construct.json stays an eager dump. The first records
    tell, so only the head of the file is read."""
    try:
        with open_regular(dump_json) as handle:
            head = handle.read(1 << 16)
    except OSError:
        return False
    return b'"requires_grad"' in head


def _rank_dirs_in(step: Path) -> list[Path]:
    return [p for p in subdirs(step) if RANK_FOLDER.match(p.name) and _is_graph_rank(p)]


def _steps(path: Path) -> list[tuple[int, Path]]:
    """(N, step folder) of every step at or below ``path`` (dump_path, a step, or a rank folder)."""
    if RANK_FOLDER.match(path.name) and STEP_FOLDER.match(path.parent.name) and _is_graph_rank(path):
        return [(int(path.parent.name[4:]), path.parent)]
    if STEP_FOLDER.match(path.name):
        return [(int(path.name[4:]), path)] if _rank_dirs_in(path) else []
    found = (
        [(int(p.name[4:]), p) for p in subdirs(path) if STEP_FOLDER.match(p.name)] if path.is_dir() else []
    )
    return sorted((n, p) for n, p in found if _rank_dirs_in(p))


def _rank_dirs(path: Path) -> list[Path]:
    return [d for _, step in _steps(path) for d in _rank_dirs_in(step)]


# --- the statistics task ------------------------------------------------------------------------


def _statistics_records(dump_json: Path, policy: LoadPolicy) -> tuple[list[Record], list[Problem]]:
    """The step's calls from its dump.json (task statistics), and what could not be read."""
    try:
        dump = policy.read_json(dump_json)
    except (OSError, ValueError) as exc:
        return [], [Problem(str(dump_json), f"unreadable dump.json ({exc}); this step is not compared")]
    data = dump.get("data") if isinstance(dump, dict) else None
    if not isinstance(data, dict):
        return [], [Problem(str(dump_json), "no 'data' object; this step is not compared")]
    records = []
    builder = RefBuilder(dump_json.parent / "dump_tensor_data", dump_json, null_is_non_finite=True)
    for position, (name, entry) in enumerate(data.items()):
        refs = builder.refs(name, entry)
        if not refs:
            continue
        scope = _scope_of(name)
        records.append(
            Record(
                name,
                scope,
                refs,
                position,
                out_dims=output_last_dims(entry),
                table_rows=_table_rows(scope, entry),
            )
        )
    return records, builder.problems


def _scope_of(name: str) -> str:
    """``Aten.mm.3.forward`` -> ``Aten.mm``; a module's record name without ``.forward.{call}``."""
    parts = name.split(".")
    if name.startswith(_MODULE_SCOPE) and len(parts) > 3 and parts[-2] == "forward":
        return ".".join(parts[:-2])
    if len(parts) > 2 and parts[-1] == "forward" and parts[-2].isdigit():
        return ".".join(parts[:-2])
    return name


def _table_rows(scope: str, entry: Any) -> int | None:
    """``aten.embedding(weight, indices)``: the table is the first argument, its rows the vocabulary."""
    if scope != "Aten.embedding" or not isinstance(entry, dict):
        return None
    args = entry.get("input_args") or []
    table = args[0] if args else None
    shape = table.get("shape") if isinstance(table, dict) else None
    return int(shape[0]) if isinstance(shape, list) and len(shape) == 2 else None


# --- the tensor task ----------------------------------------------------------------------------


def _tensor_records(folder: Path) -> tuple[list[Record], Order, list[Problem]]:
    """The step's calls from its file names, ordered by the files' times where they hold the order;
    the order, and the files skipped."""
    try:
        with os.scandir(folder) as entries:
            listing = [(e.name, e.path, e.stat().st_mtime_ns) for e in entries if e.is_file()]
    except OSError:
        return [], _UNTIMED, []
    problems: list[Problem] = []
    calls: dict[tuple[str, int], list[tuple[str, str, Role, int]]] = {}
    for name, location, mtime in listing:
        match = _FILE.match(name)
        if match is None:
            problems.append(
                Problem(
                    location,
                    "not a graph-mode tensor file name "
                    "({api}.{call}.{input|input_kwargs|output}[.{i}].pt); skipped",
                )
            )
            continue
        io, suffix = match.group("io"), match.group("suffix") or "0"
        role: Role = "output" if io == "output" else "input"
        slot = f"{'output' if io == 'output' else 'input'}.{suffix}"
        calls.setdefault((match.group("scope"), int(match.group("call"))), []).append(
            (slot, location, role, mtime)
        )
    timed = _times_hold_order(calls)
    # positions, not nanoseconds: a float would merge times closer than its precision (~256 ns)
    rank_of = {t: i for i, t in enumerate(sorted({f[3] for files in calls.values() for f in files}))}
    records = []
    for (scope, call), files in calls.items():
        files.sort(key=lambda f: natural_key(f[0]))
        refs = [TensorRef(slot=slot, role=role, location=location) for slot, location, role, _ in files]
        name = f"{scope}.forward.{call}" if scope.startswith(_MODULE_SCOPE) else f"{scope}.{call}.forward"
        if timed:
            first, last = min(f[3] for f in files), max(f[3] for f in files)
            records.append(Record(name, scope, refs, float(rank_of[first]), float(rank_of[last])))
        else:
            records.append(Record(name, scope, refs, 0.0))
    if not timed:
        ordered = sorted(records, key=lambda r: (r.path is None, natural_key(r.scope), int(_call_of(r.name))))
        for position, record in enumerate(ordered):
            record.first = float(position)
    return records, _TIMED if timed else _UNTIMED, problems


def _data_flow_source(placed: int, calls: int) -> Order:
    """Graph mode's order where the times are lost and the data flow told something."""
    if placed == calls:
        return Order(
            f"data flow ({placed} of {calls} calls placed by it and the API counters)", execution=True
        )
    return Order(
        f"data flow and file names ({placed} of {calls} calls placed by data flow and the API counters, "
        "the rest estimated from their counters: copy dumps with cp -a or rsync -a to keep the file times)",
        execution=False,
    )


def _call_of(name: str) -> str:
    parts = name.split(".")
    return parts[-1] if parts[-1].isdigit() else parts[-2]


def _times_hold_order(calls: dict[tuple[str, int], list[tuple[str, str, Role, int]]]) -> bool:
    """Whether file times order the calls: every API's calls start in counter order, each call's
    inputs are written before its outputs, and no two calls of an API share a start time."""
    starts: dict[str, list[tuple[int, int]]] = {}
    for (scope, call), files in calls.items():
        inputs = [f[3] for f in files if f[2] == "input"]
        outputs = [f[3] for f in files if f[2] == "output"]
        if inputs and outputs and max(inputs) > min(outputs):
            return False
        starts.setdefault(scope, []).append((call, min(f[3] for f in files)))
    for pairs in starts.values():
        times = [t for _, t in sorted(pairs)]
        if any(b <= a for a, b in pairwise(times)):
            return False
    return bool(calls)


register(
    DumpReader(
        name="an msprobe graph-mode dump",
        marks="step*/rank*|pid*/dump_tensor_data/ or a dump.json alone",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=50,  # before msprobe's dump.json reader: its dump.json has no construct.json beside it
    )
)
