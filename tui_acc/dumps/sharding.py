"""Whether a dump's ranks are one model split across devices, and how, read from its operators'
types alone (no tensor, no numpy: the TUI's title says it before its first frame)."""

from __future__ import annotations

import re
from typing import Literal

from tui_acc.dumps.model import CONCAT, DumpIndex

Kind = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
Reduction = Literal["sum", "avg", "prod", "max", "min", "gather"]

# ATB operation types (AllReduceOperation, the runner AllReduceHcclRunner, ReduceScatterOperation,
# AllGatherOperation, AllToAllOperation, AllToAllVOperation) and msprobe API names
# (Distributed.all_reduce.N.forward, reduce_scatter_tensor, _all_gather_base, all_to_all_single ...),
# compared without case or underscores
_KINDS: tuple[tuple[str, Kind], ...] = (
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
)
# fused operations that hold a collective but whose inputs are not what is exchanged (a matmul
# with its all-reduce, MC2, an all-to-all fused with a grouped matmul, MoE dispatch and combine)
# (ATB's AllToAllVV2Operation takes its splits as input tensors, which no reader here decodes: it is
# left unjudged rather than checked with equal splits; npu_mm_all_reduce_base and its kin are matmuls)
_FUSED = re.compile(
    r"linear|matmul|mc2|gmm|moe|dispatch|combine|alltoallvv2|mmallreduce|basemm|mmreducescatter",
    re.IGNORECASE,
)


def kind_of(node_type: str) -> Kind | None:
    """Which collective a node's type (or msprobe record name) names, if any."""
    compact = node_type.lower().replace("_", "")
    if _FUSED.search(compact):
        return None
    return next((kind for word, kind in _KINDS if word in compact), None)


def collective_kind(node_type: str, name: str) -> Kind | None:
    """A node's collective kind by its type, else by its record name (msprobe's ``Distributed.*``)."""
    return kind_of(node_type) or kind_of(name)


def reduction_named(value: object) -> Reduction | None:
    """ATB's ``sum|max|min|prod``, torch's ``RedOpType.SUM|AVG|MAX|MIN|PRODUCT``."""
    if not isinstance(value, str):
        return None
    word = value.rsplit(".", 1)[-1].lower()
    names: dict[str, Reduction] = {"sum": "sum", "avg": "avg", "max": "max", "min": "min", "prod": "prod"}
    return names.get("prod" if word == "product" else word)


# what a model split across ranks runs, in its operators' types (case and underscores aside): ATB's
# collectives and LinearParallelOperation, msprobe's Distributed.* records, vLLM's parallel layers
_TENSOR_PARALLEL = (
    "allreduce",
    "reducescatter",
    "allgather",
    "linearparallel",
    "parallellinear",
    "parallelembedding",
)
_EXPERT_PARALLEL = ("alltoall", "distributedispatch", "distributecombine")


def parallel_kinds(index: DumpIndex) -> list[str]:
    """How the run a rank's dump comes from was split, from its operators: "tensor-parallel" (an
    all-reduce, a parallel linear), "expert-parallel" (an all-to-all dispatching tokens, or gathered
    ranks that ran calls of their own); none found:
    empty. A reader's merge annotations (SGLang's ``[tp]`` dims) count as tensor-parallel."""
    names = " ".join({node.type.lower().replace("_", "") for node in index.tree.nodes.values()})
    annotated = any(
        ref.merge.startswith(CONCAT)
        for refs in next(iter(index.tokens.values()), {}).values()
        for ref in refs
    )
    # gathered ranks that each ran calls of their own (dumps/rank_alignment.py): each its own experts,
    # whose partial sums an all-reduce then adds (no tensor-parallel split in that alone)
    experts = bool(index.origins) or any(word in names for word in _EXPERT_PARALLEL)
    split = [word for word in _TENSOR_PARALLEL if word in names]
    kinds = []
    if annotated or (split and not (index.origins and set(split) <= {"allreduce"})):
        kinds.append("tensor-parallel")
    if experts:
        kinds.append("expert-parallel")
    return kinds


def sharding(index: DumpIndex) -> str | None:
    """How a gathered dump was split, as the first lines say it ("tensor-parallel, 2 ranks"); None
    for a dump read as one."""
    if index.rank is not None or len(index.ranks) < 2:
        return None
    return f"{' and '.join(parallel_kinds(index)) or 'sharded'}, {len(index.ranks)} ranks"
