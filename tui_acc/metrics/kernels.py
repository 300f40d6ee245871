"""Metric kernels: one golden/test tensor pair in, one row of float64 metrics out.

numpy arrays in (``tui_acc.dumps.dtypes``: bf16 and the 8-bit floats as ml_dtypes' types), no
state, no torch. Work is done in row chunks so a multi-GB tensor never needs a full float64 copy;
every sum is accumulated in float64.

Definitions (they differ from msit's on purpose, see docs/metrics.md):

- cosine: g·t / (‖g‖‖t‖); 1 when both are all zero, 0 when exactly one is; none (nor any other
  metric) when no element is finite on both sides.
- max/mean absolute error: over every element (msit ignores elements where |g| <= 1.19e-7).
- max/mean relative error: |t - g| / |g| over elements with |g| > 1.19e-7, the mean divided by
  the number of those elements (msit divides by all N).
- relative euclidean distance: ‖t - g‖ / ‖g‖.
- KL divergence: softmax along the last axis, one distribution per row, KL(golden || test)
  per row, averaged over rows (msit takes one softmax over the whole flattened tensor, in fp32).

Elements that are NaN or Inf on either side are counted and left out of the metrics.
"""

from __future__ import annotations

import math

import numpy as np

from tui_acc.dumps.dtypes import BFLOAT16, dtype_name, is_complex, is_float, widened
from tui_acc.errors import TuiAccError
from tui_acc.metrics import fastkernel
from tui_acc.metrics import kernel_layout as layout
from tui_acc.metrics.kernel_sums import Sums, finish
from tui_acc.metrics.top_k import NO_TOP, top1

# Below this |golden| a relative error means nothing (fp32 machine epsilon, as msit uses).
REL_ERR_FLOOR = 1.1920928955078125e-07
# Rows per chunk are chosen so a chunk holds about this many elements: small enough that a chunk
# widened to float32 (1 MiB) is still in the CPU's cache when the kernel reads it, large enough that
# the per-chunk overhead does not count. Measured on the 7B-shaped pair (one worker, CPU time):
# 2**20 elements 0.52-0.57 s, 2**18 0.44-0.49 s, 2**16 0.48-0.60 s.
CHUNK_ELEMENTS = 1 << 18


class ShapeMismatch(TuiAccError, ValueError):
    """The two tensors hold a different number of elements."""


def compare_tensors(golden: np.ndarray, test: np.ndarray, kl: bool = True) -> dict[str, object]:
    """Compute every metric of one pair. Raises ShapeMismatch if element counts differ.

    ``kl=False`` skips the KL divergence (a softmax per row costs more than everything else
    together): the engine asks for it on logits, where it means something.
    """
    if golden.size != test.size:
        raise ShapeMismatch(f"element counts differ: golden {list(golden.shape)} vs test {list(test.shape)}")
    row = {
        "numel": golden.size,
        "golden_dtype": dtype_name(golden),
        "test_dtype": dtype_name(test),
        "golden_shape": list(golden.shape),
        "test_shape": list(test.shape),
    }
    if is_complex(golden) or is_complex(test):
        # Complex tensors compare as (real, imag) pairs; KL over them would mean nothing.
        golden, test = _as_real_pairs(golden), _as_real_pairs(test)
        float_pair = False
    else:
        float_pair = is_float(golden) and is_float(test)
    with_kl = kl and float_pair
    width = _row_width(golden, test)
    sums, nan = sweep(golden, test, with_kl)
    row.update(nan)
    row.update(finish(sums, with_kl))
    row.update(top1(golden, test, width, CHUNK_ELEMENTS) if float_pair else NO_TOP)
    return row


def sweep(golden: np.ndarray, test: np.ndarray, with_kl: bool) -> tuple[Sums, dict[str, int]]:
    """The running sums of one real pair of as many elements (``compare_tensors``' sweep), and its
    NaN and Inf counts: what a part of a tensor adds to the whole's (``region_sums.py``)."""
    width = _row_width(golden, test)
    blocks = _blocks(golden, test, width, with_kl)
    nan = {"golden_nan": 0, "golden_inf": 0, "test_nan": 0, "test_inf": 0}
    if fastkernel.available():
        sums = _sweep_compiled(blocks, with_kl, nan)
    else:
        sums = Sums()
        for g2, t2, block_width, base in blocks:
            rows_per_chunk = max(1, CHUNK_ELEMENTS // block_width)
            for start in range(0, g2.shape[0], rows_per_chunk):
                g = widened(g2[start : start + rows_per_chunk]).astype(np.float64)
                t = widened(t2[start : start + rows_per_chunk]).astype(np.float64)
                # overflowing squares and Inf - Inf are expected: they route a chunk to the careful path
                with np.errstate(over="ignore", invalid="ignore"):
                    _accumulate(g, t, sums, nan, kl=with_kl, offset=base + start * block_width)
    return sums, nan


def warm_up() -> None:
    """Load the compiled kernel's signatures (float32 and float64 chunks) now, not at the first pair."""
    if not fastkernel.available():
        return
    state, counts = layout.new_state()
    for dtype in (np.float32, np.float64):
        one = np.zeros((1, 1), dtype=dtype)
        fastkernel.sweep(one, one, 0, True, state, counts)


# (golden rows, test rows, row width, index of the first element): the views a comparison sweeps
Block = tuple[np.ndarray, np.ndarray, int, int]


def _blocks(golden: np.ndarray, test: np.ndarray, width: int, with_kl: bool) -> list[Block]:
    """Row views covering every element once, in order.

    Rows are the softmax axis, which only KL needs. Without KL a long row (a 1-D tensor of 50M
    values) is cut into chunk-wide rows, so that widening it (bf16 to fp32) never copies more than
    a chunk: memory stays bounded by the chunk, not by the tensor.
    """
    g, t = golden, test
    if not g.size:
        return [(g.reshape(0, 1), t.reshape(0, 1), 1, 0)]
    if with_kl or width <= CHUNK_ELEMENTS:
        return [(g.reshape(-1, width), t.reshape(-1, width), width, 0)]
    flat_g, flat_t = g.reshape(-1), t.reshape(-1)
    whole = flat_g.size // CHUNK_ELEMENTS * CHUNK_ELEMENTS
    blocks: list[Block] = [
        (
            flat_g[:whole].reshape(-1, CHUNK_ELEMENTS),
            flat_t[:whole].reshape(-1, CHUNK_ELEMENTS),
            CHUNK_ELEMENTS,
            0,
        )
    ]
    if whole < flat_g.size:
        tail = flat_g.size - whole
        blocks.append((flat_g[whole:].reshape(1, tail), flat_t[whole:].reshape(1, tail), tail, whole))
    return blocks


def _sweep_compiled(blocks: list[Block], kl: bool, nan: dict[str, int]) -> Sums:
    """The same sums from ``fastkernel``, chunk by chunk, chunks widened to float32/64 first; a
    bfloat16 test chunk against a float32 or bfloat16 golden swept as it lies where the C kernel can
    (``sweep_bf16``: widening it was a third of the sweep's time on a bf16 port)."""
    state, counts = layout.new_state()
    as_bf16 = fastkernel.bf16_sweep() if blocks and _sweeps_as_bf16(blocks[0][0], blocks[0][1]) else None
    for g2, t2, width, base in blocks:
        rows_per_chunk = max(1, CHUNK_ELEMENTS // width)
        for start in range(0, g2.shape[0], rows_per_chunk):
            g_rows, t_rows = g2[start : start + rows_per_chunk], t2[start : start + rows_per_chunk]
            if as_bf16 is not None:
                as_bf16(_bf16_bits(g_rows), _bf16_bits(t_rows), base + start * width, kl, state, counts)
                continue
            g, t = _kernel_chunks(g_rows, t_rows)
            fastkernel.sweep(g, t, base + start * width, kl, state, counts)
    for key, index in (
        ("golden_nan", layout.C_GNAN),
        ("golden_inf", layout.C_GINF),
        ("test_nan", layout.C_TNAN),
        ("test_inf", layout.C_TINF),
    ):
        nan[key] = int(counts[index])
    sums = Sums(
        dot=float(state[layout.S_GT]),
        gg=float(state[layout.S_GG]),
        tt=float(state[layout.S_TT]),
        dd=float(state[layout.S_DD]),
        abs_sum=float(state[layout.S_AD]),
        abs_max=float(state[layout.M_AMAX]),
        rel_sum=float(state[layout.S_REL]),
        rel_max=float(state[layout.M_RELMAX]),
        rel_count=int(counts[layout.C_REL]),
        finite=int(counts[layout.C_N]),
        g_sum=float(state[layout.S_G]),
        t_sum=float(state[layout.S_T]),
        g_max=float(state[layout.M_GMAX]),
        g_min=float(state[layout.M_GMIN]),
        t_max=float(state[layout.M_TMAX]),
        t_min=float(state[layout.M_TMIN]),
        kl_sum=float(state[layout.S_KL]),
        kl_rows=int(counts[layout.C_KLROWS]),
        within_1e3=int(counts[layout.C_1E3]),
        within_5e3=int(counts[layout.C_5E3]),
    )
    if counts[layout.C_WIDX] >= 0:
        sums.worst_index = int(counts[layout.C_WIDX])
        sums.worst_golden = float(state[layout.M_WG])
        sums.worst_test = float(state[layout.M_WT])
    return sums


def _sweeps_as_bf16(golden: np.ndarray, test: np.ndarray) -> bool:
    """Whether ``sweep_bf16`` takes the pair as it lies: a bfloat16 test, a float32 or bfloat16 golden."""
    return test.dtype == BFLOAT16 and golden.dtype in (BFLOAT16, np.float32)


def _bf16_bits(rows: np.ndarray) -> np.ndarray:
    """Rows as ``sweep_bf16`` takes them: contiguous, bfloat16 as its bits (uint16)."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.uint16) if rows.dtype == BFLOAT16 else rows


def _kernel_chunks(golden: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both chunks widened (exactly) to one type, float32 or float64: the compiled kernel then needs
    two signatures, not four (each one costs its load at start-up, a compilation on a new machine)."""
    g, t = widened(golden), widened(test)
    if g.dtype != t.dtype:
        g, t = g.astype(np.float64), t.astype(np.float64)
    return g, t


def _as_real_pairs(values: np.ndarray) -> np.ndarray:
    """A complex tensor as (real, imag) float64 pairs; a real one with zero imaginary parts."""
    if is_complex(values):
        return np.ascontiguousarray(values, dtype=np.complex128).view(np.float64).reshape(*values.shape, 2)
    return np.stack((widened(values).astype(np.float64), np.zeros(values.shape)), axis=-1)


def _row_width(golden: np.ndarray, test: np.ndarray) -> int:
    """Length of the softmax axis: the last dim, when both sides agree on it."""
    if golden.ndim and test.ndim and golden.shape[-1] == test.shape[-1] and golden.shape[-1] > 0:
        return int(golden.shape[-1])
    return max(golden.size, 1)


def _accumulate(
    g: np.ndarray, t: np.ndarray, s: Sums, nan: dict[str, int], kl: bool, offset: int = 0
) -> None:
    """The kernel without numba: one float64 chunk at a time, in numpy."""
    gg, tt = float(np.dot(g.ravel(), g.ravel())), float(np.dot(t.ravel(), t.ravel()))
    # Squares of finite fp32/fp16/bf16 values cannot overflow float64, so finite sums of squares
    # prove every element finite: the common case pays for no isfinite() pass at all.
    if math.isfinite(gg + tt):
        _add(g, t, s, gg, tt, valid=None, offset=offset)
        if kl:
            _add_kl(g, t, s)
        return
    valid = np.isfinite(g) & np.isfinite(t)
    nan["golden_nan"] += int(np.isnan(g).sum())
    nan["test_nan"] += int(np.isnan(t).sum())
    nan["golden_inf"] += int(np.isinf(g).sum())
    nan["test_inf"] += int(np.isinf(t).sum())
    gf, tf = np.where(valid, g, 0.0), np.where(valid, t, 0.0)
    _add(gf, tf, s, float((gf * gf).sum()), float((tf * tf).sum()), valid, offset)
    rows = valid.all(axis=-1)
    if kl and bool(rows.any()):
        _add_kl(g[rows], t[rows], s)


def _add(
    g: np.ndarray, t: np.ndarray, s: Sums, gg: float, tt: float, valid: np.ndarray | None, offset: int
) -> None:
    """Accumulate one chunk whose non-finite elements (``~valid``) are already zeroed."""
    diff = np.abs(t - g)
    s.finite += g.size if valid is None else int(valid.sum())
    if diff.size and (valid is None or bool(valid.any())):
        ranked = diff if valid is None else np.where(valid, diff, -1.0)  # never a non-finite position
        worst = int(ranked.argmax())
        if s.worst_index is None or float(diff.reshape(-1)[worst]) > s.abs_max:
            s.worst_index = offset + worst
            s.worst_golden = float(g.reshape(-1)[worst])
            s.worst_test = float(t.reshape(-1)[worst])
    s.dot += float((g * t).sum())
    s.gg += gg
    s.tt += tt
    s.dd += float((diff * diff).sum())
    s.abs_sum += float(diff.sum())
    s.g_sum += float(g.sum())
    s.t_sum += float(t.sum())
    if diff.size:
        s.abs_max = max(s.abs_max, float(diff.max()))
    g_abs = np.abs(g)
    # msprobe's thousandth ratios: relative error with fp32 eps standing in for a zero golden
    rel_all = diff / np.where(g == 0, REL_ERR_FLOOR, g_abs)
    close_1e3, close_5e3 = rel_all < 1e-3, rel_all < 5e-3
    if valid is not None:
        close_1e3 &= valid
        close_5e3 &= valid
    s.within_1e3 += int(close_1e3.sum())
    s.within_5e3 += int(close_5e3.sum())
    mask = g_abs > REL_ERR_FLOOR  # zeroed elements fall below the floor, so they never count
    count = int(mask.sum())
    if count:
        rel = diff[mask] / g_abs[mask]
        s.rel_sum += float(rel.sum())
        s.rel_max = max(s.rel_max, float(rel.max()))
        s.rel_count += count
    g_ok, t_ok = (g, t) if valid is None else (g[valid], t[valid])
    if g_ok.size:
        s.g_max = max(s.g_max, float(g_ok.max()))
        s.g_min = min(s.g_min, float(g_ok.min()))
        s.t_max = max(s.t_max, float(t_ok.max()))
        s.t_min = min(s.t_min, float(t_ok.min()))


def _add_kl(g: np.ndarray, t: np.ndarray, s: Sums) -> None:
    """KL(golden || test) of each row's softmax."""
    log_p, log_q = _log_softmax(g), _log_softmax(t)
    per_row = np.maximum((np.exp(log_p) * (log_p - log_q)).sum(axis=-1), 0.0)
    s.kl_sum += float(per_row.sum())
    s.kl_rows += g.shape[0]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
