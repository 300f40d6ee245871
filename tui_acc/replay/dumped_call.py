"""A node's call at one token, collected from a dump: its tensors by argument, and what the dump
records besides them (msprobe's scalar arguments in dump.json, ATB's op_param.json, msit's weights/).
Read when a node is replayed, never at index time: the readers keep names only, and one record of
dump.json is decoded from where its name stands, not the whole file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import bfloat16_if_exact, dtype_name, is_float
from tui_acc.dumps.loading import load_side
from tui_acc.dumps.model import DumpError, DumpIndex, TensorRef
from tui_acc.dumps.msprobe.records import dump_json_of, record_of
from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.tensors import TensorLoadError, load_tensor
from tui_acc.replay import collective
from tui_acc.replay.call import CONSTITUENTS, Call, ProcessGroup
from tui_acc.replay.sampling import plan

_POSITIONAL = re.compile(r"^(?:input[._]|intensor)(\d+)$")
_KEYWORD = re.compile(r"^input\.([A-Za-z_]\w*)$")
# an argument that is a list of tensors (msprobe: input.0.1, input.weight.2): a list of arrays
_LISTED = re.compile(r"^input\.(\d+|[A-Za-z_]\w*)\.(\d+)$")
_PARAMETER = re.compile(r"^parameters\.(\w+)$")
_FIRST_OUTPUTS = ("output.0", "output", "output_0", "outtensor0")
_LIST_DEPTH = 32  # nested argument lists read (a forged record nests them past the recursion limit)
_OP_PARAMS = "op_param.json"  # ATB: beside before/ and after/ (Probe::SaveParam; docs/formats.md §2.2)


@dataclass
class Gathered:
    """What a side holds of a node: the call to replay, its dumped output, and what was skipped."""

    call: Call
    output: np.ndarray | None
    output_slot: str | None
    missing: list[str] = field(default_factory=list)  # why a tensor could not be read
    statistics_only: bool = False


def gather(
    index: DumpIndex, token: int, node: str, sample: bool = True, focus: int | None = None
) -> Gathered:
    """The call of ``node`` at ``token`` in ``index``; tensors that fail to load are named in ``missing``.
    ``sample``: a large output is replayed on a seeded sample of its rows (replay/sampling.py), which
    holds ``focus`` (a flat output index: where the two sides differ most)."""
    found = index.tree.nodes.get(node)
    node_type = found.type if found is not None else "?"
    refs = index.tensors(token, node)
    policy = index.load_policy
    missing: list[str] = []
    positional: dict[int, Any] = {}
    keyword: dict[str, Any] = {}
    params: dict[str, np.ndarray] = {}

    # TorchAir's FX dump saved bf16 as float32: a replay's tolerance is the bf16 kernel's
    narrowed = bfloat16_if_exact if index.format == "torchair-fx" else np.asarray

    def load(ref: TensorRef) -> np.ndarray | None:
        try:
            return narrowed(load_side(ref, None, policy))
        # DumpError: ranks (--gather) that do not merge; a merge that needs the golden's shape takes
        # rank 0's whole here (no golden beside it): a sharded tensor then shows as a shape mismatch
        except (TensorLoadError, DumpError, ValueError, OSError) as exc:
            missing.append(f"{ref.slot}: {exc}")
            return None

    listed: dict[str, dict[int, np.ndarray]] = {}
    for ref in refs:
        if ref.role == "output" or not ref.has_data:
            continue
        slot = ref.slot.removesuffix(".after")
        if slot != ref.slot:
            continue  # an input dumped again after the run: the one before it is the operator's input
        if (match := _LISTED.match(slot)) is not None:
            if (value := load(ref)) is not None:
                listed.setdefault(match.group(1), {})[int(match.group(2))] = value
        elif (match := _POSITIONAL.match(slot)) is not None:
            if (value := load(ref)) is not None:
                positional[int(match.group(1))] = value
        elif (match := _KEYWORD.match(slot)) is not None:
            if (value := load(ref)) is not None:
                keyword[match.group(1)] = value
        elif (match := _PARAMETER.match(slot)) is not None and (value := load(ref)) is not None:
            params[match.group(1)] = value
    for name, items in listed.items():
        ordered = [items[i] for i in sorted(items)]
        if name.isdigit():
            positional.setdefault(int(name), ordered)
        else:
            keyword.setdefault(name, ordered)
    # a gathered rank's own call: its record is under the name its rank's dump.json gives it
    record = index.origins.get(node, (0, node))[1]
    _add_recorded_arguments(refs, record, policy, positional, keyword)
    _add_atb_params(refs, policy, keyword)
    _add_graph_attrs(index, node, keyword)
    _add_msit_weights(index, node, policy, params)
    outputs = [r for r in refs if r.role == "output" and r.has_data]
    first = next((r for slot in _FIRST_OUTPUTS for r in outputs if r.slot == slot), None) or next(
        iter(outputs), None
    )
    output = load(first) if first is not None else None
    every_output: dict[int, np.ndarray] = {}
    if _api(node) in MULTI_OUTPUT:  # references that check more than the first output
        for ref in outputs:
            match = re.match(r"^output(?:\.(\d+))?$", ref.slot)  # a lone tensor: "output"
            if match is None:
                continue
            value = output if ref is first else load(ref)
            if value is not None:
                every_output[int(match.group(1) or 0)] = value
    shape = tuple(output.shape) if output is not None else ()
    after, after_by = _written_back(index, token, node, refs, output, missing)
    call = Call(
        name=node,
        type=node_type,
        format=index.format,
        positional=positional,
        keyword=keyword,
        params=params,
        output_dtype=dtype_name(output) if output is not None else "",
        output_shape=shape,
        precision=_precision(output),
        sample=plan(shape, node, focus) if sample else None,
        focus=focus,
        after=after,
        after_by=after_by,
        outputs=every_output,
        ranks=_ranks_of(refs, node, node_type, policy, missing),
        rank_params=_rank_params_of(refs, node, node_type, policy),
    )
    statistics_only = bool(refs) and not any(r.has_data for r in refs)
    return Gathered(call, output, first.slot if first is not None else None, missing, statistics_only)


def _ranks_of(
    refs: list[TensorRef], node: str, node_type: str, policy: LoadPolicy, missing: list[str]
) -> dict[str, tuple[np.ndarray, ...]]:
    """A gathered collective's data input and output on every rank (replay/collective.py); empty for
    any other node. ATB's intensor0 / outtensor0; msprobe's in-place arguments: ``input.0`` of an
    all-reduce, ``input.1`` of ``reduce_scatter*(output, input)`` and ``all_gather*(output, input)``."""
    kind = collective.collective_kind(node_type, node)
    if kind is None or not any(ref.parts for ref in refs):
        return {}
    if any(ref.slot.startswith(("intensor", "outtensor")) for ref in refs):
        slots = {"input": "intensor0", "output": "outtensor0"}
    else:
        slots = {"input": "input.0" if kind == "all_reduce" else "input.1", "output": "output.0"}
    found: dict[str, tuple[np.ndarray, ...]] = {}
    for role, slot in slots.items():
        ref = next((r for r in refs if r.slot == slot and r.parts and r.has_data), None)
        if ref is None:
            return {}
        try:
            found[role] = tuple(load_tensor(part, policy) for part in ref.parts)
        except (TensorLoadError, OSError) as exc:
            missing.append(f"{slot} on one of its ranks: {exc}")
            return {}
    return found


# all_to_all_single(output, input, output_split_sizes, input_split_sizes): its arguments by position
_ALL_TO_ALL_ARGUMENTS = ("output", "input", "output_split_sizes", "input_split_sizes")


def _rank_params_of(
    refs: list[TensorRef], node: str, node_type: str, policy: LoadPolicy
) -> tuple[dict[str, Any], ...]:
    """A gathered all-to-all's recorded parameters on every rank (how each split its input): ATB's
    op_param.json beside each rank's tensors, msprobe's arguments in each rank's dump.json by name;
    empty for any other node."""
    if collective.collective_kind(node_type, node) != "all_to_all":
        return ()
    ref = next((r for r in refs if r.parts and r.role == "input"), None)
    if ref is None:
        return ()
    found: list[dict[str, Any]] = []
    for part in ref.parts:
        if part.parent.name in ("before", "after"):  # ATB
            try:
                raw = policy.read_json(part.parent.parent / _OP_PARAMS)
            except (OSError, ValueError):
                raw = {}
            found.append(raw if isinstance(raw, dict) else {})
            continue
        dump_json = dump_json_of([replace(ref, location=str(part), parts=())])
        record = record_of(dump_json, node, policy) if dump_json is not None else None
        found.append(all_to_all_arguments(record) if record is not None else {})
    return tuple(found)


def all_to_all_arguments(record: dict[str, Any]) -> dict[str, Any]:
    """An msprobe all-to-all record's non-tensor arguments by name: its keywords, and its positional
    arguments by ``all_to_all_single``'s signature (its split sizes)."""
    named: dict[str, Any] = {}
    for position, arg in enumerate(record.get("input_args") or []):
        if position < len(_ALL_TO_ALL_ARGUMENTS) and not _is_tensor(arg):
            named[_ALL_TO_ALL_ARGUMENTS[position]] = scalar_of(arg)
    for key, arg in (record.get("input_kwargs") or {}).items():
        if not _is_tensor(arg):
            named[str(key)] = scalar_of(arg)
    return named


# operators whose reference reads the dumped outputs itself: a rope's rotated query and key, both
# checked; an int64 that packs a scale, decoded before it is compared
MULTI_OUTPUT = frozenset({"NPU.npu_apply_rotary_pos_emb", "NPU.npu_mrope", "NPU.npu_trans_quant_param"})
# KV-cache writes that return nothing (msprobe records no output), and the records that read a
# cache afterwards: the write is checked against what the next of those took in
CACHE_WRITES = frozenset({"NPU.npu_scatter_pa_kv_cache", "NPU._npu_reshape_and_cache"})
CACHE_READERS = frozenset(
    {
        "NPU.npu_fused_infer_attention_score",
        "NPU.npu_fused_infer_attention_score_v2",
        "NPU.npu_incre_flash_attention",
        "NPU.npu_prompt_flash_attention",
        "NPU._npu_paged_attention",
    }
)


def _api(node: str) -> str:
    """``NPU.npu_x`` of ``NPU.npu_x.3.forward`` (msprobe's API records)."""
    parts = node.split(".")
    return ".".join(parts[:2]) if len(parts) >= 4 and parts[-1] == "forward" else node


def _written_back(
    index: DumpIndex,
    token: int,
    node: str,
    refs: list[TensorRef],
    output: np.ndarray | None,
    missing: list[str],
) -> tuple[dict[str, np.ndarray], str]:
    """What a KV-cache write wrote, as dumped: an ATB ReshapeAndCache's own outtensors (the caches
    after it ran), or for a torch_npu write that returns nothing, what the next cache reader took in."""
    found = index.tree.nodes.get(node)
    if found is not None and found.type == "ReshapeAndCacheOperation":
        after: dict[str, np.ndarray] = {}
        for ref in refs:
            name = {"outtensor0": "key", "outtensor1": "value"}.get(ref.slot)
            if name == "key" and output is not None:
                after[name] = output  # the first output, read already
            elif name is not None and ref.has_data:
                try:
                    after[name] = load_side(ref, None, index.load_policy)
                except (TensorLoadError, DumpError, ValueError, OSError) as exc:
                    missing.append(f"{ref.slot}: {exc}")
        return after, "its own outtensors (the caches after it ran)"
    return ({}, "") if output is not None else _cache_reader(index, token, node, missing)


def _cache_reader(
    index: DumpIndex, token: int, node: str, missing: list[str]
) -> tuple[dict[str, np.ndarray], str]:
    """For a KV-cache write: the first later sibling that reads a KV cache, its key and value
    arguments (1, 2) and its name; nothing for any other node."""
    found = index.tree.nodes.get(node)
    if _api(node) not in CACHE_WRITES or found is None or found.parent is None:
        return {}, ""
    siblings = index.tree.children(found.parent)
    for later in siblings[siblings.index(node) + 1 :]:
        if _api(later) in CACHE_WRITES:
            break  # the next layer's write: a reader after it reads another cache
        if _api(later) not in CACHE_READERS:
            continue
        read: dict[str, np.ndarray] = {}
        for ref in index.tensors(token, later):
            slot = {"input.1": "key", "input.2": "value", "input.key": "key", "input.value": "value"}.get(
                ref.slot
            )
            if slot is None or not ref.has_data:
                continue
            try:
                read[slot] = load_side(ref, None, index.load_policy)
            except (TensorLoadError, DumpError, ValueError, OSError) as exc:
                missing.append(f"{later} {ref.slot}: {exc}")
        return read, f"{later}'s key and value caches"
    return {}, ""


def _precision(output: np.ndarray | None) -> type[np.floating[Any]]:
    """float32 arithmetic for outputs of 16 bits or fewer (float32's rounding is 2**16 times finer than
    bf16's: the replay's own error vanishes beside the output's), float64 for the rest."""
    if output is not None and is_float(output) and output.dtype.itemsize <= 2:
        return np.float32
    return np.float64


def recorded_arguments(index: DumpIndex, token: int, node: str) -> dict[str, Any]:
    """The non-tensor arguments a dump records for a call, by name (``argument 3`` where only the
    position is known): msprobe's dump.json scalars, an ATB operation's op_param.json. No tensor is
    read."""
    refs = index.tensors(token, node)
    positional: dict[int, Any] = {}
    keyword: dict[str, Any] = {}
    record = index.origins.get(node, (0, node))[1]  # a gathered rank's own call: its rank's name
    _add_recorded_arguments(refs, record, index.load_policy, positional, keyword)
    _add_atb_params(refs, index.load_policy, keyword)
    found = {f"argument {i}": value for i, value in positional.items() if value is not None}
    found.update({key: value for key, value in keyword.items() if value is not None})
    return found


def _add_recorded_arguments(
    refs: list[TensorRef], node: str, policy: LoadPolicy, positional: dict[int, Any], keyword: dict[str, Any]
) -> None:
    """msprobe writes a call's non-tensor arguments into dump.json (``{"type": "float", "value": 1e-06}``):
    they become the call's scalars (eps, dim, alpha) where no tensor took their place."""
    dump_json = dump_json_of(refs)
    record = record_of(dump_json, node, policy) if dump_json is not None else None
    if record is None:
        return
    for index, arg in enumerate(record.get("input_args") or []):
        if index not in positional and not _is_tensor(arg):
            positional[index] = scalar_of(arg)
    for key, arg in (record.get("input_kwargs") or {}).items():
        if key not in keyword and not _is_tensor(arg):
            keyword[str(key)] = scalar_of(arg)


def _is_tensor(arg: Any) -> bool:
    return isinstance(arg, dict) and arg.get("type") == "torch.Tensor"


def scalar_of(arg: Any, depth: int = 0) -> Any:
    """A dump.json argument entry as a Python value (lists element by element, to 32 levels: a
    deeper one is no argument a reference reads, None; tensors as None)."""
    if isinstance(arg, list):
        return [scalar_of(item, depth + 1) for item in arg] if depth < _LIST_DEPTH else None
    if isinstance(arg, dict):
        if _is_tensor(arg):
            return None
        if arg.get("type") == "torch.ProcessGroup" and isinstance(arg.get("group_ranks"), list):
            return ProcessGroup(tuple(r for r in arg["group_ranks"] if isinstance(r, int)))
        if "value" in arg:
            value = arg["value"]
            return (
                value.removeprefix("torch.")
                if arg.get("type") == "torch.dtype" and isinstance(value, str)
                else value
            )
        return None
    return arg


def _add_atb_params(refs: list[TensorRef], policy: LoadPolicy, keyword: dict[str, Any]) -> None:
    """ATB: the operation's parameters from op_param.json in its folder (absent: the references'
    defaults, each said in the notes)."""
    for ref in refs:
        path = ref.path
        if path.parent.name not in ("before", "after"):
            continue
        file = path.parent.parent / _OP_PARAMS
        if not policy.is_file(file):  # on the node holding it, under --ray
            return
        try:
            params = policy.read_json(file, parse_constant=lambda _c: None)
        except (OSError, ValueError):
            return
        if isinstance(params, dict):
            for key, value in params.items():
                keyword.setdefault(str(key), value)
        return


def _add_graph_attrs(index: DumpIndex, node: str, keyword: dict[str, Any]) -> None:
    """A TorchAir GE op's attributes (``transpose_x2``, ``axes``), which its graph text holds; a fused
    op's constituents (their ops, edges and attributes) under ``CONSTITUENTS``."""
    if index.format != "torchair-ge":
        return
    from tui_acc.dumps.torchair.graph_texts import fused, op_of

    op = op_of(index, node)
    for key, value in (op.attrs if op is not None else {}).items():
        keyword.setdefault(key, value)
    if op is None and (parts := fused(index, node)) is not None:  # what ge_ops.fused runs
        keyword[CONSTITUENTS] = parts


def _add_msit_weights(index: DumpIndex, node: str, policy: LoadPolicy, params: dict[str, np.ndarray]) -> None:
    """msit torch with ``dump_weight=True``: ``weights/{module}.{parameter}.pth`` in the device folder
    (docs/formats.md §1.1)."""
    if index.format != "msit-torch":
        return
    folder = index.data_dir / "weights"
    for name in ("weight", "bias"):
        file = folder / f"{node}.{name}.pth"
        if name not in params and policy.is_file(file):
            try:
                from tui_acc.dumps.tensors import load_tensor

                params[name] = load_tensor(file, policy)
            except TensorLoadError:
                continue
