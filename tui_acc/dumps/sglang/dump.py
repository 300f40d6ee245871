"""Reader for SGLang's own dumper (``sglang.srt.debug_utils.dumper``; ``DUMPER_ENABLE=1``).

Layout (sglang 0.5.23, python/sglang/srt/debug_utils/dumper.py)::

    {DUMPER_DIR}/{exp_name}/step={S}___rank={R}___dump_index={I}___name={N}___recompute_status={C}
                            [___layer_id={L}][___{other tags}].pt

Each file is ``{"value": tensor, "meta": {...}}`` (``load_tensor`` unwraps it). ``step`` counts the
model's forward passes from 0 (``dumper.step()`` runs after each one), so a token here is a step: a
prefill step processes the whole prompt, a decode step one new token per request. ``dump_index``
counts every file of the run from 1 and gives the dump order. The automatic hooks
(``DUMPER_NON_INTRUSIVE_MODE=all``) name files ``non_intrusive__{module}.{inputs.X | output}[.k]``:
those become a module tree (``model.layers.0.mlp`` under ``model.layers.0``), with the hook's part
as the slot. Other names (``dumper.dump("attn_out", x, layer_id=3)`` in the model's code, and the
core fields ``input_ids``/``positions`` the hooks dump under their own names) are nodes in call
order, those with a ``layer_id`` under ``layers.{L}``.

Several ranks (``rank=`` in the names, all in one folder) are picked with ``--rank`` or gathered
with ``--gather``; gathering follows the ``dims`` annotation of ``dumper.dump(..., dims=...)``
where the model's code gave one, as SGLang's comparator does: ``h[tp]`` is concatenated along that
dimension, ``h[tp:partial]`` summed. Steps are aligned by the ``input_ids`` they process in
``align.py``.

See docs/formats.md §5.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from tui_acc.dumps.fs import NOT_UTF8, not_utf8, settled, shown
from tui_acc.dumps.model import (
    CONCAT,
    SUM,
    DumpError,
    DumpIndex,
    Format,
    Node,
    NodeTree,
    Problem,
    Role,
    TensorRef,
    pick_rank,
)
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.registry import DumpReader, register
from tui_acc.dumps.sglang.files import Record, records_in

FORMAT: Format = "sglang"
ROOT = "root"
NON_INTRUSIVE = "non_intrusive__"
INPUT_IDS = "input_ids"

# dumper.py:722-756: "non_intrusive__" + module path + "inputs.{i|kwarg}" or "output", then the key
# of one tensor of a tuple or plugin object ("output.0", "output.next_token_logits")
_HOOK = re.compile(r"^(?:(?P<module>.+)\.)?(?P<slot>(?:inputs\.[^.]+|output)(?:\.[^.]+)?)$")
# The layer a module belongs to: the hooks set layer_id inside modules named "...layers.N" (dumper.py:658)
_LAYER_MODULE = re.compile(r"^(?P<path>(?:.+\.)?layers\.(?P<layer>\d+))(?:\..+)?$")
# Where the automatic hooks put the logits: SGLang's LogitsProcessorOutput field (dumper.py:1767),
# else the module that computes them.
_LOGITS_SLOT = "next_token_logits"
_LOGITS_MODULES = ("logits_processor", "lm_head")
# Axes whose ranks are the file names' world ranks in a tensor-parallel run
_TP_AXES = ("tp", "attn_tp", "moe_tp")


def claims(path: Path) -> bool:
    """Whether ``path`` is, or holds right below it, a folder of the dumper's ``step=*.pt`` files
    (cheap: folder listings, no file opened)."""
    return path.is_dir() and _experiment(path) is not None


def _has_dumper_files(folder: str) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(e.name.startswith("step=") and e.name.endswith(".pt") for e in entries)
    except OSError:
        return False


def _experiment(path: Path) -> tuple[Path, list[str]] | None:
    """The experiment folder (``{dir}/{exp_name}``) at or right below ``path``, and notes."""
    if _has_dumper_files(str(path)):
        return path, []
    try:
        with os.scandir(path) as entries:
            found = sorted(Path(e.path) for e in entries if e.is_dir() and _has_dumper_files(e.path))
    except OSError:
        return None
    notes = [f"{shown(str(f))}: {NOT_UTF8}" for f in found if not_utf8(f.name)]
    found = [f for f in found if not not_utf8(f.name)]  # its paths would reach no frame, no JSON
    if not found:
        return None
    if len(found) > 1:  # default names are dump_{UTC time}_{ms}{random} (dumper.py:1160-1172): sortable
        notes.append(f"{path} holds {len(found)} experiments; reading the last, {found[-1].name}")
    return found[-1], notes


def read(path: Path, rank: int | None = None, follow_links: bool = False) -> DumpIndex:
    """Index the SGLang dumper experiment at or right below ``path`` (the last, noted, where it
    holds several) from its file names: each step a token, each dumped name a node (``rank``: which
    rank, when several). A file whose name does not parse is a problem.

    Where it holds several ranks and the first is read, each name's first file's meta is opened
    (memory-mapped) for its ``dims``, which say how ``--gather`` merges the ranks.

    Raises:
        DumpError: no dumper files, the folder cannot be listed, none of the names parses, or
            ``rank`` is out of range.
    """
    located = _experiment(path)
    if located is None:
        raise DumpError(f"{path}: not an SGLang dumper folder (expected step=*___rank=*___...pt files)")
    folder, notes = located
    records, problems = records_in(folder)
    if not records:
        raise DumpError(f"{folder}: none of its step=... files has a name SGLang's dumper writes")
    all_ranks = sorted({r.rank for r in records})
    rank_dirs = [folder / f"rank{r}" for r in all_ranks]  # named like rank folders for pick_rank's notes
    chosen, picked, said = pick_rank(folder, rank_dirs, rank)
    notes += said
    world_rank = all_ranks[rank_dirs.index(chosen)]
    mine = sorted((r for r in records if r.rank == world_rank), key=lambda r: r.index)
    tree = NodeTree(root=ROOT, nodes={ROOT: Node(ROOT, "model", None, 0)})
    tokens: dict[int, dict[str, list[TensorRef]]] = {}
    names: dict[str, str] = {}  # node -> the dumper's name, for the dims lookup below
    seen: dict[int, dict[tuple[str, str], int]] = {}
    layer_modules: dict[int, str] = {}  # layer_id -> the module the hooks found it on (model.layers.3)
    for record in mine:
        node, slot, role = _node_and_slot(record, layer_modules)
        repeats = seen.setdefault(record.step, {})
        count = repeats.get((node, slot), 0) + 1
        repeats[(node, slot)] = count
        if count > 1:  # the same name again in one step (core fields every layer is handed)
            node = f"{node}#{count}"
        _add_chain(tree, node)
        names.setdefault(node, record.name)
        tokens.setdefault(record.step, {}).setdefault(node, []).append(TensorRef(slot, role, record.path))
    other_parallel: list[str] = []
    if len(all_ranks) > 1 and picked == 0:
        merges, unmerged, said, other_parallel = _merges_from_dims(mine)
        problems += unmerged
        notes += said
        for nodes in tokens.values():
            for node, refs in nodes.items():
                nodes[node] = [_with_merge(ref, merges.get(names[node], "")) for ref in refs]
    return DumpIndex(
        root=path,
        policy=LoadPolicy.for_dump(path, follow_links),
        data_dir=folder,
        format=FORMAT,
        tree=tree,
        tokens=dict(sorted(tokens.items())),
        order_source="dump_index order",
        order_is_execution=True,
        problems=problems,
        notes=notes,
        ranks=[p.name for p in rank_dirs] if len(all_ranks) > 1 else [],
        rank=picked,
        other_parallel=other_parallel,
        logits_hint=_logits(tree, tokens),
    )


def _node_and_slot(record: Record, layer_modules: dict[int, str]) -> tuple[str, str, Role]:
    if record.name.startswith(NON_INTRUSIVE):
        found = _HOOK.match(record.name[len(NON_INTRUSIVE) :])
        if found is not None:
            module, slot = found["module"] or ROOT, found["slot"]
            layer = _LAYER_MODULE.match(module)
            if layer is not None and record.layer == int(layer["layer"]):
                layer_modules.setdefault(record.layer, layer["path"])
            return module, slot, "input" if slot.startswith("inputs.") else "output"
    if record.layer is not None:  # inside that layer's module where the hooks named it
        holder = layer_modules.get(record.layer, f"layers.{record.layer}")
        return f"{holder}.{record.name}", "output", "output"
    return record.name, "output", "output"


def _add_chain(tree: NodeTree, name: str) -> None:
    """``name`` and its dotted ancestors as nodes, each added under its parent on first sight."""
    if name in tree.nodes:
        return
    parent = ROOT
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        current = ".".join(parts[:end])
        if current not in tree.nodes:
            node = Node(current, _type_of(current), parent, tree.nodes[parent].depth + 1)
            tree.nodes[current] = node
            tree.nodes[parent].children.append(current)
        parent = current


def _type_of(name: str) -> str:
    """``model.layers.1.mlp.down_proj`` -> ``down_proj``; ``model.layers.1`` -> ``layers``."""
    parts = [p for p in name.split("#")[0].split(".") if not p.isdigit()]
    return parts[-1] if parts else name


def _logits(tree: NodeTree, tokens: dict[int, dict[str, list[TensorRef]]]) -> str | None:
    first = next(iter(tokens.values()), {})
    for node, refs in first.items():
        if any(ref.slot.endswith(_LOGITS_SLOT) for ref in refs):
            return node
    for wanted in _LOGITS_MODULES:
        for node in first:
            if tree.nodes[node].type == wanted and any(ref.role == "output" for ref in first[node]):
                return node
    return None


def _with_merge(ref: TensorRef, merge: str) -> TensorRef:
    return replace(ref, merge=merge) if merge else ref


def _merges_from_dims(
    records: list[Record],
) -> tuple[dict[str, str], list[Problem], list[str], list[str]]:
    """How to gather each name's ranks, from the ``dims`` its first file's meta holds; the annotations
    that cannot be used, the notes for the user (the merges, the parallel sizes), and the parallel
    axes above 1 besides tensor parallelism (``dp``, ``pp``: the ranks are not one model's shards).

    The one place this reader opens files at index time: the annotation is only in the meta. It is
    a static string of the ``dumper.dump(..., dims=...)`` call in the model's code, so the first file
    of each name tells it for every step and layer; it is read only when the dump holds several
    ranks, and only for the first of them (the index ``--gather`` takes its merges from); the load
    is memory-mapped, so the tensor's bytes are not read.
    """
    first: dict[str, str] = {}
    for record in records:
        first.setdefault(record.name, record.path)
    merges: dict[str, str] = {}
    sizes: dict[str, int] = {}
    problems: list[Problem] = []
    notes: list[str] = []
    for name, file_path in first.items():
        meta = _meta(Path(file_path))
        if meta is None:
            continue
        info = meta.get("sglang_parallel_info")
        if isinstance(info, dict):
            for key, value in info.items():
                if key.endswith("_size") and isinstance(value, int) and value > 1:
                    sizes[key.removesuffix("_size")] = value
        dims = meta.get("dims")
        if isinstance(dims, str):
            merge, problem = merge_of_dims(dims)
            if problem:
                message = f"dims {dims!r}: {problem}; its ranks are merged by shape"
                problems.append(Problem(file_path, message))
            merges[name] = merge
    if merges:
        annotated = sum(1 for merge in merges.values() if merge)
        notes.append(
            f"{annotated} of {len(first)} names carry a tensor-parallel dims annotation: --gather merges "
            "by it (concatenated along [tp], summed for [tp:partial]), the others by shape"
        )
    others: list[str] = []
    if sizes:
        described = ", ".join(f"{axis}={size}" for axis, size in sorted(sizes.items()))
        notes.append(f"parallel sizes from the dumper's meta: {described}")
        others = sorted(axis for axis in sizes if axis not in _TP_AXES)
        if others:
            notes.append(
                f"only tensor parallelism is unsharded: with {', '.join(others)} above 1 as well, rank 0 "
                "is compared; --gather merges the files as if every process were a tensor-parallel one"
            )
    return merges, problems, notes, others


def _meta(path: Path) -> dict[str, object] | None:
    """The ``meta`` SGLang's dumper saved beside a tensor; mapped, so the tensor's bytes are not read
    for it (read whole where the file may still be being written)."""
    from tui_acc.dumps.torchfile.reader import NeedsTorch, RefusedGlobal, TorchFileError, read_torch_file

    try:
        obj = read_torch_file(path, mapped=settled(path))
    except NeedsTorch:
        obj = _meta_by_torch(path)
    except (OSError, RefusedGlobal, TorchFileError):
        return None  # the comparison names the file when it loads it
    if isinstance(obj, dict) and isinstance(obj.get("meta"), dict):
        return obj["meta"]
    return None


def _meta_by_torch(path: Path) -> object:
    """What torchfile.reader leaves to torch (a record it does not know), loaded as safely."""
    import pickle

    from tui_acc.dumps.torchfile.fallback import load_through_torch

    try:
        return load_through_torch(path)
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError):  # FallbackRefused: a ValueError
        return None  # without torch too: the comparison says why when it loads the file


def merge_of_dims(dims: str) -> tuple[str, str]:
    """``"t h[tp]"`` -> ``("cat:1", "")``; ``"t h[tp:partial]"`` -> ``("sum", "")``.

    The grammar is SGLang's (comparator/dims_spec): dims separated by spaces, a dim's parallel
    modifiers in brackets (``axis[:qualifier[+qualifier]]``, comma-separated), declarations after
    ``#``. Returns ``("", why)`` where tui-acc cannot follow it (merged by shape instead).
    """
    shape = dims.split("#", 1)[0].split()
    found: list[tuple[int, bool]] = []
    for position, token in enumerate(shape):
        bracket = re.search(r"\[([^\]]+)\]$", token)
        if bracket is None:
            continue
        for modifier in bracket.group(1).split(","):
            axis, _, qualifiers = modifier.strip().partition(":")
            if axis not in _TP_AXES:
                return "", f"axis {axis!r} is not one tui-acc unshards"
            found.append((position, "partial" in qualifiers.split("+")))
    if not found:
        return "", ""
    if len(found) > 1:
        return "", "more than one tensor-parallel modifier"
    position, partial = found[0]
    return (SUM, "") if partial else (f"{CONCAT}{position}", "")


register(
    DumpReader(
        name="an SGLang dumper folder",
        marks="step=*___rank=*___dump_index=*___name=*...pt",
        claims=claims,
        read=lambda root, options: read(root, rank=options.rank, follow_links=options.follow_links),
        precedence=90,  # last: it lists every folder right below the root, looking for an experiment
    )
)
