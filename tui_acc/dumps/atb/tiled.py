"""The Ascend tiled layouts a dump may hold, back to ND (docs/formats.md §2.3.1): FRACTAL_NZ, the cube
unit's matrices, and NC1HWC0 (5HD), its feature maps.

An ND matrix ``[..., H, W]`` is stored as ``[..., W1, H', W0]``: the columns cut into ``W1`` blocks of
``W0`` (16 for 2-byte types, 32 for int8: one 32-byte fractal row), the rows padded to ``H'``, a
multiple of 16; element ``(h, w1 * W0 + w0)`` lies at ``[w1, h, w0]``. ATB's own transdata kernel
says so (``src/kernels/kernels/transdata/transdata_operation.cpp``: ``[N, W1, H, W0] -> [N, H, W]``,
W0 16, or 32 for int8, H rounded up to 16).

The dump's ``dims`` are the tensor's ``desc.shape``, which ATB gives two ways:

- four dims or more: the storage shape itself, ``[..., W1, H', W0]`` (a weight ``[1, k/32, n, 32]``,
  a 310P KV cache ``[blocks, heads·D/16, block_size, 16]``), read back as ``[..., H', W1·W0]``;
- two or three: the logical ``[(B,) H, W]``, the payload still in tiles
  (``linear_dequant_aclnn_runner.cpp::CreateWeightAclnnTensor``: ``[1, ceil(W/32), align16(H), 32]``
  for an int8 weight; ``linear_aclnn_runner.cpp``: 16-wide for fp16 and bf16), read back and cut
  to the logical shape.

Formats 50 and 51 (FRACTAL_NZ_C0_16 / _C0_32) name their ``W0``.

NC1HWC0 stores ``[N, C, H, W]`` as ``[N, C1, H, W, C0]``, channel ``c`` at ``[c // C0, ..., c % C0]``
(C0 16, or 32 for int8; 4 for NC1HWC0_C04; CANN's ``TransDataTo5HD`` documentation). Only its five
storage dims say where each value lies: it is read back as ``[N, C1·C0, H, W]``, the padded channels
included (their count is not recorded); four dims are refused.
"""

from __future__ import annotations

import numpy as np

FRACTAL_NZ = 29
# aclFormat code -> the W0 it names (None: FRACTAL_NZ, W0 from the dtype)
NZ_FORMATS: dict[int, int | None] = {FRACTAL_NZ: None, 50: 16, 51: 32}
ROW_ALIGN = 16  # H is padded to a multiple of 16 (a fractal's rows)
FRACTAL_ROW_BYTES = 32  # one fractal row: 16 halves or 32 int8


FIVE_HD = {3: "NC1HWC0", 12: "NC1HWC0_C04"}
UNTILED = set(NZ_FORMATS) | set(FIVE_HD)


class TilingError(Exception):
    """A tiled tensor whose tiling cannot be known exactly; the message says why."""


def storage_dims(dims: list[int], itemsize: float, format_code: int) -> tuple[list[int], list[int] | None]:
    """The dims the payload holds and the ND dims to cut it to (None: keep all of ``[..., H', W]``)."""
    if format_code in FIVE_HD:
        if len(dims) != 5:
            name = FIVE_HD[format_code]
            raise TilingError(f"{name} with dims {dims}: only its five storage dims say the layout")
        return list(dims), None
    forced = NZ_FORMATS[format_code]
    if len(dims) >= 4:
        _check_tiles(dims, itemsize, forced)
        return list(dims), None
    if len(dims) < 2:
        raise TilingError(f"FRACTAL_NZ with dims {dims}: a tiled matrix needs two dims or more")
    if itemsize not in (1, 2) and forced is None:
        raise TilingError(
            f"FRACTAL_NZ with logical dims {dims} and {itemsize}-byte elements: the tile width for "
            "this dtype is not documented; refused rather than misread"
        )
    width = forced or FRACTAL_ROW_BYTES // int(itemsize)
    *batch, rows, cols = dims
    storage = [*batch, -(-cols // width), -(-rows // ROW_ALIGN) * ROW_ALIGN, width]
    return storage, list(dims)


def _check_tiles(dims: list[int], itemsize: float, forced: int | None) -> None:
    """Four dims or more must be tiles: ``W0`` the tile width (32 bytes: 16 for 2-byte types, 32 for
    int8; 8 or 16 for 4-byte ones; the width formats 50 and 51 name) and ``H'`` a multiple of 16.
    Anything else is not FRACTAL_NZ's layout, and un-tiling it would scramble its values."""
    rows, width = dims[-2], dims[-1]
    if forced is not None:
        widths = {forced}
    elif itemsize in (1, 2):
        widths = {FRACTAL_ROW_BYTES // int(itemsize)}
    else:  # 4-byte types: 32 bytes make 8, ATB's float runners tile 16 wide
        widths = {8, 16}
    if width not in widths or rows % ROW_ALIGN:
        raise TilingError(
            f"FRACTAL_NZ with dims {dims}: not tiles of a {sorted(widths)}-wide fractal with rows padded "
            f"to {ROW_ALIGN}; refused rather than misread"
        )


def to_nd(tiles: np.ndarray, logical: list[int] | None, format_code: int = FRACTAL_NZ) -> np.ndarray:
    """``[..., W1, H', W0]`` as ``[..., H', W1·W0]``, cut to ``logical`` where the dims gave it;
    ``[N, C1, H, W, C0]`` as ``[N, C1·C0, H, W]``."""
    if format_code in FIVE_HD:
        n, c1, h, w, c0 = tiles.shape
        return np.ascontiguousarray(np.moveaxis(tiles, 4, 2).reshape(n, c1 * c0, h, w))
    *batch, blocks, rows, width = tiles.shape
    matrix = np.swapaxes(tiles, -3, -2).reshape(*batch, rows, blocks * width)
    if logical is not None:
        matrix = matrix[..., : logical[-2], : logical[-1]]
    return np.ascontiguousarray(matrix)
