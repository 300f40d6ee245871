"""KV-cache writes (replay/npu_cache.py) checked through what the next cache reader took in: caches
written here by the formula of op-plugin's ``npu_scatter_pa_kv_cache`` doc (ND: ``cache[s // bs,
s % bs] = key[i]``; PA_NZ: the row's chunks of ``last`` values at ``cache[s // bs, k, s % bs]``)."""

from __future__ import annotations

import numpy as np
import pytest

from tui_acc.replay import npu_cache
from tui_acc.replay.call import Call, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.verdicts.replay_check import _judged

BLOCKS, BLOCK, HEADS, DIM, LAST = 3, 8, 2, 16, 16


def _write(cache: np.ndarray, rows: np.ndarray, slots: list[int], nz: bool) -> np.ndarray:
    out = cache.copy()
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        block, offset = slot // BLOCK, slot % BLOCK
        if nz:
            out[block, :, offset, :] = rows[i].reshape(-1, LAST)
        else:
            out[block, offset] = rows[i]
    return out


def _call(nz: bool, slots: list[int], written_at: list[int] | None = None, mode: str | None = None) -> Call:
    rng = np.random.default_rng(3)
    key, value = (rng.standard_normal((len(slots), HEADS, DIM)).astype(np.float32) for _ in range(2))
    shape = (BLOCKS, HEADS * DIM // LAST, BLOCK, LAST) if nz else (BLOCKS, BLOCK, HEADS, DIM)
    key_cache, value_cache = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    at = written_at or slots
    read = {
        "key": _write(key_cache, key, at, nz).reshape(BLOCKS, -1),  # the reader's own view of it
        "value": _write(value_cache, value, at, nz).reshape(BLOCKS, -1),
    }
    keyword = {"cache_mode": mode} if mode else {}
    positional = {0: key, 1: value, 2: key_cache, 3: value_cache, 4: np.array(slots, dtype=np.int32)}
    return Call(
        "NPU.npu_scatter_pa_kv_cache.0.forward",
        "x",
        "msprobe",
        positional,
        keyword,
        after=read,
        after_by="FIA",
    )


def _verdict(call: Call) -> str:
    replayed = npu_cache.npu_scatter_pa_kv_cache(call)
    return _judged("test", "w", "w", Gathered(call, None, None), replayed, "built-in").verdict


@pytest.mark.parametrize(("nz", "mode"), [(False, "Norm"), (True, "PA_NZ"), (True, None)])
def test_a_write_is_checked_through_what_the_reader_took_in(nz: bool, mode: str | None) -> None:
    slots = [17, 3, -1, 9]  # a padding token's -1 is not written
    assert _verdict(_call(nz, slots, mode=mode)) == "consistent"
    assert _verdict(_call(nz, slots, [18, 3, -1, 9], mode=mode)) == "disagrees"  # one token a slot off
    said = npu_cache.npu_scatter_pa_kv_cache(_call(nz, slots, mode=mode)).notes
    assert said[-1] == "what it wrote, read back from FIA"
    assert ("cache_mode not recorded: torch_npu's default 'PA_NZ'" in said) == (mode is None)


def test_without_a_reader_the_write_cannot_be_checked() -> None:
    lone = Call(**{**_call(False, [1]).__dict__, "after": {}, "after_by": ""})
    with pytest.raises(ReplayImpossible, match="no later record reads the cache"):
        npu_cache.npu_scatter_pa_kv_cache(lone)
