"""Reader for msprobe's single-point saves (level ``debug``: ``PrecisionDebugger.save``).

Layout::

    {dump_path}/step{N}/{rank{R} | proc{PID}}/debug.json
                                             /dump_tensor_data/{var}.{count}.debug[.{i}].pt  (task "tensor")

``debug.json`` holds one record per save, ``{var}.{count}.debug``, its value a tensor entry or a
list/dict of them (as in dump.json); ``count`` counts the saves of ``var`` within a step and
starts again at 0 after ``debugger.step()``. A token is a step: the user calls ``step()`` once per
forward pass. Each save is a node, flat in save order; it has no inputs, so a save is judged by the
saves before it (the first that differs while the ones before it match is where the error starts).

See docs/formats.md §3.6.
"""

from __future__ import annotations

from pathlib import Path

from tui_acc.dumps.fs import names_a_file
from tui_acc.dumps.model import (
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    TensorRef,
    pick_rank,
    rank_sort_key,
)
from tui_acc.dumps.msprobe.dump import RANK_FOLDER, STEP_FOLDER, odd_copies
from tui_acc.dumps.msprobe.refs import RefBuilder
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register

FORMAT: Format = "msprobe-debug"
FILE = "debug.json"
ROOT = "saves"


def claims(path: Path) -> bool:
    """Whether ``path`` is a debug.json, or holds ``step*/rank*|proc*/debug.json`` at or below it
    (cheap: names and folder listings, no file opened)."""
    return bool(_step_folders(path)) or (path.name == FILE and names_a_file(path))


def read(path: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index the saves at or below ``path``: each step a token, each save a node under ``saves``
    (``rank``: which rank folder, when several; a debug.json passed itself is step 0).

    A step whose debug.json cannot be read, or has no ``data`` object, is a problem and not compared.

    Raises:
        DumpError: no step's debug.json could be read, or ``rank`` is out of range.
    """
    policy = LoadPolicy.for_dump(path, follow_links)
    notes: list[str] = []
    problems: list[Problem] = []
    if path.name == FILE:
        steps = {0: path.parent}
        ranks: list[str] = []
    else:
        steps, ranks, rank, notes = _choose_rank(path, rank)
        # step03, rank01 (copies beside msprobe's own folders): named, not read
        problems += odd_copies({path, *(folder.parent for folder in steps.values())})
    tree = NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "saves", None, 0)})
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    builders = []
    for step, folder in sorted(steps.items()):
        debug_json = folder / FILE
        try:
            raw = policy.read_json(debug_json)
        except (OSError, ValueError) as exc:
            problems.append(Problem(str(debug_json), f"unreadable ({exc}); step {step} is not compared"))
            continue
        if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
            problems.append(Problem(str(debug_json), f"no 'data' object; step {step} is not compared"))
            continue
        builder = RefBuilder(folder / "dump_tensor_data", debug_json)
        builders.append(builder)
        nodes = tokens.setdefault(step, {})
        for name, value in raw["data"].items():
            refs: list[TensorRef] = []
            builder.collect(refs, "value", "output", value)
            nodes[name] = refs
            if name not in tree.nodes:
                tree.nodes[name] = Node(name, name.split(".", 1)[0], ROOT, 1)
                tree.nodes[ROOT].children.append(name)
        problems += builder.problems
    if not tokens:
        raise DumpError(f"{path}: no readable {FILE} (msprobe level debug)")
    statistics_only = all(
        not ref.has_data for nodes in tokens.values() for refs in nodes.values() for ref in refs
    )
    notes.append(
        f"msprobe level debug: {len(tokens)} steps are the tokens; each save is a node, judged by the "
        "saves before it; the token's verdict is its last save's"
    )
    if statistics_only:
        notes.append(
            "msprobe level debug, task statistics: statistics only (Max/Min/Mean/Norm), no tensor data"
        )
    blank = sum(b.blank for b in builders)
    if blank:
        notes.append(f"{blank} saved tensors are recorded without statistics: they are not compared")
    return DumpIndex(
        root=path,
        policy=policy,
        data_dir=next(iter(steps.values())),
        format=FORMAT,
        tree=tree,
        tokens=dict(sorted(tokens.items())),
        order_source="debug.json order",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        statistics_only=statistics_only,
        ranks=ranks,
        rank=rank,
    )


def _step_folders(path: Path) -> dict[int, list[Path]]:
    """step number -> its rank/proc folders holding a debug.json, at or below ``path``."""
    if RANK_FOLDER.match(path.name) and names_a_file(path / FILE):
        return {0: [path]}
    if not path.is_dir():
        return {}
    steps = (
        [path]
        if STEP_FOLDER.match(path.name)
        else [p for p in path.iterdir() if p.is_dir() and STEP_FOLDER.match(p.name)]
    )
    found: dict[int, list[Path]] = {}
    for step in steps:
        ranks = [
            p for p in step.iterdir() if p.is_dir() and RANK_FOLDER.match(p.name) and names_a_file(p / FILE)
        ]
        if ranks:
            found[int(step.name[4:])] = ranks
    return found


def _choose_rank(path: Path, rank: int | None) -> tuple[dict[int, Path], list[str], int | None, list[str]]:
    """Every step's folder of one rank (matched by folder name; proc folders by their order), every
    rank's name, the rank read, and the notes for the user."""
    by_step = _step_folders(path)
    names = sorted({p.name for folders in by_step.values() for p in folders}, key=rank_sort_key)
    first_step = min(by_step)
    chosen, picked, notes = pick_rank(path, by_step[first_step], rank)
    position = sorted(by_step[first_step], key=lambda p: rank_sort_key(p.name)).index(chosen)
    steps: dict[int, Path] = {}
    for step, folders in by_step.items():
        ordered = sorted(folders, key=lambda p: rank_sort_key(p.name))
        same = [p for p in ordered if p.name == chosen.name]
        if same:
            steps[step] = same[0]
        elif position < len(ordered):  # proc{pid} names differ from step to step only if the process did
            steps[step] = ordered[position]
    return steps, names, picked, notes


register(
    DumpReader(
        name="an msprobe debug dump",
        marks="step*/rank*|proc*/debug.json",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=70,
    )
)
