"""Tensors of every dtype torch saves that numpy (with ml_dtypes) holds exactly, for the tests of the
torch-free reader and of the torch <-> numpy conversions (complex32 is tested apart: it is widened)."""

from __future__ import annotations

import numpy as np
import torch

DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e8m0fnu,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


def random_bits(dtype: torch.dtype, *shape: int, generator: torch.Generator) -> torch.Tensor:
    """Every bit pattern is fair (NaNs, infinities, subnormals): compared as bits, not as numbers."""
    count = int(np.prod(shape)) * dtype.itemsize
    raw = torch.randint(0, 256, (count,), dtype=torch.uint8, generator=generator)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)
