"""Reader for msit ATB dumps (``msit llm dump --exec ...``; docs/formats.md §2.2).

Layout::

    msit_dump_{ts}/tensors/{device}_{pid}/{TID}/{i}_{OpType}/before/intensor{k}.bin
                                                           /after/outtensor{k}.bin
                                                           /{j}_{ChildOpType}/...   (any depth)
    msit_dump_{ts}/model/{pid}/{modelName}.json            (topology; two of them under MindIE)
    msit_dump_{ts}/layer/{pid}/{opName}.json

Node names are the folders below the token folder, as users see them: ``8_LlamaLayer/7_LinearOperation``.
Only names are read; ``.bin`` headers and payloads wait until a tensor is compared.

MindIE (two model topologies, prefill "encode" and "decode"): folder 0 is the warm-up, folder 1
holds token 0 (the encode model's nodes) and token 1 (the decode model's nodes), folder k >= 2 is
token k. With one topology, folder k is token k. ``token_offset`` overrides: token = folder - offset.
"""

from __future__ import annotations

import bisect
import os
import re
from pathlib import Path

from tui_acc.dumps.atb.executions import Topology, token_folders, tokens_of_folder, tokens_walked_lazily
from tui_acc.dumps.fs import (
    NOT_UTF8,
    folder_problem,
    names_a_file,
    not_utf8,
    numbered_subdirs,
    shown,
    subdirs,
    unnamed_subdirs,
)
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    Role,
    TensorRef,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT: Format = "msit-atb"
_NODE_DIR = re.compile(r"^(\d+)_(.+)$")
_TENSOR_FILE = re.compile(r"^(intensor|outtensor)(\d+)\.bin$")
_DUMP_PREFIXES = ("msit_dump", "ait_dump")


def claims(path: Path) -> bool:
    """Whether ``path`` carries the marks of an msit ATB dump (cheap: names only)."""
    if (path / "tensors").is_dir() or path.name == "tensors" or path.parent.name == "tensors":
        return True
    if path.name.isdigit() and path.parent.parent.name == "tensors":
        return True
    return any(p.name.startswith(_DUMP_PREFIXES) and (p / "tensors").is_dir() for p in subdirs(path))


def read(
    path: Path, token_offset: int | None = None, rank: int | None = None, follow_links: bool = False
) -> DumpIndex:
    """Index the msit ATB dump at or below ``path``: each token folder a token (MindIE's warm-up
    left out; ``token_offset``: token = folder - offset), each operation a node.

    Reads the model/{pid} topology and walks the first token's folder now; every other folder is
    walked when its token is first asked for (``tokens_walked_lazily``), and what it could not read
    is then added to the index's ``problems``. A token folder that cannot be listed is a problem,
    its tokens left to the other side.

    Args:
        path: an ``msit_dump*`` folder or the folder holding them (the newest is read, noted), its
            ``tensors/``, a ``{device}_{pid}`` folder or one token folder (only that one is read).
        token_offset: overrides MindIE's automatic alignment.
        rank: which ``{device}_{pid}`` folder, when several (default: the first, noted).
        follow_links: whether its files may lead out of it.

    Raises:
        DumpError: not a folder, no ``tensors/{device}_{pid}``, no token folder that can be listed,
            or none holding a token.
    """
    dump_root, device_dir, only_dir, notes, ranks, rank = _locate(path, rank)
    # the whole dump (its model/ topology lies beside tensors/ when a device folder was passed)
    policy = LoadPolicy.for_dump(dump_root if path.is_relative_to(dump_root) else path, follow_links)
    pid = device_dir.name.rsplit("_", 1)[-1]
    topology, problems = _read_topology(dump_root / "model" / pid, policy)
    root_name = topology.models[0][0] if topology.models else "model"
    tree = NodeTree(root=root_name, nodes={root_name: Node(root_name, "model", None, 0)})
    folders = {}
    blocked = []  # token folders that cannot be listed: named, their tokens left to the other side
    found, skipped = numbered_subdirs(str(device_dir))
    blocked += [Problem(folder, why) for folder, why in skipped]
    for number, name, folder in found:
        if only_dir is None or number == only_dir:
            message = folder_problem(folder, f"folder {name}'s tokens are not compared")
            if message:
                blocked.append(Problem(folder, message))
            else:
                folders[number] = folder
    problems += blocked
    if not folders:
        unlisted = folder_problem(device_dir, "not read")
        if unlisted or blocked:
            raise DumpError(
                f"{device_dir}: {unlisted}" if unlisted else f"{blocked[0].path}: {blocked[0].message}"
            )
        raise DumpError(f"{device_dir}: no token folders (0, 1, 2, ...) were found")
    # Which folder holds which token is known from folder names and the topology alone.
    folder_of, said = token_folders(folders, topology, token_offset)
    notes += said
    if not folder_of:
        raise DumpError(
            f"{device_dir}: its token folders hold no token (only a warm-up, or all below --token-offset)"
        )
    if topology.mindie and token_offset is None:
        notes.append(
            f"MindIE dump ({len(topology.models)} model topologies): folder 0 is the warm-up, "
            "folder 1 holds tokens 0 and 1, folder k is token k"
        )

    def walk(folder_id: int, into: NodeTree) -> dict[int, dict[str, list[TensorRef]]]:
        nodes: dict[str, list[TensorRef]] = {}
        problems.extend(_walk(Path(folders[folder_id]), "", root_name, into, nodes))
        return dict(tokens_of_folder(folder_id, nodes, topology, token_offset))

    tokens, _ = tokens_walked_lazily(folder_of, tree, walk)
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=device_dir,
        format=FORMAT,
        tree=tree,
        tokens=tokens,
        order_source="folder ids",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        ranks=ranks,
        rank=rank,
        exec_counts=folder_of,
    )


# --- finding the data ---------------------------------------------------------------------------


def _locate(path: Path, rank: int | None) -> tuple[Path, Path, int | None, list[str], list[str], int | None]:
    """(msit_dump root, {device}_{pid} folder, single token folder or None, notes, rank names, rank read)."""
    if not path.is_dir():
        raise DumpError(f"{path}: not a directory")
    notes: list[str] = []
    only_dir: int | None = None
    device_dir: Path | None = None
    candidate = path
    if path.name.isdigit() and path.parent.parent.name == "tensors":
        only_dir, device_dir = int(path.name), path.parent
        candidate = path.parent.parent.parent
        notes.append(f"only folder {path.name} of {path.parent} is read")
    elif path.parent.name == "tensors":
        device_dir, candidate = path, path.parent.parent
    elif path.name == "tensors":
        candidate = path.parent
    if not (candidate / "tensors").is_dir():
        dumps = sorted(
            p for p in subdirs(candidate) if p.name.startswith(_DUMP_PREFIXES) and (p / "tensors").is_dir()
        )
        # an ATB dump folder whose name is not UTF-8: named, not read
        unnamed = [
            shown(str(p))
            for p in unnamed_subdirs(candidate)
            if p.name.startswith(_DUMP_PREFIXES) and (p / "tensors").is_dir()
        ]
        notes += [f"{folder}: {NOT_UTF8}" for folder in unnamed]
        if not dumps and unnamed:
            raise DumpError(f"{unnamed[0]}: {NOT_UTF8}")
        if not dumps:
            raise DumpError(f"{path}: not an msit ATB dump (expected tensors/{{device}}_{{pid}}/ below it)")
        if len(dumps) > 1:
            notes.append(f"{candidate} holds {len(dumps)} ATB dumps; reading the newest, {dumps[-1].name}")
        candidate = dumps[-1]
    ranks: list[str] = []
    picked: int | None = None
    if device_dir is None:
        devices = [p for p in subdirs(candidate / "tensors") if re.match(r"^\d+_\d+$", p.name)]
        if not devices:
            raise DumpError(f"{candidate / 'tensors'}: no {{device}}_{{pid}} folder")
        device_dir, picked, said = pick_rank(candidate / "tensors", devices, rank)
        notes += said
        ranks = sorted((p.name for p in devices), key=rank_sort_key)
    return candidate, device_dir, only_dir, notes, ranks, picked


_TRANSDATA = "TransdataOperation_0.json"


# --- topology -----------------------------------------------------------------------------------


def _read_topology(model_dir: Path, policy: LoadPolicy) -> tuple[Topology, list[Problem]]:
    """The model topologies of model/{pid}/, and the files that could not be read.

    A model's top-level operations are numbered from its first opName's suffix, plus one where the
    model ran a TransdataOperation before them (``layer/{pid}/TransdataOperation_0.json``), as msit
    numbers them (docs/formats.md §2.2)."""
    models = []
    problems: list[Problem] = []
    shift = 1 if names_a_file(model_dir.parent.parent / "layer" / model_dir.name / _TRANSDATA) else 0
    for file in sorted(model_dir.glob("*.json")) if model_dir.is_dir() else []:
        try:
            # msit parses NaN/Infinity constants as null; so do we
            raw = policy.read_json(file, parse_constant=lambda _c: None)
            nodes = raw.get("nodes") or []
            if not isinstance(nodes, list):
                raise ValueError(f'"nodes" is a {type(nodes).__name__}, not a list')
            first = nodes[0] if nodes and isinstance(nodes[0], dict) else {}
            suffix = str(first.get("opName", "0")).rsplit("_", 1)[-1]
            models.append(
                (
                    str(raw.get("modelName", file.stem)),
                    (int(suffix) if suffix.isdigit() else 0) + shift,
                    len(nodes),
                )
            )
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(Problem(str(file), f"unreadable model topology ({exc})"))
    models.sort(key=lambda m: m[1])
    return Topology(models), problems


# --- node folders -------------------------------------------------------------------------------


def _walk(
    folder: Path,
    prefix: str,
    parent: str,
    tree: NodeTree,
    nodes: dict[str, list[TensorRef]],
) -> list[Problem]:
    """The operations below ``folder`` added to ``tree`` and their tensors to ``nodes``; returns the
    folders and files that could not be read. Iterative: operations nested a thousand deep (a forged
    dump) are walked without recursion."""
    problems: list[Problem] = []
    pending = [(folder, prefix, parent)]
    while pending:
        here, here_prefix, here_parent = pending.pop()
        children = []
        folders, files = _listed(here)
        problems += [
            Problem(str(f), _NOT_A_FOLDER) for f in files if _NODE_DIR.match(f.name) and "." not in f.name
        ]
        for sub in folders:
            match = _NODE_DIR.match(sub.name)
            if not match:
                continue
            if not_utf8(sub.name):
                problems.append(Problem(shown(str(sub)), NOT_UTF8))
                continue
            blocked = folder_problem(sub, "this operation and those inside it are not compared")
            if blocked:
                problems.append(Problem(str(sub), blocked))
            else:
                children.append((int(match.group(1)), match.group(2), sub))
        below = []
        for _, op_type, sub in sorted(children):
            name = f"{here_prefix}{sub.name}"
            if name not in tree.nodes:
                depth = tree.nodes[here_parent].depth + 1
                tree.nodes[name] = Node(name, op_type, here_parent, depth)
                _insert_child(tree, here_parent, name)
            nodes[name], unread = _tensors(sub)
            problems += unread
            below.append((sub, f"{name}/", name))
        pending.extend(reversed(below))  # depth first, in order, as the recursive walk went
    return problems


_NOT_A_FOLDER = "a file where an operation's folder belongs (named like one); not compared"


def _listed(folder: Path) -> tuple[list[Path], list[Path]]:
    """The folders in ``folder`` (links followed, as dumps made with -symlink need) and its other
    entries; none where it cannot be listed (said where its tensors are read)."""
    folders: list[Path] = []
    files: list[Path] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                (folders if entry.is_dir() else files).append(Path(entry.path))
    except OSError:
        pass
    return folders, files


def _insert_child(tree: NodeTree, parent: str, name: str) -> None:
    """Keep siblings in folder-id order even when tokens contribute different nodes."""
    # inserted in place (the list is kept sorted): a sort per insert made 20,000 folders quadratic
    bisect.insort(tree.nodes[parent].children, name, key=_folder_id)


def _folder_id(name: str) -> int:
    return int(name.rsplit("/", 1)[-1].split("_", 1)[0])


def _tensors(node_dir: Path) -> tuple[list[TensorRef], list[Problem]]:
    """An operation's tensor files (before/ and after/), and those that could not be used."""
    refs: list[TensorRef] = []
    problems: list[Problem] = []
    before = {}
    for when in ("before", "after"):
        part = node_dir / when
        try:
            if not part.is_dir():
                if os.path.lexists(part):  # its tensors would be lost without a word
                    problems.append(
                        Problem(str(part), "not a folder; this operation's tensors there are not compared")
                    )
                continue
        except OSError as exc:  # a path past PATH_MAX (operations nested a thousand deep)
            problems.append(Problem(str(node_dir), f"cannot be read ({exc.strerror or exc}); not compared"))
            break
        try:
            with os.scandir(part) as scanned:
                entries = list(scanned)
        except OSError as exc:
            problems.append(
                Problem(str(part), f"cannot list the folder ({exc.strerror or exc}); not compared")
            )
            continue
        for entry in entries:
            match = _TENSOR_FILE.match(entry.name)
            if not match:
                if entry.name.endswith(".bin"):
                    problems.append(Problem(entry.path, "unexpected tensor file name; not compared"))
                continue
            if entry.is_symlink() and not Path(entry.path).exists():
                problems.append(Problem(entry.path, f"broken symlink to {Path(entry.path).readlink()}"))
                continue
            kind, index = match.group(1), match.group(2)
            role: Role = "input" if kind == "intensor" else "output"
            slot = f"{kind}{index}"
            if when == "after" and kind == "intensor":
                if slot in before:
                    slot = f"{slot}.after"  # inputs dumped both before and after execution
            else:
                before[slot] = True
            refs.append(TensorRef(slot=slot, role=role, location=entry.path))
    refs.sort(key=lambda r: (r.role != "input", int(re.sub(r"\D", "", r.slot.split(".")[0]) or 0), r.slot))
    return refs, problems


register(
    DumpReader(
        name="an msit ATB dump",
        marks="tensors/{device}_{pid}/ or msit_dump_*/tensors/",
        claims=claims,
        read=lambda root, options: read(
            root, token_offset=options.token_offset, rank=options.rank, follow_links=options.follow_links
        ),
        precedence=40,  # msit's two dumps exclude each other: a folder holding both is refused
        pick="tensors/",
    )
)
