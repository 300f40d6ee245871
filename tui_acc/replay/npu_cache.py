"""KV-cache writes checked through the record that reads the cache next.

``torch_npu.npu_scatter_pa_kv_cache(key, value, key_cache, value_cache, slot_mapping, *,
cache_mode='PA_NZ') -> ()`` (op-plugin ``docs/context/torch_npu-npu_scatter_pa_kv_cache.md``) and
``torch_npu._npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices) -> ()`` write
token i's key and value at slot ``s = slot_mapping[i]`` of a paged cache: ``cache[s // block_size,
s % block_size]`` in an ND cache ``[blocks, block_size, N, D]`` (``cache_mode`` "Norm"), or, in the NZ
layout ``[blocks, N * D / last, block_size, last]`` ("PA_NZ", the default), the row's chunks of
``last`` values at ``cache[s // block_size, k, s % block_size]``; a negative slot is skipped. They
return nothing, and msprobe records inputs before the call: what they wrote shows only in the next
record that reads the cache (an attention of the same layer, ``dumped_call.CACHE_READERS``), whose
key and value arguments the gather hands over (``Call.after``). The written slots are compared;
nothing else of the cache is this call's doing.
"""

from __future__ import annotations

import numpy as np

from tui_acc.replay.call import Call, Replayed, ReplayImpossible


def npu_scatter_pa_kv_cache(call: Call) -> Replayed:
    """``npu_scatter_pa_kv_cache``'s writes, as the next cache reader saw them."""
    for name in ("compress_lens", "compress_seq_offsets", "seq_lens"):
        if call.raw(-1, name) is not None:
            raise ReplayImpossible(f"{name} given: the compressed (per-head slot) write is not replayed here")
    mode = call.option("cache_mode")
    notes: tuple[str, ...] = ()
    if mode is None:
        mode, notes = "PA_NZ", ("cache_mode not recorded: torch_npu's default 'PA_NZ'",)
    if mode not in ("Norm", "PA_NZ"):
        raise ReplayImpossible(f"cache_mode {mode!r}: not a layout this replay reads")
    return written_rows(call, "slot_mapping", mode == "PA_NZ", notes)


def reshape_and_cache(call: Call) -> Replayed:
    """``_npu_reshape_and_cache`` (ATB's ReshapeAndCache): ND caches ``[blocks, block_size, N, D]``,
    or NZ where the cache's shape says so."""
    key_cache = call.raw(2, "key_cache")
    key = call.raw(0, "key")
    nz = (
        key_cache is not None
        and key is not None
        and key_cache.ndim == 4
        and key_cache.shape[2:] != key.shape[1:]
    )
    return written_rows(call, "slot_indices", nz, ())


def written_rows(call: Call, slots_name: str, nz: bool, notes: tuple[str, ...]) -> Replayed:
    """The rows a cache write was to write (key, then value) against those ``call.after`` holds at
    the slots (argument 4)."""
    if not call.after:
        raise ReplayImpossible(
            "it returns nothing, and no later record reads the cache it writes (an attention of the "
            "same module): nothing dumped shows what it wrote"
        )
    slots = call.raw(4, slots_name)
    if slots is None:
        raise ReplayImpossible(f"inputs missing: {slots_name} (argument 4) was not dumped")
    expected, observed = [], []
    for index, name in ((0, "key"), (1, "value")):
        rows, cache, read = call.raw(index, name), call.raw(index + 2, f"{name}_cache"), call.after.get(name)
        if rows is None or cache is None or read is None:
            raise ReplayImpossible(
                f"inputs missing: {name} or its cache (here or as {call.after_by} read it)"
            )
        if read.size != cache.size:
            raise ReplayImpossible(
                f"{call.after_by} reads a {name} cache of {read.size} elements, this call writes {cache.size}"
            )
        written = read.reshape(cache.shape)
        width = rows.size // max(1, len(slots.reshape(-1)))
        tokens = rows.reshape(-1, width)
        block = cache.shape[2] if nz else cache.shape[1]
        for i, slot in enumerate(slots.reshape(-1).tolist()):
            if slot < 0:
                continue  # a padding token: not written
            at, offset = divmod(int(slot), block)
            if at >= cache.shape[0]:
                raise ReplayImpossible(f"slot {slot} lies past the cache's {cache.shape[0]} blocks")
            found = written[at, :, offset] if nz else written[at, offset]
            expected.append(tokens[i])
            observed.append(found.reshape(-1))
    if not expected:
        raise ReplayImpossible("every slot is negative: nothing was written")
    said = (*notes, f"what it wrote, read back from {call.after_by}")
    # the cache's own dtype judges the copy (a cast on the way in rounds once; a slot written
    # elsewhere is off by a whole row)
    return Replayed(call.wide(np.stack(expected)), notes=said, observed=np.stack(observed))


REFERENCES = {
    "NPU.npu_scatter_pa_kv_cache": npu_scatter_pa_kv_cache,
    "NPU._npu_reshape_and_cache": reshape_and_cache,
}
