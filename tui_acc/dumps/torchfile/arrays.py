"""torch tensors as numpy arrays and back, exactly: for files only torch can read (the fallback of
reader.py), and for the exports that reproduce msit's and msprobe's torch arithmetic.

The one module of tui_acc that imports torch (``require_torch``): torch is optional (the extra
``tui-acc[torch]``), and only what truly needs it asks for it, when called; without it, a clear
``TorchMissing`` naming the extra. ``TYPE_CHECKING`` for the annotations, so importing this module
costs nothing.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from tui_acc.dumps.dtypes import NUMPY_NATIVE, REINTERPRETED, numpy_dtype
from tui_acc.errors import TuiAccError

if TYPE_CHECKING:
    import torch

EXTRA = "tui-acc[torch]"


class TorchMissing(TuiAccError, ImportError):
    """What was asked needs torch, and torch is not installed; str() says what, and how to get it."""


def require_torch(purpose: str) -> ModuleType:
    """torch, imported for ``purpose`` (what needs it, as the user would say it); TorchMissing when it
    is not installed. An NPU host's own torch serves: the extra is for machines without one."""
    try:
        import torch
    except ImportError as exc:
        raise TorchMissing(
            f"{purpose} needs torch, which is not installed here: pip install '{EXTRA}' "
            "(or any torch >= 2.1; on a fresh Linux x86-64 machine install the CPU build first, as "
            "the README's Set up says, or pip fetches the CUDA build, about 2.5 GB)"
        ) from exc
    return torch


def from_torch(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a numpy array of the matching dtype, bit for bit (sharing its memory
    where it can); complex32 widened exactly to complex64. Sparse, quantized, non-CPU tensors and
    dtypes numpy cannot hold (float4_e2m1fn_x2, the bits types, sub-byte integers): ValueError."""
    torch = require_torch("a torch tensor")  # deferred: only the fallback pays torch's import

    if tensor.layout != torch.strided:
        raise ValueError(f"a sparse tensor ({tensor.layout}): not compared")
    if tensor.is_quantized:
        raise ValueError(f"a quantized tensor ({tensor.dtype}): not compared")
    if tensor.device.type != "cpu":
        raise ValueError(f"a tensor on {tensor.device}, not on the CPU")
    values = tensor.detach().resolve_conj().resolve_neg()  # lazy conjugate/negative views materialised
    name = str(values.dtype).removeprefix("torch.")
    if name in NUMPY_NATIVE:
        return values.numpy()
    if name == "complex32":  # float16 parts into float32 parts: exact
        return values.to(torch.complex64).numpy()
    target = numpy_dtype(name)
    if name not in REINTERPRETED or target is None:
        raise ValueError(f"tensors of {name} have no numpy type")
    # the bits through an unsigned integer of the same width (torch.numpy() refuses these dtypes)
    carrier = torch.uint16 if target.itemsize == 2 else torch.uint8
    return values.view(carrier).numpy().view(target)


def to_torch(values: np.ndarray) -> torch.Tensor:
    """A numpy array (ml_dtypes' bf16 and 8-bit floats included) as a CPU tensor, bit for bit."""
    torch = require_torch("torch's arithmetic (report --compat)")  # only the msit/msprobe-exact exports

    name = values.dtype.name
    contiguous = np.ascontiguousarray(values)
    if name in NUMPY_NATIVE:
        return torch.from_numpy(contiguous)
    if name not in REINTERPRETED:
        raise ValueError(f"arrays of {name} have no torch dtype here")
    carrier = np.uint16 if values.dtype.itemsize == 2 else np.uint8
    return torch.from_numpy(contiguous.view(carrier)).view(getattr(torch, name))
