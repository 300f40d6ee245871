"""Reader for the folders msprobe's ATB probe writes (CANN 8.5 and later; docs/formats.md §2.6).

Layout (msprobe ccsrc/atb_probe/atb_probe.cpp, read at file:line)::

    {ATB_OUTPUT_DIR}/atb_dump_data/                                   :247-254
        data/{dev}_{pid}/{exec}/{id}_{Layer}/{id}_{Op}/{id}_{Kernel}/   the path ATB passes (:1543)
            before/intensor{i}[_{param}].bin    inputs, before the op runs  (:1570-1575)
            after/outtensor{i}[_{param}].bin    outputs, after it ran
            op_param.json                       the operation's parameters  (:1998-2028)
        data/{dev}_{pid}/{exec}/statistic.csv   one row per tensor          (:1703-1717)
        info/layer/{dev}_{pid}/{opName}.json    layer graphs                (:1892-1909)
        info/model/{dev}_{pid}/{Model}_{Stage}.json                         (:2116-2133)

A token is an execution (``{exec}``, the folder ATB numbers per model run, as msit's ``{TID}``;
two model topologies, MindIE's prefill and decode, map folders to tokens as atb/executions.py says).
A node is named as msprobe's compare names it, ``{id}_{name}`` per scope joined by ``/``
(python/msprobe/core/compare/atb_data_compare.py:172-179): the folder names below ``{exec}``,
the same names the ``statistic.csv`` reader gives, so the two kinds of dump pair. Types come
from ``info/`` where it has the node, else from the folder name. Tensors are the ``.bin`` files
(``intensor0.bin`` and ``intensor0_x.bin`` are the same slot); an execution without them
(task ``statistics``) is read from its ``statistic.csv``. Several ``{dev}_{pid}`` folders are
ranks. Only names are read when indexing (and each operation's small ``op_param.json``, to
report one that does not parse); ``.bin`` headers wait until a tensor is compared.
"""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path

from tui_acc.dumps.atb import executions
from tui_acc.dumps.fs import NOT_UTF8, not_utf8, shown, subdir_names, subdirs, unnamed_subdirs
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Node,
    NodeTree,
    Problem,
    Role,
    TensorRef,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.msprobe import atb_csv
from tui_acc.dumps.msprobe.atb_topology import ProbeTopology, read_topology
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT = atb_csv.FORMAT  # the same kind of dump: pairing and re-dump treat both alike
ROOT_DIR = "atb_dump_data"
# {device}_{pid}, or {pid} alone when the device is unknown (atb_probe.cpp:1893-1901)
_DEVICE = re.compile(r"^([0-9]+_)?[0-9]+$")
_NODE_DIR = re.compile(r"^([0-9]+)_(.+)$")
_NUMBER = re.compile(r"^[0-9]+$")
_MAX_DEPTH = 64  # deeper than any ATB graph: a symlink loop, not a model
# only inputs before and outputs after are written (atb_probe.cpp:1570-1575); CANN versions that
# pass the parameter name give intensor0_x.bin (the name is taken as ATB gives it, :1688)
_TENSOR_FILE: dict[str, tuple[re.Pattern[str], str, Role]] = {
    "before": (re.compile(r"^intensor([0-9]+)(?:_[^.]+)?\.bin$"), "intensor", "input"),
    "after": (re.compile(r"^outtensor([0-9]+)(?:_[^.]+)?\.bin$"), "outtensor", "output"),
}
PARAM_FILE = "op_param.json"


def claims(path: Path) -> bool:
    """``{out}``, ``atb_dump_data/``, ``data/``, ``data/{dev}_{pid}`` or one ``{exec}`` (names only)."""
    if (path / ROOT_DIR / "data").is_dir() or (path.name == ROOT_DIR and (path / "data").is_dir()):
        return True
    if path.name == "data" and path.parent.name == ROOT_DIR:
        return True
    if _DEVICE.match(path.name) and path.parent.name == "data" and path.parent.parent.name == ROOT_DIR:
        return path.is_dir()
    # one {exec}/ of data/{dev}_{pid}/ below atb_dump_data/ (an msit ATB dump kept in a folder named
    # data/ has the same shape below it: the atb_dump_data/ above tells them apart)
    execution = _NUMBER.match(path.name) is not None and path.parent.parent.name == "data"
    below_root = path.parent.parent.parent.name == ROOT_DIR
    return execution and below_root and _DEVICE.match(path.parent.name) is not None


def read(
    path: Path, token_offset: int | None = None, rank: int | None = None, follow_links: bool = False
) -> DumpIndex:
    """Index the ATB probe dump at or below ``path``: each execution folder a token (MindIE's
    warm-up left out; ``token_offset``: token = folder - offset), each operation a node.

    Reads the info/ topology and walks the first token's execution now; every other execution is
    walked when its token is first asked for (``tokens_walked_lazily``), and what it could not read
    is then added to the index's ``problems``. An execution with neither tensor files nor
    statistic.csv rows is a problem, not an error.

    Args:
        path: the output folder, ``atb_dump_data/``, its ``data/``, a ``{device}_{pid}`` folder or
            one execution folder (only that execution is read).
        token_offset: overrides MindIE's automatic alignment.
        rank: which ``{device}_{pid}`` folder, when several (default: the first, noted).
        follow_links: whether its files may lead out of it.

    Raises:
        DumpError: no device folder, no execution folder holding data, or none left after
            ``token_offset``.
    """
    atb_root, device_dir, only_exec, notes, ranks, picked = _locate(path, rank)
    # the whole atb_dump_data (its info/ topology lies above the device folder a user may pass)
    policy = LoadPolicy.for_dump(atb_root if path.is_relative_to(atb_root) else path, follow_links)
    topology, problems = read_topology(atb_root / "info", device_dir.name, policy)
    root_name = topology.models.models[0][0] if topology.models.models else "model"
    tree = NodeTree(root=root_name, nodes={root_name: Node(root_name, "model", None, 0)})
    folders: dict[int, Path] = {}
    for name, folder in subdir_names(str(device_dir)):
        if not _NUMBER.match(name) or (only_exec is not None and int(name) != only_exec):
            continue
        held = subdirs(Path(folder)) or unnamed_subdirs(Path(folder))  # the latter named by the walk
        if not held and not (Path(folder) / atb_csv.FILE).is_file():
            problems.append(Problem(folder, "an execution folder without any operation or statistic.csv"))
            continue
        folders[int(name)] = Path(folder)
    if not folders:
        raise DumpError(f"{device_dir}: no execution folder (0, 1, 2, ...) holds any data")
    folder_of, said = executions.token_folders(folders, topology.models, token_offset)
    notes += said
    if not folder_of:
        raise DumpError(f"{device_dir}: its execution folders hold no token (all below --token-offset)")
    if topology.models.mindie and token_offset is None:
        notes.append(
            f"{len(topology.models.models)} model topologies (prefill and decode): execution 0 is the "
            "warm-up, execution 1 holds tokens 0 and 1, execution k is token k"
        )

    def walk(folder_id: int, into: NodeTree) -> executions.FolderTokens:
        nodes, unread = _execution(folders[folder_id], root_name, into, topology, policy)
        problems.extend(unread)
        return dict(executions.tokens_of_folder(folder_id, nodes, topology.models, token_offset))

    # walked as msit's ATB folders are: the first token's execution now, the others when asked
    tokens, first = executions.tokens_walked_lazily(folder_of, tree, walk)
    first_refs = [r for nodes in first.values() for refs in nodes.values() for r in refs]
    statistics_only = bool(first_refs) and not any(r.has_data for r in first_refs)
    if statistics_only:
        notes.append("msprobe ATB probe dump: statistics only (statistic.csv: Max/Min/Mean/Norm)")

    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=device_dir,
        format=FORMAT,
        tree=tree,
        tokens=tokens,
        order_source="op ids",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        statistics_only=statistics_only,
        ranks=ranks,
        rank=picked,
        exec_counts=folder_of,
    )


def _locate(path: Path, rank: int | None) -> tuple[Path, Path, int | None, list[str], list[str], int | None]:
    """(atb_dump_data, {dev}_{pid} folder, single execution or None, notes, rank names, rank read)."""
    notes: list[str] = []
    if (path / ROOT_DIR).is_dir():
        path = path / ROOT_DIR
    if _NUMBER.match(path.name) and _DEVICE.match(path.parent.name):
        notes.append(f"only execution {path.name} of {path.parent} is read")
        return path.parent.parent.parent, path.parent, int(path.name), notes, [], None
    if _DEVICE.match(path.name) and path.parent.name == "data":
        return path.parent.parent, path, None, notes, [], None
    atb_root = path.parent if path.name == "data" else path
    data = atb_root / "data"
    devices = [p for p in subdirs(data) if _DEVICE.match(p.name)]
    if not devices:
        raise DumpError(f"{data}: no {{device}}_{{pid}} folder; not an msprobe ATB probe dump")
    device_dir, picked, said = pick_rank(data, devices, rank)
    return (
        atb_root,
        device_dir,
        None,
        notes + said,
        sorted((p.name for p in devices), key=rank_sort_key),
        picked,
    )


def _execution(
    folder: Path,
    root: str,
    tree: NodeTree,
    topology: ProbeTopology,
    policy: LoadPolicy,
) -> tuple[dict[str, list[TensorRef]], list[Problem]]:
    """One execution's nodes: tensor files where there are any, else its statistic.csv rows; and
    what could not be read."""
    nodes: dict[str, list[TensorRef]] = {}
    types: dict[str, str] = {}
    problems = _walk(folder, "", (), root, tree, nodes, types, topology, policy)
    if any(refs for refs in nodes.values()):
        return nodes, problems
    csv_path = folder / atb_csv.FILE
    if csv_path.is_file():
        try:
            rows, unread = atb_csv.read_rows(csv_path, policy)
            problems += unread
        except DumpError as exc:
            problems.append(Problem(str(csv_path), str(exc).removeprefix(f"{csv_path}: ")))
            rows = []
        for _device, _count, chain, op_type, ref in rows:
            if chain[-1] not in tree.nodes:
                _under(tree, root, chain, op_type, types, topology)
            nodes.setdefault(chain[-1], []).append(ref)
    if not any(refs for refs in nodes.values()):
        problems.append(Problem(str(folder), "no tensor files and no statistic.csv rows; token not compared"))
    return nodes, problems


def _under(
    tree: NodeTree, root: str, chain: list[str], op_type: str, types: dict[str, str], topology: ProbeTopology
) -> None:
    """Add a node only statistic.csv names (and its scopes), typed from info/ where it has them."""
    ids: tuple[int, ...] = ()
    for name in chain:
        head = name.rsplit("/", 1)[-1].split("_", 1)[0]
        ids = (*ids, int(head)) if _NUMBER.match(head) else ids
        if name not in types and ids in topology.types:
            types[name] = topology.types[ids]
    atb_csv.add_chain(tree, chain, op_type, types, root)


def _walk(
    folder: Path,
    prefix: str,
    ids: tuple[int, ...],
    parent: str,
    tree: NodeTree,
    nodes: dict[str, list[TensorRef]],
    types: dict[str, str],
    topology: ProbeTopology,
    policy: LoadPolicy,
) -> list[Problem]:
    """The operations below ``folder`` added to ``tree``, their tensors to ``nodes`` and types to
    ``types``; returns what could not be read."""
    if len(ids) >= _MAX_DEPTH:
        return [Problem(str(folder), f"nested over {_MAX_DEPTH} deep (a link loop?); not read")]
    unnamed: list[str] = []  # operation folders whose names are not UTF-8: named, not read
    children = []
    for sub in subdirs(folder, unnamed):
        match = _NODE_DIR.match(sub.name)
        if match and sub.name not in ("before", "after"):
            children.append((int(match.group(1)), match.group(2), sub))
    problems = [Problem(path, NOT_UTF8) for path in unnamed]
    for op_id, op_name, sub in sorted(children):
        name = f"{prefix}{sub.name}"
        chain = (*ids, op_id)
        if name not in tree.nodes:
            kind = topology.types.get(chain, op_name)
            tree.nodes[name] = Node(name, kind, parent, tree.nodes[parent].depth + 1)
            # inserted in place (the list is kept sorted): a sort per insert was quadratic
            bisect.insort(tree.nodes[parent].children, name, key=_id_of)
        types[name] = tree.nodes[name].type
        nodes[name], unread = _tensors(sub)
        problems += unread
        problems += _check_params(sub / PARAM_FILE, policy)
        problems += _walk(sub, f"{name}/", chain, name, tree, nodes, types, topology, policy)
    return problems


def _tensors(node_dir: Path) -> tuple[list[TensorRef], list[Problem]]:
    """An operation's tensor files (before/ and after/), and those that could not be used."""
    refs: dict[str, TensorRef] = {}
    problems: list[Problem] = []
    for side, (pattern, kind, role) in _TENSOR_FILE.items():
        part = node_dir / side
        if not part.is_dir():
            continue
        try:
            with os.scandir(part) as scanned:
                entries = sorted(scanned, key=lambda e: e.name)
        except OSError as exc:
            problems.append(Problem(str(part), f"cannot list ({exc.strerror or exc})"))
            continue
        for entry in entries:
            if not entry.name.endswith(".bin"):
                continue
            if not_utf8(entry.name):
                problems.append(Problem(shown(entry.path), NOT_UTF8))
                continue
            match = pattern.match(entry.name)
            if match is None:
                problems.append(Problem(entry.path, "unexpected tensor file name; not compared"))
                continue
            slot = f"{kind}{int(match.group(1))}"
            if slot in refs:
                problems.append(Problem(entry.path, f"a second file for {slot}; not compared"))
                continue
            refs[slot] = TensorRef(slot=slot, role=role, location=entry.path)
    return sorted(refs.values(), key=lambda r: (r.role != "input", int(re.sub(r"\D", "", r.slot)))), problems


def _check_params(file: Path, policy: LoadPolicy) -> list[Problem]:
    """op_param.json holds only the operation's parameters (no name, no type): checked, not used."""
    if not file.is_file():
        return []
    try:
        policy.read_json(file, parse_constant=lambda _c: None)
    except (OSError, ValueError) as exc:
        return [Problem(str(file), f"unreadable operation parameters ({exc})")]
    return []


def _id_of(name: str) -> tuple[int, str]:
    head = name.rsplit("/", 1)[-1].split("_", 1)[0]
    return (int(head), name) if _NUMBER.match(head) else (1 << 30, name)


register(
    DumpReader(
        name="msprobe's ATB probe dump",
        marks="atb_dump_data/data/{device}_{pid}/",
        claims=claims,
        read=lambda root, options: read(
            root, token_offset=options.token_offset, rank=options.rank, follow_links=options.follow_links
        ),
        precedence=20,  # before msit's: below atb_dump_data/, its folders have msit ATB's shape
    )
)
