"""Reader for TorchAir's GE dump: the graph run by the GE graph engine, one file per op and run
(docs/formats.md §7.2).

msprobe's ``set_ge_dump_config`` (TorchAir's ``dump_config``) writes, below ``msprobe_ge_dump/``::

    dynamo_original_graph_{id}_rank_{r}_pid_{pid}_ts_{time}.txt       the graph TorchAir built (graph_text.py)
    worldsize{W}_global_rank{R}/{time}/{device}/{model}/{model_id}/{data_index}/
        {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}       one op's inputs and outputs (ge_file.py)
        mapping.csv                                                 hashed names of files named too long

torch_npu 7.1.0 and older write no ``worldsize…`` level (several devices are then several ranks).
Each ``{data_index}`` folder is one run of one graph (a token: runs.py). The tree is the model, one
node per graph (its model folder), and the ops in the order their files were written (the
timestamp); a node is ``{graph}/{op_name}``, its stable name the op's. Opening reads one file name
per run folder (runs do not overlap in time: one time orders a run) and lists each graph's first
run (the tree); a token's files are listed, and their headers read (tensor counts, not data), when
the token is first asked for, off the UI thread; a tensor is a member of its file
(``TensorRef.member``).
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import replace
from pathlib import Path

from tui_acc.dumps.fs import NOT_UTF8, subdir_names, text_names
from tui_acc.dumps.model import DumpError, DumpIndex, Format, Problem, TensorRef, pick_rank
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register
from tui_acc.dumps.torchair.ge_stats import is_stats_file, read_stats
from tui_acc.dumps.torchair.graph_text import is_graph_file
from tui_acc.dumps.torchair.runs import Run, add_ops, first_runs, graph_tree, numbered, one_time
from tui_acc.lazy import LazyMapping

FORMAT: Format = "torchair-ge"
ROOT = "model"
MAPPING = "mapping.csv"
_WRAPPERS = ("msprobe_ge_dump", "msit_ge_dump")
_RANK_FOLDER = re.compile(r"^worldsize(\d+)_global_rank(\d+)$")
_DEPTH = 5  # {time}/{device}/{model}/{model_id}/{data_index} below a rank folder


def claims(root: Path) -> bool:
    """Whether ``root`` holds a GE dump: a TorchAir graph text beside its dump folders (names only)."""
    return _base(root) is not None


def read(root: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index the GE dump at ``root``; DumpError where it holds none."""
    base = _base(root)
    if base is None:
        raise DumpError(
            f"{root}: not a TorchAir GE dump (expected dynamo_original_graph_*.txt beside "
            "worldsize*_global_rank*/ or the dump's time folders)"
        )
    policy = LoadPolicy.for_dump(root, follow_links)
    rank_folders = [path for name, path in subdir_names(str(base)) if _RANK_FOLDER.match(name)]
    unnamed: list[str] = []  # folders whose names are not UTF-8: named, not read
    notes: list[str] = []
    chosen: int | None = None
    if rank_folders:
        folder, chosen, notes = pick_rank(base, [Path(p) for p in rank_folders], rank)
        leaves = _leaves(str(folder), _DEPTH, unnamed)
    else:  # torch_npu <= 7.1.0: {time}/{device}/...; several devices are several ranks
        folder = base
        leaves = _leaves(str(base), _DEPTH, unnamed)
        # {time}/{device}/{model}/{model_id}/{data_index}: the device two levels above the leaf's model
        devices = sorted({Path(leaf).parents[2].name for leaf in leaves})
        if len(devices) > 1:
            device, chosen, notes = pick_rank(base, [Path(d) for d in devices], rank)
            leaves = [leaf for leaf in leaves if Path(leaf).parents[2].name == device.name]
    problems = [Problem(path, NOT_UTF8) for path in unnamed]
    runs = _runs(leaves, policy, problems)
    if not runs:
        raise DumpError(f"{folder}: a GE dump folder without a dump file in any data_index folder")
    index = _indexed(root, Path(folder), numbered(runs), policy, problems)
    index.notes += notes
    index.rank = chosen
    index.ranks = sorted(Path(p).name for p in rank_folders) if len(rank_folders) > 1 else []
    index.policy = policy
    return index


def graph_files(index: DumpIndex) -> list[Path]:
    """The graph texts beside the GE dump ``index`` read: its rank's, where their names say."""
    base = _base(index.root)
    if base is None:
        return []
    found = sorted((p for p in base.iterdir() if is_graph_file(p.name)), key=lambda p: p.name)
    if index.rank is None:
        return found
    own = [p for p in found if f"_rank_{index.rank}_" in p.name]
    return own or found


def _indexed(
    root: Path, folder: Path, runs: dict[int, Run], policy: LoadPolicy, problems: list[Problem]
) -> DumpIndex:
    """The tree from each graph's first run (a graph runs the same ops every time); every other run's
    files are listed when its token is first asked for, and an op only it ran is added then."""
    tree = graph_tree(ROOT, runs)
    stable: dict[str, str] = {}
    listed: dict[int, tuple[str, dict[str, str]]] = {}  # token -> (its folder, node -> its file's name)
    notes: list[str] = []  # the index's: a token's statistics files may add one when it is listed

    def files(token: int) -> tuple[str, dict[str, str]]:
        # once per token: at opening (each graph's first run), else from the tokens' LazyMapping,
        # which builds one token at a time
        if token not in listed:
            run = _listed(runs[token], policy, problems)
            found = _ops_of(run, problems)
            ran = sorted(found, key=lambda n: (found[n][0], n))
            add_ops(tree, stable, run.graph, ((n, found[n][2], n.partition("/")[2]) for n in ran))
            listed[token] = (run.folder, {node: found[node][1] for node in found})
        return listed[token]

    for token in first_runs(runs).values():  # each graph's first run now: it tells the tree
        files(token)

    def tensors(token: int) -> dict[str, list[TensorRef]]:
        folder, names = files(token)
        return _tensors({node: f"{folder}/{name}" for node, name in names.items()}, policy, problems, notes)

    return DumpIndex(
        root=root,
        data_dir=folder,
        format=FORMAT,
        tree=tree,
        tokens=LazyMapping(sorted(runs), tensors),
        order_source="file times",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        stable=stable,
        runs={token: (run.graph, run.step) for token, run in runs.items()},
    )


def _ops_of(run: Run, problems: list[Problem]) -> dict[str, tuple[int, str, str]]:
    """A listed run's ops: node -> (the time its file names, the file's name, the op's type); a name
    that is no GE dump file's, and ops dumped twice, said."""
    found: dict[str, tuple[int, str, str]] = {}
    duplicates = 0
    for name, parsed in zip(run.names, run.parsed, strict=True):
        if parsed is None:
            problems.append(Problem(f"{run.folder}/{name}", _NOT_GE_NAME))
            continue
        op_type, op_name, written = parsed
        node = f"{run.graph}/{op_name}"
        if node in found:  # the same op twice in one run: the later file is the one kept
            duplicates += 1
            if written < found[node][0]:
                continue
        found[node] = (written, name, op_type)
    if duplicates:
        said = f"{duplicates} ops dumped twice in this run; the later file of each is read"
        problems.append(Problem(run.folder, said))
    return found


_NOT_GE_NAME = "not a GE dump file name ({op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}); skipped"


# {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}: (op type, op name, time); an op name may hold
# dots (msprobe's reading: everything between the type and the last three parts), the last three
# are ASCII digits; a statistics file (ge_stats.py) adds ``.csv``
_FILE_NAME = re.compile(r"([^.]+)\.(.*)\.[0-9]+\.[0-9]+\.([0-9]+)(?:\.csv)?")


def _time_of(name: str) -> int | None:
    """The time a GE dump file's name says, or None for a name that is no GE dump file's."""
    found = _FILE_NAME.fullmatch(name)
    return int(found[3][:20]) if found else None


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def _tensors(
    files: dict[str, str], policy: LoadPolicy, problems: list[Problem], notes: list[str]
) -> dict[str, list[TensorRef]]:
    """Each op's inputs and outputs, from its file's header (buffers and workspaces are not compared),
    or its statistics file's rows (ge_stats.py)."""
    from tui_acc.dumps.torchair.ge_file import GeDumpError, read_file_header

    found: dict[str, list[TensorRef]] = {}
    for node, path in files.items():
        if is_stats_file(path):
            found[node] = read_stats(path, policy, problems, notes)
            continue
        try:
            header = read_file_header(Path(path), policy)
        except GeDumpError as exc:
            problems.append(Problem(path, str(exc).removeprefix(f"{path}: ")))
            continue
        except OSError as exc:
            problems.append(Problem(path, f"cannot read ({exc.strerror or exc})"))
            continue
        refs = []
        for tensor in header.tensors:
            if tensor.role in ("input", "output"):
                slot = f"{tensor.role}.{tensor.index}"
                refs.append(TensorRef(slot, tensor.role, path, member=slot))  # type: ignore[arg-type]
        found[node] = refs
    return found


def _runs(leaves: list[str], policy: LoadPolicy, problems: list[Problem]) -> list[Run]:
    """One run per data_index folder that holds files, labelled by its model folder (and model id
    where a model has several). Its time is read from one file's name: a device runs one graph at a
    time, so runs do not overlap and any one time orders them; the other names are read when the
    run is first asked for (``_listed``). A folder whose first names say no time (hashed names,
    mapping.csv) or that cannot be read is listed whole now."""
    ids: dict[str, set[str]] = {}
    for leaf in leaves:
        model_folder = Path(leaf).parent
        ids.setdefault(model_folder.parent.name, set()).add(model_folder.name)
    runs = []
    seen: set[tuple[str, int]] = set()
    for leaf in sorted(leaves):
        path = Path(leaf)
        model_id, model = path.parent.name, path.parent.parent.name
        graph = model if len(ids[model]) == 1 else f"{model}_{model_id}"
        graph = f"{graph}_" if graph == ROOT else graph  # a model folder named like the tree's root
        if (graph, int(path.name)) in seen:
            said = f"{graph} data_index {path.name} was dumped twice; the first is read"
            problems.append(Problem(leaf, said))
            continue
        seen.add((graph, int(path.name)))
        held, time = one_time(leaf, _time_of)
        run = Run(graph, int(path.name), leaf, time, ())
        if time is None and held:
            run = _listed(run, policy, problems)
        if run.first is not None or run.names:
            runs.append(run)
    return runs


def _listed(run: Run, policy: LoadPolicy, problems: list[Problem]) -> Run:
    """``run`` with its files' names read: hashed ones resolved through mapping.csv, each parsed."""
    names, aliases = _names(run.folder, policy, problems)
    match = _FILE_NAME.fullmatch  # a hundred thousand names: no call per name but the match
    originals = [aliases.get(name, name) for name in names] if aliases else names
    parsed = tuple(
        (found[1], found[2], int(found[3][:20])) if (found := match(name)) else None for name in originals
    )
    if None in parsed:  # a folder among the files is none of them (only such names are looked at)
        kept = [(n, p) for n, p in zip(names, parsed, strict=True) if p or not Path(run.folder, n).is_dir()]
        names, parsed = [n for n, _ in kept], tuple(p for _, p in kept)
    times = [found[2] for found in parsed if found is not None]
    first = run.first if run.first is not None else min(times) if times else None
    return replace(run, first=first, names=tuple(names), aliases=aliases, parsed=parsed)


def _names(folder: str, policy: LoadPolicy, problems: list[Problem]) -> tuple[list[str], dict[str, str]]:
    """The dump files' names in ``folder``, and what the hashed ones stand for (mapping.csv: a file
    keeps its hashed name on disk; the index reads the original name, the path keeps the hash)."""
    try:
        listed = os.listdir(folder)  # noqa: PTH208 (names, not a Path per file: 100,000 of them)
    except OSError as exc:
        problems.append(Problem(folder, f"cannot list ({exc.strerror or exc})"))
        return [], {}
    unnamed: list[str] = []
    names = sorted(text_names(listed, folder, unnamed))
    problems += [Problem(path, NOT_UTF8) for path in unnamed]

    if MAPPING not in names:
        return names, {}
    names.remove(MAPPING)
    return names, _mapping(Path(folder) / MAPPING, policy, problems)


def _mapping(path: Path, policy: LoadPolicy, problems: list[Problem]) -> dict[str, str]:
    try:
        rows = list(csv.reader(policy.read_text(path).splitlines()))
    except (OSError, ValueError, csv.Error) as exc:
        problems.append(Problem(str(path), f"cannot read ({exc}); hashed file names left as they are"))
        return {}
    return {row[0].strip(): row[1].strip() for row in rows if len(row) >= 2 and row[0].strip().isdigit()}


def _leaves(folder: str, depth: int, unnamed: list[str]) -> list[str]:
    """The data_index folders ``depth`` levels below ``folder`` (digit names at the last two levels);
    ``unnamed`` takes those on the way whose names are not UTF-8."""
    level = [(folder, "")]
    for _ in range(depth):
        level = [(path, name) for parent, _ in level for name, path in subdir_names(parent, unnamed)]
    return [
        path for path, name in level if _digits(name) and len(name) < 12 and _digits(Path(path).parent.name)
    ]


def _base(root: Path) -> Path | None:
    """The folder holding the graph texts and the dump folders: ``root`` or its msprobe_ge_dump/."""
    for base in (root, *(root / name for name in _WRAPPERS)):
        try:
            with os.scandir(base) as entries:
                if any(is_graph_file(e.name) for e in entries):
                    return base
        except OSError:
            continue
    return None


register(
    DumpReader(
        name="a TorchAir GE dump",
        marks="dynamo_original_graph_*.txt beside worldsize*_global_rank*/",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=80,
        pick="msprobe_ge_dump",
    )
)
