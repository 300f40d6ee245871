"""ATB's MoE gating, ``FusedAddTopkDivOperation``, replayed: its first outtensor, the routing weights
``[tokens, k]`` (float32). Semantics from ATB (hicann/ascend-transformer-boost):
``include/atb/infer_op_params.h`` (``FusedAddTopkDivParam`` and its defaults: groupNum 1, groupTopk 1,
n 1, k 1, activationType ACTIVATION_SIGMOID, the only one allowed, isNorm true, scale 1.0,
enableExpertMapping false), the operation's intensors (``src/ops/ops_infer/fused_add_topk_div/
fused_add_topk_div_operation.cpp``: x ``[tokens, experts]``, add_num ``[experts]``, with expert mapping
mapping_num ``[experts]`` and mapping_table ``[experts, c]``), its tests' goldens
(``tests/apitest/opstest/python/operations/fused_add_topk_div/test_fused_add_topk_div_mapping_random.py``,
``tests/apitest/kernelstest/mix/test_fused_add_topk_div.py``) and the kernel
(``src/kernels/mixkernels/fused_add_topk_div/op_kernel/fused_add_topk_div.h``), all in float32:

- ``s = sigmoid(x)``; the experts are chosen on ``s + add_num`` (the bias);
- a group's worth is the sum of its ``n`` largest; the ``groupTopk`` best groups (stable: the lower
  group first among equals) are kept and every other expert's value is set to **0**, not -inf (the
  kernel multiplies by a 0/1 group mask): a kept expert whose ``s + add_num`` is negative loses to a
  discarded one;
- the ``k`` largest, in decreasing order (stable); the weights are ``s`` (without the bias) at them;
- ``isNorm``: divided by their sum, then times ``scale`` (without isNorm, no scale either).

``enableExpertMapping`` rewrites only the second output, the indices, to a replica of each expert
taken from mapping_table (pseudo-randomly: the kernel by the token's row, the op test's golden by a
hash of the sorted indices); the weights are gathered before it and do not depend on it, so they
are replayed, said in a note, and the mapping is not.

torch_npu's entry ``torch_npu.atb.npu_fused_add_topk_div(x, add_num, *, mapping_num=None,
mapping_table=None, activation_type=None, group_num=1, group_topk=1, n=1, k=1, is_norm=True,
scale=1, enable_expert_mapping=False)`` (op-plugin ``op_plugin/ops/atb/FusedAddDivAtb.cpp``: the same
ATB operation; ``activation_type`` ``"activation_sigmoid"`` only) is hooked by msprobe as
``NPU.npu_fused_add_topk_div`` (msprobe's ``python/msprobe/pytorch/dump/api_dump/support_wrap_ops.yaml``
lists ``atb.npu_fused_add_topk_div`` under ``torch_npu``, and ``python/msprobe/core/dump/api_dump/
api_registry.py`` names a record by the API type's prefix and the last part of the dotted name): x and
add_num by position, the rest by keyword (the schema makes them keyword-only); what the caller did
not pass takes the schema's defaults, said.

The choice is discrete: a token whose k-th and next candidate (or whose groupTopk-th and next group)
are within the kernel's float32 arithmetic of each other may be routed either way, and its row is
left out of the comparison, said (as ``npu_moe.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tui_acc.replay import maths
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_moe import TIE, top_k

SIGMOID = 8  # infer_op_params.h ActivationType ACTIVATION_SIGMOID


@dataclass(frozen=True)
class _Params:
    groups: int
    keep: int  # groups kept
    n: int  # summed per group
    k: int
    norm: bool
    scale: float
    mapping: bool


# the parameters by their names in op_param.json (OpParamToJson) and in torch_npu's schema, with the
# defaults of infer_op_params.h and FusedAddDivAtb.cpp (the same values)
_FIELDS = (
    ("groups", "groupNum", "group_num", 1),
    ("keep", "groupTopk", "group_topk", 1),
    ("n", "n", "n", 1),
    ("k", "k", "k", 1),
    ("norm", "isNorm", "is_norm", True),
    ("scale", "scale", "scale", 1.0),
    ("mapping", "enableExpertMapping", "enable_expert_mapping", False),
)


def fused_add_topk_div(call: Call) -> Replayed:
    """``FusedAddTopkDivOperation`` (an msit or msprobe ATB dump): intensor0 x, intensor1 add_num;
    its first outtensor, the weights."""
    if not any(atb in call.keyword for _, atb, _, _ in _FIELDS):
        raise ReplayImpossible(
            "parameter unknown: FusedAddTopkDivOperation without op_param.json "
            "(groupNum, groupTopk, n, k decide the routing)"
        )
    _activation(call.keyword.get("activationType"), "activationType")
    return _weights(call, *_parameters(call, 1, "not in op_param.json: ATB's default"))


def npu_fused_add_topk_div(call: Call) -> Replayed:
    """msprobe's ``NPU.npu_fused_add_topk_div`` (``torch_npu.atb.npu_fused_add_topk_div``): its first
    output, the weights."""
    _activation(call.option("activation_type"), "activation_type")
    return _weights(call, *_parameters(call, 2, "not passed: torch_npu's default"))


def _activation(value: Any, name: str) -> None:
    """ACTIVATION_SIGMOID (8, or its name), or absent: the only activation the operation allows."""
    if value is None:
        return
    if isinstance(value, str):
        if value.lower().removeprefix("activation_") == "sigmoid":
            return
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) == SIGMOID:
        return
    raise ReplayImpossible(f"{name} {value!r}: only ACTIVATION_SIGMOID (8) is defined for this operation")


def _parameters(call: Call, naming: int, defaulted: str) -> tuple[_Params, list[str]]:
    """The parameters by their names in ``_FIELDS`` column ``naming`` (1 ATB's, 2 torch_npu's), each
    one absent at its default, said (but enableExpertMapping, which the weights do not depend on)."""
    notes: list[str] = []
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    for row in _FIELDS:
        field, name, default = row[0], str(row[naming]), row[3]
        value = call.option(name)
        if value is None:
            value = default
            if field != "mapping":
                notes.append(f"{name} {defaulted} {default!r}")
        values[field], names[field] = value, name
    for field in ("groups", "keep", "n", "k"):
        value = values[field]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ReplayImpossible(f"parameter unknown: {names[field]} {value!r} is not a count")
        values[field] = int(value)
    for field in ("norm", "mapping"):
        value = values[field]
        if not isinstance(value, (bool, int, np.integer)) or int(value) not in (0, 1):
            raise ReplayImpossible(f"parameter unknown: {names[field]} {value!r} is not a boolean")
        values[field] = bool(value)
    scale = values["scale"]
    if not isinstance(scale, (int, float, np.number)) or isinstance(scale, bool):
        raise ReplayImpossible(f"parameter unknown: {names['scale']} {scale!r} is not a number")
    if values["keep"] > values["groups"]:
        raise ReplayImpossible(
            f"{names['keep']} {values['keep']} exceeds {names['groups']} {values['groups']}"
        )
    params = _Params(
        values["groups"],
        values["keep"],
        values["n"],
        values["k"],
        values["norm"],
        float(np.float32(scale)),  # the kernel's scale is a float32
        values["mapping"],
    )
    return params, notes


def _weights(call: Call, p: _Params, notes: list[str]) -> Replayed:
    raw = call.raw(0, "x")
    if raw is None:
        raise ReplayImpossible("inputs missing: x (argument 0) was not dumped")
    if raw.ndim != 2:
        raise ReplayImpossible(f"x {list(raw.shape)} is not [tokens, experts]")
    tokens, experts = raw.shape
    if call.output_shape and tuple(call.output_shape) != (tokens, p.k):
        raise ReplayImpossible(
            f"shape mismatch: k {p.k} for x {list(raw.shape)}, the dumped output is {list(call.output_shape)}"
        )
    if experts % p.groups or experts // p.groups < p.n or experts < p.k:
        raise ReplayImpossible(
            f"{experts} experts: not {p.groups} groups of at least {p.n} (n), nor at least k {p.k}"
        )
    bias = call.tensor(1, "add_num", "add_num").reshape(-1)
    if bias.size != experts:
        raise ReplayImpossible(f"shape mismatch: add_num of {bias.size} for {experts} experts")
    x = call.data(0, "x", "x")  # the sampled tokens only, where the output is sampled
    scores = maths.sigmoid(x)
    chosen_on, group_ties = _best_groups(scores + bias.reshape(1, -1), p)
    indices, ties = top_k(chosen_on, p.k)
    y = np.take_along_axis(scores, indices, axis=1)
    roundings = 3  # sigmoid in float32: exp, 1 + e, the reciprocal
    if p.norm:
        y = y / y.sum(axis=1, keepdims=True) * p.scale
        roundings += 2  # the division by the sum, the scale
    if p.mapping:
        notes.append(
            "enableExpertMapping: only the indices (second output) are mapped to a replica; "
            "the weights replayed here do not depend on it"
        )
    return _kept(call, y, ties | group_ties, p.k if p.norm else 1, roundings, notes)


def _best_groups(chosen_on: np.ndarray, p: _Params) -> tuple[np.ndarray, np.ndarray]:
    """The selection scores with every expert outside each token's ``groupTopk`` best groups at 0
    (as the kernel's group mask leaves them), and which tokens hold a near-tie between the last kept
    group and the next."""
    tokens, experts = chosen_on.shape
    grouped = chosen_on.reshape(tokens, p.groups, -1)
    worth = -np.sort(-grouped, axis=2)[..., : p.n].sum(axis=2)
    order = np.argsort(-worth, axis=1, kind="stable")
    kept = np.zeros((tokens, p.groups), dtype=bool)
    kept[np.arange(tokens)[:, None], order[:, : p.keep]] = True
    ties = np.zeros(tokens, dtype=bool)
    if p.keep < p.groups:
        ranked = np.take_along_axis(worth, order, axis=1)
        last, first_out = ranked[:, p.keep - 1], ranked[:, p.keep]
        size = np.maximum(np.maximum(np.abs(last), np.abs(first_out)), 1e-30)
        ties = np.abs(last - first_out) <= TIE * size
    return np.where(kept[..., None], grouped, 0.0).reshape(tokens, experts), ties


def _kept(
    call: Call, y: np.ndarray, ties: np.ndarray, reduction: int, roundings: int, notes: list[str]
) -> Replayed:
    """The weights of the tokens without a near-tie, by their rows of the (sampled) output."""
    rows = call.rows
    if not ties.any():
        return Replayed(y, reduction=reduction, notes=tuple(notes), rows=rows, roundings=roundings)
    if ties.all():
        raise ReplayImpossible(
            f"every one of the {len(ties)} tokens is at a near-tie between experts: "
            "their routing may go either way"
        )
    clear = np.flatnonzero(~ties)
    notes.append(f"{int(ties.sum())} of {len(ties)} tokens at a near-tie between experts: left out")
    return Replayed(
        y[clear],
        reduction=reduction,
        notes=tuple(notes),
        rows=clear if rows is None else rows[clear],
        roundings=roundings,
    )


REFERENCES = {
    "FusedAddTopkDivOperation": fused_add_topk_div,
    "NPU.npu_fused_add_topk_div": npu_fused_add_topk_div,
}
