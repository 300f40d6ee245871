"""Reader for msprobe PyTorch dumps (``PrecisionDebugger``; docs/formats.md §3).

Layout::

    {dump_path}/step{N}/{rank{R} | proc{PID}}/dump.json, construct.json, stack.json
                                             /dump_tensor_data/{data_name}.pt   (task "tensor")

Node names are msprobe's own (``Module.model.layers.1.self_attn.o_proj.Linear.forward.2``);
tensor slots are the suffixes its compare uses (``input.0``, ``input.position_ids``, ``output.0``,
``parameters.weight``). A token is one forward of the model: every call below the same top-level
call (``Module.model.LlamaModel.forward.k``, ``Module.lm_head.Linear.forward.k``) is token k.
The statistics task records Max/Min/Mean/Norm instead of files; those become statistics refs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tui_acc.dumps.fs import folder_problem, names_a_file, not_utf8, subdirs, unreadable
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    TensorRef,
    float_dtypes_of,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.msprobe.construct import check_construct, read_construct
from tui_acc.dumps.msprobe.passes import (
    api_of,
    is_module,
    module_call_index,
    set_aside,
    split_passes,
    tops,
)
from tui_acc.dumps.msprobe.record_order import first_disorder
from tui_acc.dumps.msprobe.refs import RefBuilder, content_notes
from tui_acc.dumps.msprobe.steps import merge_steps
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT: Format = "msprobe"
ROOT = "model"
# step{N}/ and {rank{R} | proc{pid} | pid{pid}}/ (pid: graph mode, and any run without torch.distributed)
STEP_FOLDER = re.compile(r"^step(0|[1-9][0-9]*)$")  # as msprobe names them: step03 is none of its
_ODD_STEP = re.compile(r"^step0[0-9]+$")
RANK_FOLDER = re.compile(r"^(rank|proc|pid)(0|[1-9][0-9]*)$")  # rank01 is none of msprobe's
_ODD_RANK = re.compile(r"^(rank|proc|pid)0[0-9]+$")
_CALL = re.compile(r"\.(forward|backward)\.(\d+)$")
_API_CALL = re.compile(r"\.(\d+)\.(forward|backward)$")
LEVELS = ("L0", "L1", "mix")
# LOW-risk APIs of msprobe (api_dump/api_risk_level.py's LOW_RISK_API_SET) that a transformer calls in
# every layer: an L1 or mix dump of a model without any of them was filtered by risk_level FOCUS
LAYOUT_APIS = frozenset({"view", "reshape", "transpose", "permute", "to", "unsqueeze", "contiguous", "float"})
_FOCUS_EVIDENCE = 50  # records: a tiny dump may simply not call any of them


def claims(path: Path) -> bool:
    """Whether ``path`` is or holds a dump.json, or holds ``step*/rank*|proc*`` folders (cheap: names
    and folder listings, no file opened)."""
    if _holds_dump_json(path) or (path.name == "dump.json" and names_a_file(path)):
        return True
    # a rank folder that cannot be listed is still msprobe's: read() names it
    return bool(_rank_dirs(path)) or any(unreadable(p) for p in _rank_like(path))


def read(path: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """The dump's newest step; or, where every step holds one forward pass (a serving engine calls
    ``step()`` after each: vllm-ascend eager, SGLang's --msprobe-dump-config), every step, a token each."""
    policy = LoadPolicy.for_dump(path, follow_links)
    rank_dir, notes, ranks, rank = _locate(path, rank)
    steps = _steps_of(path, rank_dir)
    # a copy named step03 beside step3 was read in its place, one named rank01 beside rank1 was
    # gathered as one more rank, without a word: named, and not read
    odd = [p for p in odd_copies({path, rank_dir.parent}) if p.path != str(rank_dir)]
    if len(steps) < 2:
        alone = _read_rank_dir(path, rank_dir, notes, ranks, rank, policy)
        alone.problems[:0] = odd
        return alone
    problems: list[Problem] = [*odd]

    def attempt(number: int, folder: Path) -> DumpIndex | None:
        try:
            return _read_rank_dir(path, folder, [], ranks, rank, policy)
        except DumpError as exc:  # one damaged step: named, and the others are still read
            problems.append(Problem(str(folder / "dump.json"), f"{exc}; step {number} is not compared"))
            return None

    newest, first = attempt(*steps[-1]), attempt(*steps[0])
    ends = [index for index in (first, newest) if index is not None]
    if ends and all(len(index.tokens) == 1 for index in ends):
        merged = []
        for number, folder in steps:
            index = (
                first
                if number == steps[0][0]
                else newest
                if number == steps[-1][0]
                else attempt(number, folder)
            )
            if index is None:
                continue
            if len(index.tokens) != 1:
                message = (
                    f"holds {len(index.tokens)} forward passes where the other steps hold one; not compared"
                )
                problems.append(Problem(str(folder / "dump.json"), message))
                continue
            merged.append((number, index))
        return merge_steps(path, merged, notes, problems, [number for number, _ in steps])
    if newest is None:
        raise DumpError(f"{problems[0].path}: {problems[0].message}")
    newest.problems[:0] = problems
    last = f"step{steps[-1][0]}"
    newest.notes[:0] = [
        *notes,
        f"{path} holds {len(steps)} steps; reading the last, {last} (pass a step* folder to pick one)",
    ]
    return newest


_REORDERED = (
    "its records are not in the order msprobe writes them ({} before {}, a later call of the same "
    "operator): reordered after the run, so their order is not the order the calls ran in (a "
    "comparison takes the other side's where that one is as msprobe wrote it; else the first failing "
    "operator in this order may not be the first that ran)"
)


def odd_copies(folders: Iterable[Path]) -> list[Problem]:
    """The folders in ``folders`` named like msprobe's step or rank folders with a leading zero (a copy
    put beside the dumper's own, which no reader takes): each named."""
    found = []
    for folder in sorted(folders):
        for sub in subdirs(folder):
            if _ODD_STEP.match(sub.name) or _ODD_RANK.match(sub.name):
                found.append(Problem(str(sub), _NOT_A_STEP if sub.name.startswith("step") else _NOT_A_RANK))
    return found


_NOT_A_STEP = "named like a step folder, but msprobe writes step{n} without leading zeros; not read"
_NOT_A_RANK = "named like a rank folder, but msprobe writes rank{n} without leading zeros; not read"


def _steps_of(path: Path, rank_dir: Path) -> list[tuple[int, Path]]:
    """(N, the rank folder of that name in step N) for every step, when ``path`` is the dump_path."""
    if path.name == "dump.json" or _holds_dump_json(path) or STEP_FOLDER.match(path.name):
        return [(0, rank_dir)]
    found = []
    for step in path.iterdir():
        folder = step / rank_dir.name
        if step.is_dir() and STEP_FOLDER.match(step.name) and _holds_dump_json(folder):
            found.append((int(step.name[4:]), folder))
    return sorted(found)


def _read_rank_dir(
    path: Path, rank_dir: Path, located: Sequence[str], ranks: list[str], rank: int | None, policy: LoadPolicy
) -> DumpIndex:
    """One rank folder's dump.json indexed; ``located``: the notes finding it gave."""
    notes = list(located)
    problems: list[Problem] = []
    dump_json = rank_dir / "dump.json"
    try:
        dump, doubled = policy.read_json_doubled(dump_json)
    except (OSError, ValueError) as exc:
        raise DumpError(f"{dump_json}: unreadable msprobe dump.json ({exc})") from exc
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise DumpError(f"{dump_json}: no 'data' object; not an msprobe dump.json")
    if dump.get("framework") not in (None, "pytorch"):
        raise DumpError(f"{dump_json}: a {dump.get('framework')} dump; only PyTorch msprobe dumps are read")
    data: dict[str, Any] = dump["data"]
    # a record named with an unpaired surrogate (a JSON escape, no name msprobe writes): no frame,
    # JSON reader or terminal takes the name
    unnamed = [name for name in data if not_utf8(name)]
    if unnamed:
        example = unnamed[0].encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        said = f"{len(unnamed)} records named with an unpaired surrogate (e.g. {example!r}); not compared"
        problems.append(Problem(str(dump_json), said))
        left_out = set(unnamed)
        data = {name: entry for name, entry in data.items() if name not in left_out}
    problems += _doubled_keys(dump_json, data, doubled)
    disorder = first_disorder(list(data))
    if disorder is not None:
        problems.append(Problem(str(dump_json), _REORDERED.format(*disorder)))
    level = str(dump.get("level") or "")
    if level and level not in LEVELS:
        problems.append(
            Problem(
                str(dump_json),
                f"level {level!r} is not one tui-acc knows ({', '.join(LEVELS)}); "
                "its records are read by their names (Module.* as modules, the rest as API calls)",
            )
        )
    construct = rank_dir / "construct.json"
    parents, unread = read_construct(construct, policy)
    listed = bool(parents)  # L1 writes {}: no call tree, and none lost
    disagreements = check_construct(construct, parents, data)
    problems += unread + disagreements
    task = str(dump.get("task", "tensor"))
    tensor_dir = rank_dir / "dump_tensor_data"
    # construct.json also names API calls that recorded nothing (Tensor.__bool__): no nodes for them
    holders = dict.fromkeys(name for name in parents if name not in data and is_module(name))
    tree = _build_tree(list(data), {k: v for k, v in parents.items() if k in data or k in holders})
    passes = split_passes(list(data), data, parents)
    notes += [f"{rank_dir}: {note}" for note in passes.notes]
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    statistics_only = True
    builder = RefBuilder(tensor_dir, dump_json)
    for name, entry in data.items():
        refs = builder.refs(name, entry)
        statistics_only &= all(not r.has_data for r in refs)
        token = passes.token_of.get(name)
        if token is not None:
            tokens.setdefault(token, {})[name] = refs
    problems += builder.problems
    holder_tops = tops(list(holders), parents)
    for name in holders:  # modules recorded only in construct.json (no tensors) still hold their children
        token = module_call_index(holder_tops[name])
        if token is not None:
            tokens.setdefault(token, {}).setdefault(name, [])
    between_note, misplaced = set_aside(passes, data)
    if between_note:
        notes.append(f"{rank_dir}: {between_note}")
    if misplaced:  # the model's own arithmetic left uncompared: said as loudly as a damaged file
        problems.append(Problem(str(dump_json), misplaced))
    notes += content_notes(rank_dir, task, statistics_only, builder, data)
    if (
        level in ("L1", "mix")
        and len(data) >= _FOCUS_EVIDENCE
        and not any((api := api_of(name)) and api.rsplit(".", 1)[-1] in LAYOUT_APIS for name in data)
    ):
        notes.append(
            f"{rank_dir}: no reshape/view/transpose/permute/to records: dumped with msprobe's default "
            "risk_level FOCUS, which leaves them out; an operator fed by them is judged by its own inputs"
        )
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=rank_dir,
        format=FORMAT,
        tree=tree,
        tokens=dict(sorted(tokens.items())),
        order_source="dump.json order"
        if disorder is None
        else "dump.json order, not the order the calls ran in",
        order_is_execution=disorder is None,
        problems=problems,
        notes=notes,
        statistics_only=statistics_only,
        ranks=ranks,
        rank=rank,
        stable=passes.stable,
        float_dtypes=float_dtypes_of(
            ref for nodes in tokens.values() for refs in nodes.values() for ref in refs
        ),
        between_tokens=passes.between,
        logits_hint=passes.logits,
        call_tree_doubted=bool(unread or disagreements),
        call_tree_lost=bool(unread) or (listed and not parents),  # missing, unreadable, or a cycle
    )


def _doubled_keys(
    dump_json: Path, data: dict[str, Any], doubled: list[tuple[dict[str, Any], list[str]]]
) -> list[Problem]:
    """msprobe writes each record, and each field of one, once: a name given twice is said, since the
    copy read (the last, at the first one's place) may not be the run's."""
    records = [name for built, names in doubled if built is data for name in names]
    fields = [name for built, names in doubled if built is not data for name in names]
    problems = []
    if records:
        message = f"names {len(records)} records twice (e.g. {records[0]}); the last copy of each is read"
        problems.append(Problem(str(dump_json), message))
    if fields:
        message = f"gives {len(fields)} fields twice in one object (e.g. {fields[0]!r}); the last is read"
        problems.append(Problem(str(dump_json), message))
    return problems


def _holds_dump_json(folder: Path) -> bool:
    """Whether ``folder`` has an entry named dump.json, whatever it is: one that is a folder, a FIFO or
    a dangling link is then read, and refused by name, rather than the rank taken for graph mode's
    (its tensors without a dump.json) or not seen at all."""
    return os.path.lexists(folder / "dump.json")


def _rank_dirs(path: Path) -> list[Path]:
    """rank*/proc* folders holding a dump.json, at or below ``path`` (dump_path/step*/rank*)."""
    found = []
    if RANK_FOLDER.match(path.name) and _holds_dump_json(path):
        return [path]
    steps = (
        [path]
        if STEP_FOLDER.match(path.name)
        else sorted(
            (p for p in path.iterdir() if p.is_dir() and STEP_FOLDER.match(p.name)),
            key=lambda p: int(p.name[4:]),
        )
        if path.is_dir()
        else []
    )
    for step in steps[-1:]:
        found += sorted(
            p for p in step.iterdir() if p.is_dir() and RANK_FOLDER.match(p.name) and _holds_dump_json(p)
        )
    return found


def _rank_like(path: Path) -> list[Path]:
    """``path`` itself, or the rank folders of its steps, by name alone."""
    if RANK_FOLDER.match(path.name):
        return [path]
    steps = (
        [path] if STEP_FOLDER.match(path.name) else [p for p in subdirs(path) if STEP_FOLDER.match(p.name)]
    )
    return [p for step in steps for p in subdirs(step) if RANK_FOLDER.match(p.name)]


def _locate(path: Path, rank: int | None) -> tuple[Path, list[str], list[str], int | None]:
    notes: list[str] = []
    if path.name == "dump.json":
        return path.parent, notes, [], None
    if _holds_dump_json(path):
        return path, notes, [], None
    ranks = _rank_dirs(path)
    if not ranks:
        blocked = next(((p, m) for p in _rank_like(path) if (m := folder_problem(p, "not read"))), None)
        if blocked:  # a rank folder that cannot be listed looks like one without a dump.json
            raise DumpError(f"{blocked[0]}: {blocked[1]}")
        raise DumpError(f"{path}: not an msprobe dump (expected step*/rank*|proc*/dump.json)")
    chosen, picked, said = pick_rank(path, ranks, rank)
    return chosen, notes + said, sorted((p.name for p in ranks), key=rank_sort_key), picked


# --- the call tree ------------------------------------------------------------------------------


def _build_tree(completed: list[str], parents: dict[str, str | None]) -> NodeTree:
    """The call tree, children in execution order.

    ``dump.json`` lists calls as they complete, so a module comes after its children; a call
    started before its sibling exactly when its subtree completed something first.
    """
    tree = NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "model", None, 0)})
    order = {name: i for i, name in enumerate(completed)}
    for name in [*completed, *parents]:  # a parent missing from both still gets a node, under the root
        _add_node(tree, name, parents)
    first: dict[str, int] = {}
    for node in reversed(list(tree.preorder())):
        own = order.get(node.name, 1 << 30)
        first[node.name] = min([own, *(first[c] for c in node.children)])
    for node in tree.nodes.values():
        node.children.sort(key=lambda c: first[c])
    return tree


def _add_node(tree: NodeTree, name: str, parents: dict[str, str | None]) -> None:
    chain = []
    while name not in tree.nodes:
        chain.append(name)
        name = parents.get(name) or ROOT
    for child in reversed(chain):
        parent = parents.get(child) or ROOT
        tree.nodes[child] = Node(child, _type_of(child), parent, tree.nodes[parent].depth + 1)
        tree.nodes[parent].children.append(child)


def _type_of(name: str) -> str:
    """A module call is typed by its class, an API call by its function.

    ``Module.model.layers.0.mlp.LlamaMLP.forward.3`` -> ``LlamaMLP``;
    ``Functional.linear.5.forward`` -> ``linear``.
    """
    if name.startswith("Module.") and _CALL.search(name):
        return _CALL.sub("", name).rsplit(".", 1)[-1]
    api = _API_CALL.search(name)
    if api:
        return name[: api.start()].rsplit(".", 1)[-1]
    return name.rsplit(".", 1)[-1]


register(
    DumpReader(
        name="an msprobe dump",
        marks="step*/rank*|proc*/dump.json",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=60,
    )
)
