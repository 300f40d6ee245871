"""A tensor's view of its storage, as torch.save records it (offset, size, stride, and the lazy
conjugate/negative bits), checked before numpy is asked for it: inside the storage, of a size numpy
can index, and not repeating the storage's elements past what it honestly holds."""

from __future__ import annotations

import math

import numpy as np

from tui_acc.dumps.dtypes import TENSOR_DTYPES, numpy_dtype
from tui_acc.dumps.torchfile.refusals import NeedsTorch, TorchFileError, brief

# a negative view (metadata "neg") is applied exactly, by its sign bit, to these
_SIGNED_FLOATS = frozenset(
    {"float64", "float32", "float16", "bfloat16", "complex64", "complex128"}
    | {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}
)
_COMPLEX32 = np.dtype([("real", "<f2"), ("imag", "<f2")])  # torch's complex32: two float16

_MAX_ELEMENTS = 1 << 62  # numpy's index type is 64-bit: a view of more elements is refused, not attempted
_MAX_DIMS = 64  # numpy's limit (torch's is larger)
# A view with more elements than its storage repeats some (stride 0: torch's expand). Real ones
# repeat a mask over a batch or heads; a forged one claims 2^40 elements over 128 floats and would
# be compared element by element for hours. Up to MAX_REPEAT times the storage, or REPEAT_FLOOR
# elements whatever the storage (a scalar expanded), is read.
MAX_REPEAT = 1024
REPEAT_FLOOR = 1 << 24


def count(value: object) -> bool:
    """Whether a pickled value is a count: a non-negative int (not a bool)."""
    return type(value) is int and value >= 0


def element_size(dtype: str) -> int:
    """Bytes an element of a torch dtype (by name) takes; NeedsTorch where numpy holds none."""
    if dtype == "complex32":
        return _COMPLEX32.itemsize
    found = numpy_dtype(dtype) if dtype in TENSOR_DTYPES else None
    if found is None:
        raise NeedsTorch(f"tensors of {dtype}")
    return found.itemsize


def checked_view(
    available: int, itemsize: int, dtype: str, offset: object, size: object, stride: object
) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    """A tensor's view of a storage of ``available`` elements, checked: inside the storage, of a size
    numpy can index, repeating the storage's elements no more than MAX_REPEAT times. Returns its
    offset, shape and strides (in elements), and how many of the storage's elements it reaches (0:
    none), so that no more of them are read."""
    shape = _dims(size, "size")
    steps = _dims(stride, "stride")
    if not count(offset) or len(shape) != len(steps):
        raise TorchFileError(f"tensor view malformed (offset {brief(offset)}, size {shape}, stride {steps})")
    if len(shape) > _MAX_DIMS:
        raise NeedsTorch(f"a tensor of {len(shape)} dimensions (numpy holds {_MAX_DIMS})")
    assert isinstance(offset, int)
    elements = math.prod(shape)
    if elements * itemsize >= _MAX_ELEMENTS:
        raise TorchFileError(f"tensor of {elements} elements: more than numpy can index")
    if elements == 0:
        return offset, shape, steps, 0
    last = offset + sum((extent - 1) * step for extent, step in zip(shape, steps, strict=True))
    if last >= available:
        raise TorchFileError(
            f"tensor view (offset {offset}, size {shape}, stride {steps}) reaches element {last} "
            f"of a storage of {available} {dtype}"
        )
    if elements > available and elements > max(REPEAT_FLOOR, MAX_REPEAT * available):
        raise TorchFileError(
            f"tensor view of {elements:,} elements over a storage of {available:,} (stride {steps}): "
            f"more than {MAX_REPEAT} times what the storage holds, refused as forged"
        )
    return offset, shape, steps, last + 1


def view_values(
    data: np.ndarray, itemsize: int, dtype: str, offset: int, shape: tuple[int, ...], steps: tuple[int, ...]
) -> np.ndarray:
    """The checked view of ``data`` (the storage's bytes, as far as the view reaches at least)."""
    element_type = _COMPLEX32 if dtype == "complex32" else numpy_dtype(dtype)
    assert element_type is not None
    if not len(data):
        values = np.zeros(shape, dtype=element_type)
    else:
        # a dimension of one element never steps: its stride (any number in torch) is left out
        byte_steps = tuple(
            step * itemsize if extent > 1 else 0 for extent, step in zip(shape, steps, strict=True)
        )
        # strided as raw elements of the width: as_strided passes the dtype as an array-interface
        # string, which names ml_dtypes' float8 types ambiguously ("<f1")
        available = len(data) // itemsize
        base = data[: available * itemsize].view(np.dtype(f"V{itemsize}"))[offset:]
        values = np.lib.stride_tricks.as_strided(base, shape=shape, strides=byte_steps).view(element_type)
    if dtype == "complex32":  # widened exactly: float16 -> float32 parts
        widened = np.empty(shape, dtype=np.complex64)
        widened.real = values["real"]
        widened.imag = values["imag"]
        values = widened
    return values


def _dims(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(count(item) for item in value):
        raise TorchFileError(f"tensor {what} {brief(value)} is not a tuple of non-negative integers")
    return value


def with_metadata(values: np.ndarray, metadata: object) -> np.ndarray:
    """torch/_utils.py set_tensor_metadata: the conjugate and negative bits of a lazy view, applied."""
    if metadata is None or (isinstance(metadata, dict) and not metadata):
        return values
    # the keys' types first: set() hashes them, and a pickled key may be costly to hash
    if (
        not isinstance(metadata, dict)
        or not all(type(k) is str for k in metadata)
        or not set(metadata) <= {"conj", "neg"}
    ):
        raise NeedsTorch(f"tensor metadata {brief(metadata)}")
    if metadata.get("conj") and values.dtype.kind == "c":
        values = np.conjugate(values)
    if metadata.get("neg"):
        if str(values.dtype) not in _SIGNED_FLOATS:
            raise NeedsTorch(f"a negative view of {values.dtype}")
        values = np.negative(values)
    return values
