"""torch_npu's MoE dispatch replayed: the first output, ``expanded_x``, of ``npu_moe_init_routing``
and ``npu_moe_init_routing_v2``, from op-plugin's API docs and the numpy equivalents they give
(``docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_init_routing.md`` and
``torch_npu-npu_moe_init_routing_v2.md``, formerly under ``docs/context/``; the schema defaults from
``op_plugin/config/op_plugin_functions.yaml``).

- ``npu_moe_init_routing(x, row_idx, expert_idx, active_num)``: the flattened ``expert_idx`` sorted
  stably (equal ids keep their order in the flattened table), ``row_idx`` carried along;
  ``expanded_x[i] = x[sorted_row_idx[i] % NUM_ROWS]`` for the first ``min(active_num, NUM_ROWS) * K``
  rows, which is the output's whole shape;
- ``npu_moe_init_routing_v2(x, expert_idx, *, scale, offset, active_num=-1, expert_capacity=-1,
  expert_num=-1, drop_pad_mode=0, ..., quant_mode=-1, active_expert_range=[], row_idx_type=0)``:
  only ids within ``active_expert_range`` ``[start, end)`` (empty: ``[0, expert_num)``) are emitted,
  sorted stably, ``expanded_x[i] = x[sorted_position[i] // K]``; ``active_num`` -1 or 0 keeps every
  emitted row, a positive one at most that many. ``row_idx_type`` only chooses how the second output
  indexes the same permutation: ``expanded_x`` is the same under 0 and 1. ``expert_capacity`` is not
  read without drop/pad (doc). ``quant_mode`` 0, static: ``round(x * scale + offset)``, ``scale`` and
  ``offset`` of one value each, saturated to int8; 1, dynamic: each row times its smoothing row of
  ``scale`` (``(1, H)``, or ``(end - start, H)``: the row of the row's expert, ``id - start``), then
  scaled to 127 at its largest magnitude and rounded.

The output holds ``NUM_ROWS * K`` rows (``min(active_num, NUM_ROWS * K)`` with a positive
``active_num``); those past the routed ones (ids outside the range, or past ``active_num``) are
undefined (doc; op-plugin's test compares only the first ``min(active_num, routed)``): they are left
out of the comparison, said in a note. A large output is compared on a sample of its defined rows.

Refused by name: drop/pad (``drop_pad_mode`` 1, whose ``expert_capacity`` pads each expert), the
float8 / hifloat8 / float4 / int4 quantisations (``quant_mode`` 2-17), an int8 ``x`` with a
quantisation (its output "meaningless", doc), x dtypes the doc does not list. Not settled: on
Atlas inference products (310P) torch_npu calls the older kernel without ``active_expert_range``
(op-plugin ``op_plugin/ops/opapi/MoeInitRoutingV2KernelNpuOpApi.cpp``): a narrower range there is
not honoured, and the replay (which honours it) would disagree.

The routing is discrete: a row gathered from the wrong token, or in the wrong order, is a whole row
apart, far outside any rounding. The quantised outputs may be one step off where the unrounded value
is at a tie (``Replayed.unrounded``); the doc's static quantisation computes in float16.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.npu_quant import FLOAT32_SLACK

# the doc's static quantisation casts x, scale and offset to float16 and rounds the product and the
# sum to it: a few float16 roundings (2**-11 each) before the rounding to integers, relative
FLOAT16_SLACK = 2.0**-8
# the x dtypes the docs list
X_DTYPES = frozenset({"float16", "bfloat16", "float32", "int8"})
# quant_mode values the v2 doc names and this module does not replay
OTHER_QUANT = {
    2: "MXFP8 float8_e5m2",
    3: "MXFP8 float8_e4m3fn",
    4: "MXFP8 per group float8_e5m2",
    5: "MXFP8 per group float8_e4m3fn",
    6: "HIF8 cast",
    7: "HIF8 per tensor",
    8: "HIF8 per token",
    9: "MXFP4",
    11: "FP8 per block float8_e5m2",
    12: "FP8 per block float8_e4m3fn",
    13: "INT4 dynamic",
    14: "MXFP8 per group float8_e5m2 with amax clamp",
    15: "MXFP8 per group float8_e4m3fn with amax clamp",
    16: "MXFP8 float8_e5m2 with amax clamp",
    17: "MXFP8 float8_e4m3fn with amax clamp",
}


def npu_moe_init_routing(call: Call) -> Replayed:
    """``npu_moe_init_routing``'s ``expanded_x``: ``x[row_idx[stable order of expert_idx] % NUM_ROWS]``,
    its first ``min(active_num, NUM_ROWS) * K`` rows."""
    x = _x(call)
    ids = _expert_idx(call, 2, x)
    row_idx = call.raw(1, "row_idx")
    if row_idx is None:
        raise ReplayImpossible("inputs missing: row_idx (argument 1) was not dumped")
    if row_idx.shape != ids.shape or row_idx.dtype.kind not in "iu":
        raise ReplayImpossible(
            f"row_idx {row_idx.dtype} {list(row_idx.shape)}: the doc's is int32 of expert_idx's shape "
            f"{list(ids.shape)}"
        )
    active_num = _integer(call.option("active_num", 3), "active_num")
    if active_num is None or active_num <= 0:
        raise ReplayImpossible(f"active_num {active_num!r}: not recorded, or not a positive count (doc)")
    rows_in, k = ids.shape
    order = np.argsort(ids.reshape(-1), kind="stable")
    sources = row_idx.reshape(-1).astype(np.int64)[order] % rows_in
    defined = min(active_num, rows_in) * k
    dumped = _dumped_rows(call, defined)
    if dumped != defined:
        raise ReplayImpossible(
            f"expanded_x of {dumped} rows: the doc's has min(active_num, NUM_ROWS) * K = {defined}"
        )
    rows, notes = _compared_rows(call, defined)
    return _plain(call, x, sources[_picked(rows, defined)], rows, notes)


def npu_moe_init_routing_v2(call: Call) -> Replayed:
    """``npu_moe_init_routing_v2``'s ``expanded_x`` (dropless): the rows of the experts within
    ``active_expert_range``, in the stable order of their ids, optionally quantised to int8."""
    x = _x(call)
    ids = _expert_idx(call, 1, x)
    drop_pad = _integer(call.option("drop_pad_mode", None, 0), "drop_pad_mode")
    if drop_pad != 0:
        raise ReplayImpossible(
            f"drop_pad_mode {drop_pad} (drop/pad to expert_capacity rows per expert): not replayed here"
        )
    row_idx_type = _integer(call.option("row_idx_type", None, 0), "row_idx_type")
    if row_idx_type not in (0, 1):
        raise ReplayImpossible(f"row_idx_type {row_idx_type}: the doc defines 0 (gather) and 1 (scatter)")
    quant = _integer(call.option("quant_mode", None, -1), "quant_mode")
    if quant in OTHER_QUANT:
        raise ReplayImpossible(f"quant_mode {quant} ({OTHER_QUANT[quant]}): not replayed here")
    if quant not in (-1, 0, 1):
        raise ReplayImpossible(f"quant_mode {quant}: not one the doc defines")
    if quant != -1 and x.dtype == np.int8:
        raise ReplayImpossible(f"quant_mode {quant} of an int8 x: its output is meaningless (doc)")
    wanted = dtype_name(x) if quant == -1 else "int8"
    if call.output_dtype and call.output_dtype != wanted:
        raise ReplayImpossible(
            f"a {call.output_dtype} expanded_x from a {dtype_name(x)} x: quant_mode {quant} "
            f"({'recorded' if 'quant_mode' in call.keyword else 'the default'}) gives {wanted}"
        )
    start, end, notes = _expert_range(call)
    rows_in, k = ids.shape
    flat = ids.reshape(-1).astype(np.int64)
    routed = np.flatnonzero((flat >= start) & (flat < end))
    order = routed[np.argsort(flat[routed], kind="stable")]
    active_num = _integer(call.option("active_num", None, -1), "active_num")
    if active_num is None or active_num < -1:
        raise ReplayImpossible(f"active_num {active_num!r}: the doc allows -1, 0 or a positive count")
    if "active_num" not in call.keyword:
        notes.append("active_num not recorded: torch_npu's default -1, every routed row")
    defined = order.size if active_num <= 0 else min(active_num, order.size)
    total = rows_in * k if active_num <= 0 else min(active_num, rows_in * k)
    if defined == 0:
        raise ReplayImpossible(
            f"no expert id within active_expert_range [{start}, {end}): expanded_x holds no defined row"
        )
    if _dumped_rows(call, total) < defined:
        raise ReplayImpossible(
            f"expanded_x of {_dumped_rows(call, total)} rows, fewer than the {defined} routed"
        )
    rows, said = _compared_rows(call, defined, total)
    notes += said
    positions = order[_picked(rows, defined)]
    sources = positions // k
    if quant == -1:
        return _plain(call, x, sources, rows, notes)
    if quant == 0:
        return _static(call, x, sources, rows, notes)
    return _dynamic(call, x, sources, flat[positions] - start, end - start, rows, notes)


def _x(call: Call) -> np.ndarray:
    x = call.raw(0, "x")
    if x is None:
        raise ReplayImpossible("inputs missing: x (argument 0) was not dumped")
    name = dtype_name(x)
    if name not in X_DTYPES:
        raise ReplayImpossible(f"x {name}: the doc's x is float16, bfloat16, float32 or int8")
    if x.ndim != 2:
        raise ReplayImpossible(f"x {list(x.shape)} is not (NUM_ROWS, H)")
    return x


def _expert_idx(call: Call, index: int, x: np.ndarray) -> np.ndarray:
    ids = call.raw(index, "expert_idx")
    if ids is None:
        raise ReplayImpossible(f"inputs missing: expert_idx (argument {index}) was not dumped")
    if ids.ndim != 2 or ids.shape[0] != x.shape[0] or ids.dtype.kind not in "iu":
        raise ReplayImpossible(
            f"expert_idx {ids.dtype} {list(ids.shape)}: the doc's is int32 (NUM_ROWS, K), "
            f"NUM_ROWS {x.shape[0]}"
        )
    return ids


def _integer(value: Any, what: str) -> int | None:
    """A recorded integer option (None where absent); ReplayImpossible for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ReplayImpossible(f"{what} {value!r}: not an integer")
    return int(value)


def _expert_range(call: Call) -> tuple[int, int, list[str]]:
    """``[start, end)`` of the active experts: ``active_expert_range``, or ``[0, expert_num)``
    where it is empty (doc; op-plugin's op_api does the same)."""
    given = call.option("active_expert_range")
    if given is not None and not isinstance(given, (list, tuple)):
        raise ReplayImpossible(f"active_expert_range {given!r}: not a list")
    if given:
        values = [_integer(v, "active_expert_range") for v in given]
        if len(values) != 2 or values[0] is None or values[1] is None or not 0 <= values[0] < values[1]:
            raise ReplayImpossible(f"active_expert_range {given!r}: not [start, end) with 0 <= start < end")
        return values[0], values[1], []
    expert_num = _integer(call.option("expert_num"), "expert_num")
    if expert_num is None or expert_num <= 0:
        raise ReplayImpossible(
            "active_expert_range empty and expert_num not recorded (or not positive): "
            "the active experts are not known"
        )
    return (
        0,
        expert_num,
        [f"active_expert_range not given: the doc's default [0, expert_num) = [0, {expert_num})"],
    )


def _dumped_rows(call: Call, documented: int) -> int:
    """The dumped output's rows (the documented count where its shape is not known)."""
    shape = call.output_shape
    return int(np.prod(shape[:-1])) if len(shape) >= 2 else documented


def _compared_rows(call: Call, defined: int, total: int | None = None) -> tuple[np.ndarray | None, list[str]]:
    """The output rows the replay computes (None: every one): the ``defined`` first of the output's,
    or, where it is sampled, as many as the sample holds drawn among them (the sample's rows mapped
    onto the defined ones). ``total``: the documented row count."""
    dumped = _dumped_rows(call, defined if total is None else total)
    notes = []
    if dumped > defined:
        notes.append(
            f"rows {defined}..{dumped - 1} of expanded_x lie past the {defined} routed rows "
            "(active_num, active_expert_range): undefined (doc), left out of the comparison"
        )
    if call.sample is not None:
        span = max(1, call.sample.total_rows)
        return np.unique(np.asarray(call.sample.rows, dtype=np.int64) * defined // span), notes
    return (np.arange(defined) if dumped > defined else None), notes


def _picked(rows: np.ndarray | None, defined: int) -> np.ndarray:
    return np.arange(defined) if rows is None else rows


def _plain(
    call: Call, x: np.ndarray, sources: np.ndarray, rows: np.ndarray | None, notes: list[str]
) -> Replayed:
    """The gathered rows of x, as they are (a copy: no arithmetic)."""
    picked = x[sources]
    values = call.wide(picked) if picked.dtype.kind not in "iu" else picked.astype(np.float64)
    # an output of another dtype than x's was cast on the way: one rounding, not a plain copy
    same_dtype = call.output_dtype in ("", dtype_name(x))
    return Replayed(values, rows=rows, notes=tuple(notes), exact=same_dtype)


def _static(
    call: Call, x: np.ndarray, sources: np.ndarray, rows: np.ndarray | None, notes: list[str]
) -> Replayed:
    """``round(x * scale + offset)``, saturated to int8 (quant_mode 0)."""
    scale, offset = call.raw(-1, "scale"), call.raw(-1, "offset")
    if scale is None or offset is None:
        raise ReplayImpossible("quant_mode 0 (static) without scale and offset dumped: the doc requires both")
    if scale.size != 1 or offset.size != 1:
        raise ReplayImpossible(
            f"scale {list(scale.shape)} and offset {list(offset.shape)}: static quantisation's are (1,) (doc)"
        )
    s = float(np.asarray(call.wide(scale), np.float64).reshape(-1)[0])
    o = float(np.asarray(call.wide(offset), np.float64).reshape(-1)[0])
    unrounded = np.asarray(call.wide(x[sources]), np.float64) * s + o
    return _int8(unrounded, rows, notes, FLOAT16_SLACK)


def _dynamic(
    call: Call,
    x: np.ndarray,
    sources: np.ndarray,
    experts: np.ndarray,
    width: int,
    rows: np.ndarray | None,
    notes: list[str],
) -> Replayed:
    """Each row (times its smoothing row) scaled to 127 at its largest magnitude, rounded
    (quant_mode 1). ``experts``: each row's expert, counted from the range's start."""
    values = np.asarray(call.wide(x[sources]), np.float64)
    scale = call.raw(-1, "scale")
    if scale is not None:
        smooth = np.asarray(call.wide(scale), np.float64)
        h = x.shape[1]
        if smooth.ndim != 2 or smooth.shape[1] != h or smooth.shape[0] not in (1, width):
            raise ReplayImpossible(
                f"scale {list(smooth.shape)}: dynamic quantisation's is (1, {h}) or ({width}, {h}) (doc)"
            )
        values = values * (smooth[:1] if smooth.shape[0] == 1 else smooth[experts])
    largest = np.max(np.abs(values), axis=1) if values.shape[1] else np.zeros(values.shape[0])
    zero = largest == 0
    if zero.any():
        rows = np.flatnonzero(~zero) if rows is None else rows[~zero]
        notes = [
            *notes,
            f"{int(zero.sum())} rows all zero: their scale is 0, the doc says no quotient, left out",
        ]
        values, largest = values[~zero], largest[~zero]
        if rows.size == 0:
            raise ReplayImpossible(
                "every compared row is all zero: the doc gives no quantised value for them"
            )
    unrounded = values / (largest / 127.0)[:, None]
    return _int8(unrounded, rows, notes, FLOAT32_SLACK)


def _int8(unrounded: np.ndarray, rows: np.ndarray | None, notes: list[str], slack: float) -> Replayed:
    clipped = np.clip(unrounded, -128, 127)
    return Replayed(
        np.clip(np.rint(unrounded), -128, 127),
        unrounded=clipped,
        step_slack=slack,
        rows=rows,
        notes=tuple(notes),
    )


REFERENCES = {
    "NPU.npu_moe_init_routing": npu_moe_init_routing,
    "NPU.npu_moe_init_routing_v2": npu_moe_init_routing_v2,
}
