"""Reader for msit torch dumps (``msit_llm`` ``DumpConfig`` + ``register_hook``).

Layout (docs/formats.md §1.1)::

    {dump_path}/msit_dump_{ts}/torch_tensors/{device}_{pid}/model_tree.json
    {dump_path}/msit_dump_{ts}/torch_tensors/{device}_{pid}/{TID}/{module}/input_{i}.pth | output*.pth

Only names, directory listings and file times are read here; where the times are lost, one token's
zip directories too (``data_flow_order``: which module's output another's input is).
"""

from __future__ import annotations

import csv
import functools
import os
import re
from pathlib import Path

from tui_acc.dumps.data_flow_order import order_by_data_flow
from tui_acc.dumps.fs import (
    NOT_UTF8,
    folder_problem,
    names_a_file,
    numbered_subdirs,
    shown,
    subdir_names,
    subdirs,
    unnamed_subdirs,
)
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Order,
    Problem,
    Role,
    Stats,
    TensorRef,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register
from tui_acc.lazy import LazyMapping

FORMAT: Format = "msit-torch"
STATS_FORMAT: Format = "msit-stats"
MODEL_TREE = "model_tree.json"
_TENSOR_FILE = re.compile(r"^(input_\d+|output(?:_\d+)*)\.pth$")
_DUMP_DIR = re.compile(r"^msit_dump_\d{8}_\d{6}$")
_STATS_FILE = "statistics.csv"


def claims(path: Path) -> bool:
    """Whether ``path`` carries the marks of an msit torch dump (cheap: names only)."""
    if names_a_file(path / MODEL_TREE) or (path.name.isdigit() and names_a_file(path.parent / MODEL_TREE)):
        return True
    if path.name == "torch_tensors" or (path / "torch_tensors").is_dir():
        return True
    return any(_DUMP_DIR.match(p.name) and (p / "torch_tensors").is_dir() for p in subdirs(path))


def read(path: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index the msit torch dump at or below ``path`` (``rank``: which device folder, when several)."""
    data_dir, only_token, notes, ranks, rank = _locate(path, rank)
    policy = LoadPolicy.for_dump(path, follow_links)
    problems: list[Problem] = []
    folders = {}
    found, skipped = numbered_subdirs(str(data_dir))
    problems += [Problem(folder, why) for folder, why in skipped]
    for number, name, folder in found:
        if only_token is None or number == only_token:
            blocked = folder_problem(folder, f"token {name} is not compared")
            if blocked:  # named, and the token left to the other side alone, not taken for empty
                problems.append(Problem(folder, blocked))
            else:
                folders[number] = folder
    # Only the first token with files is listed now: it tells the tree, the order and the kind of
    # dump; every other token is listed when it is first compared or opened (LazyMapping).
    sample: dict[int, dict[str, list[TensorRef]]] = {}
    for token in sorted(folders):
        nodes, unread = _index_token(folders[token], policy)
        problems += unread
        sample[token] = nodes
        if any(nodes.values()):
            break
    if not any(refs for nodes in sample.values() for refs in nodes.values()):
        unlisted = folder_problem(data_dir, "not read")
        if unlisted or problems:  # nothing else to compare: the first folder that could not be read
            raise DumpError(
                f"{data_dir}: {unlisted}" if unlisted else f"{problems[0].path}: {problems[0].message}"
            )
        raise DumpError(
            f"{data_dir}: no token folders (0, 1, 2, ...) with .pth tensor files or statistics.csv were found"
        )
    tree, unread = _read_tree(data_dir / MODEL_TREE, policy)
    problems += unread
    _add_unlisted_nodes(tree, sample)
    order = _order_by_file_times(tree, sample)
    statistics_only = all(
        not ref.has_data for nodes in sample.values() for refs in nodes.values() for ref in refs
    )
    if not order.execution and not statistics_only:  # the times are lost: the data tells
        order = order_by_data_flow(tree, max(sample.values(), key=len), policy) or order

    def load(token: int) -> dict[str, list[TensorRef]]:
        if token in sample:
            return sample[token]
        nodes, unread = _index_token(folders[token], policy)
        problems.extend(unread)  # the index's own list: a token listed late adds what it could not read
        if any(name not in tree.nodes for name in nodes):  # unlisted folders this token alone has
            grown = tree.copy()
            _add_unlisted_nodes(grown, {token: nodes})
            tree.adopt(grown)  # else pairing, which walks the tree, would never see them
        return nodes

    tokens = LazyMapping(sorted(folders), load)
    if statistics_only:
        notes.append(
            "msit statistics dump (dump_statistics_mode=1): Max/Min/Mean/L2Norm only, no tensor data"
        )
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=data_dir,
        format=STATS_FORMAT if statistics_only else FORMAT,
        statistics_only=statistics_only,
        ranks=ranks,
        rank=rank,
        tree=tree,
        tokens=tokens,
        order_source=order.source,
        order_is_execution=order.execution,
        problems=problems,
        notes=notes,
    )


# --- finding the data ---------------------------------------------------------------------------


def _locate(path: Path, rank: int | None) -> tuple[Path, int | None, list[str], list[str], int | None]:
    """Find the ``{device}_{pid}`` folder from whatever folder a user naturally passes.

    Returns (folder, a single token or None, notes, every rank folder's name, the rank read).
    """
    if not path.exists():
        raise DumpError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise DumpError(f"{path}: expected a dump directory, found a file")
    if names_a_file(path / MODEL_TREE):
        return path, None, [], [], None
    if path.name.isdigit() and names_a_file(path.parent / MODEL_TREE):
        return path.parent, int(path.name), [f"only token {path.name} of {path.parent} is read"], [], None
    notes: list[str] = []
    search = path
    if not (path.name == "torch_tensors" or (path / "torch_tensors").is_dir()):
        dumps = sorted(p for p in subdirs(path) if _DUMP_DIR.match(p.name))
        if not dumps:
            raise DumpError(
                f"{path}: not an msit torch dump (expected {MODEL_TREE}, a torch_tensors/ folder, "
                "or msit_dump_YYYYMMDD_HHMMSS/ folders below it)"
            )
        search = dumps[-1]
        if len(dumps) > 1:
            notes.append(f"{path} holds {len(dumps)} msit_dump_* folders; reading the newest, {search.name}")
    if search.name != "torch_tensors":
        search = search / "torch_tensors"
    # any entry so named marks a device folder: one that is a folder itself is then named, and the
    # tree rebuilt from the module folders, as for a damaged file
    devices = [p for p in subdirs(search) if os.path.lexists(p / MODEL_TREE)]
    # a device folder whose name is not UTF-8: named, not read (nothing with its name reaches a frame)
    unnamed = [shown(str(p)) for p in unnamed_subdirs(search) if os.path.lexists(p / MODEL_TREE)]
    notes += [f"{folder}: {NOT_UTF8}" for folder in unnamed]
    if not devices and unnamed:
        raise DumpError(f"{unnamed[0]}: {NOT_UTF8}")
    if not devices:
        blocked = next(((p, m) for p in subdirs(search) if (m := folder_problem(p, "not read"))), None)
        if blocked:  # a rank folder that cannot be read looks like one without a model_tree.json
            raise DumpError(f"{blocked[0]}: {blocked[1]}")
        raise DumpError(f"{search}: no {{device}}_{{pid}} folder with a {MODEL_TREE} was found")
    chosen, picked, said = pick_rank(search, devices, rank)
    return chosen, None, notes + said, sorted((p.name for p in devices), key=rank_sort_key), picked


# --- token folders ------------------------------------------------------------------------------


def _index_token(folder: str, policy: LoadPolicy) -> tuple[dict[str, list[TensorRef]], list[Problem]]:
    """A token folder's modules and their tensors, and what could not be read."""
    nodes: dict[str, list[TensorRef]] = {}
    problems: list[Problem] = []
    skipped: list[str] = []  # module folders whose names are not UTF-8
    for name, node_dir in subdir_names(folder, skipped):
        nodes[name], unread = _index_node(node_dir, policy)
        problems += unread
    return nodes, problems + [Problem(path, NOT_UTF8) for path in skipped]


def _index_node(node_dir: str, policy: LoadPolicy) -> tuple[list[TensorRef], list[Problem]]:
    """Tensor files of a module (its statistics.csv rows when it has no tensor files: mode 1), and
    what could not be read."""
    refs: list[TensorRef] = []
    has_stats = False
    try:
        with os.scandir(node_dir) as scanned:
            entries = list(scanned)
    except OSError as exc:  # a folder without read permission: named, not taken for an empty one
        return refs, [Problem(node_dir, f"cannot list the folder ({exc.strerror or exc}); not compared")]
    problems: list[Problem] = []
    for entry in entries:
        match = _TENSOR_FILE.match(entry.name)
        if match:
            slot = match.group(1)
            role: Role = "input" if slot.startswith("input") else "output"
            refs.append(TensorRef(slot=slot, role=role, location=entry.path))
        elif entry.name == _STATS_FILE:
            has_stats = True
        elif entry.name.endswith(".pth"):
            problems.append(Problem(entry.path, "unexpected tensor file name; not compared"))
    if not refs and has_stats:
        refs, unread = _statistics_refs(Path(node_dir) / _STATS_FILE, policy)
        problems += unread
    refs.sort(key=lambda r: _slot_key(r.slot))
    return refs, problems


def _statistics_refs(path: Path, policy: LoadPolicy) -> tuple[list[TensorRef], list[Problem]]:
    """The rows of msit's statistics.csv (InputOutput, Index, DataType, Shape, Max, Min, Mean, L2Norm),
    and the rows (or the file) that could not be read."""
    try:
        with policy.open(path, "r", newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        return [], [Problem(str(path), f"unreadable statistics ({exc})")]
    outputs = sum(1 for r in rows if r.get("InputOutput") == "Output")
    refs = []
    problems: list[Problem] = []
    for number, row in enumerate(rows, start=2):
        try:
            index = int(row["Index"])
            kind = row["InputOutput"]
            if kind not in ("Input", "Output"):
                raise ValueError(f"InputOutput is {kind!r}")
            # a lone output is output.pth in a tensor dump, so that the two kinds pair by name
            slot = f"input_{index}" if kind == "Input" else ("output" if outputs == 1 else f"output_{index}")
            stats = Stats(
                _float(row["Max"]),
                _float(row["Min"]),
                _float(row["Mean"]),
                _float(row["L2Norm"]),
                row["DataType"].removeprefix("torch.") or None,
                tuple(int(d) for d in re.findall(r"\d+", row["Shape"])),
            )
        except (KeyError, ValueError, TypeError) as exc:
            problems.append(Problem(str(path), f"line {number}: not a statistics row ({exc})"))
            continue
        refs.append(
            TensorRef(
                slot=slot, role="input" if kind == "Input" else "output", location=str(path), stats=stats
            )
        )
    return refs, problems


def _float(value: str | None) -> float | None:
    if value in (None, "", "None", "N/A"):
        return None
    return float(value)


@functools.lru_cache(maxsize=4096)  # a handful of slot names, seen once per file
def _slot_key(slot: str) -> tuple[int, tuple[int, ...]]:
    """Inputs before outputs, then numerically (input_2 before input_10)."""
    role, _, rest = slot.partition("_")
    numbers = tuple(int(x) for x in rest.split("_")) if rest else ()
    return (0 if role == "input" else 1, numbers)


# --- the module tree ----------------------------------------------------------------------------


def _read_tree(path: Path, policy: LoadPolicy) -> tuple[NodeTree, list[Problem]]:
    """model_tree.json's module tree; where it cannot be read, a bare root and the problem."""
    try:
        raw = policy.read_json(path)
        return _tree_from_json(raw), []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        bare = NodeTree(root="root", nodes={"root": Node("root", "?", None, 0)})
        return bare, [
            Problem(str(path), f"unreadable module tree ({reason}); tree rebuilt from folder names")
        ]


def _tree_from_json(raw: object) -> NodeTree:
    if not isinstance(raw, dict) or "name" not in raw:
        raise ValueError("top level is not a {name, type, children} object")
    nodes: dict[str, Node] = {}
    stack: list[tuple[dict[str, object], str | None, int]] = [(raw, None, 0)]
    while stack:
        item, parent, depth = stack.pop()
        name = str(item["name"])
        if name in nodes:  # a child named like its parent (a loop) or a subtree listed twice
            raise ValueError(f"{name!r} is listed twice")
        nodes[name] = Node(name, str(item.get("type", "?")), parent, depth)
        if parent is not None:
            nodes[parent].children.append(name)
        children = item.get("children") or []
        if not isinstance(children, list):
            raise ValueError(f"children of {name} is not a list")
        stack.extend((child, name, depth + 1) for child in reversed(children))
    return NodeTree(root=str(raw["name"]), nodes=nodes)


def _add_unlisted_nodes(tree: NodeTree, tokens: dict[int, dict[str, list[TensorRef]]]) -> None:
    """Folders missing from model_tree.json (API-mode calls, a damaged tree) hang under their prefix."""
    seen = sorted({name for nodes in tokens.values() for name in nodes if name not in tree.nodes})
    for name in seen:
        parent = _longest_known_prefix(tree, name)
        kind = name[len(parent) + 1 :] if name.startswith(parent + ".") else name
        tree.nodes[name] = Node(name, kind.rsplit(".", 1)[-1], parent, tree.nodes[parent].depth + 1)
        tree.nodes[parent].children.append(name)


def _longest_known_prefix(tree: NodeTree, name: str) -> str:
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in tree.nodes:
            return prefix
    return tree.root


# --- execution order ----------------------------------------------------------------------------


def _order_by_file_times(tree: NodeTree, tokens: dict[int, dict[str, list[TensorRef]]]) -> Order:
    """Sort siblings by when they finished, if the file times are trustworthy.

    msit writes ``model_tree.json`` in ``named_children()`` order, which is not execution order
    (``rotary_emb`` is listed after ``norm``). msit writes a module's files when the module
    returns, so on an untouched dump the file times give completion order. A copied dump has
    copy-time stamps instead; we only use the times when they pass three checks that copies fail:
    every module finishes no earlier than its children, the model's last module finishes last, and
    no two siblings finish at the same time (a copy that set one time, a filesystem with coarse
    times: then the times do not tell which ran first).
    """
    token_nodes = max(tokens.values(), key=len)
    finished: dict[str, int] = {}
    for node in reversed(list(tree.preorder())):
        times = [_mtime(ref.location) for ref in token_nodes.get(node.name, [])]
        own = max(times) if times else None
        child_times = [finished[c] for c in node.children if c in finished]
        if own is not None and child_times and own < max(child_times):
            return _DECLARED
        candidates = ([own] if own is not None else []) + child_times
        if candidates:
            finished[node.name] = max(candidates)
    last = tree.leaf_chain_end()
    others = [t for name, t in finished.items() if name != last and not tree.is_ancestor(name, last)]
    if last not in finished or (others and finished[last] < max(others)):
        return _DECLARED
    for node in tree.nodes.values():
        times = [finished[c] for c in node.children if c in finished]
        if len(set(times)) < len(times):
            return _DECLARED
    for node in tree.nodes.values():
        index = {name: i for i, name in enumerate(node.children)}
        node.children.sort(key=lambda c: (finished.get(c, _NEVER), index[c]))
    return Order("file times", execution=True)


_DECLARED = Order(MODEL_TREE, execution=False)  # named_children() order: not the order they ran
_NEVER = 2**63


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns  # noqa: PTH116 - a str path: no Path object per file
    except OSError:
        return _NEVER


register(
    DumpReader(
        name="an msit torch dump",
        marks="model_tree.json, torch_tensors/ or msit_dump_*/torch_tensors/",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=40,  # msit's two dumps exclude each other: a folder holding both is refused
        pick="torch_tensors/",
    )
)
