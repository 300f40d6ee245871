"""Element types as tensors flow through tui-acc: numpy arrays, torch's names.

A loaded tensor is a numpy array. The float types numpy lacks (bfloat16, the 8-bit and 4-bit
floats, int4) are ml_dtypes' types, which numpy casts exactly; their names are the ones torch
gives them, so ``dtype_name(array)`` reads the same as torch's ``str(tensor.dtype)`` without
``torch.``. Complex half (torch's ``complex32``) has no numpy type and is widened to complex64 where
it is read.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# torch's dtypes numpy holds under the same name (a torch tensor's .numpy() has that dtype)
NUMPY_NATIVE = frozenset(
    {
        "float64",
        "float32",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint64",
        "uint32",
        "uint16",
        "uint8",
        "bool",
        "complex128",
        "complex64",
    }
)
# torch's dtypes numpy lacks, held bit for bit by the ml_dtypes type of the same name and width
REINTERPRETED = frozenset(
    {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz"}
)
# what a torch tensor's elements can be read as, exactly
TENSOR_DTYPES = NUMPY_NATIVE | REINTERPRETED
# torch's name of a dtype -> the numpy dtype that holds its elements exactly (fp4 and int4: as ATB's
# .bin unpacks them, one value per element)
_BY_NAME: dict[str, np.dtype] = {name: np.dtype(name) for name in NUMPY_NATIVE}
_BY_NAME.update(
    {name: np.dtype(getattr(ml_dtypes, name)) for name in (*REINTERPRETED, "float4_e2m1fn", "int4", "uint4")}
)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # what a port's bf16 tensors load as
# ml_dtypes' floats are not numpy floating types (their kind is not always "f"): listed by name
_NARROW_FLOATS = REINTERPRETED | {"float16", "float4_e2m1fn"}
_FLOATS = _NARROW_FLOATS | {"float32", "float64"}


# by dtype, not by name: ``str(dtype)`` costs more than the rest of a small tensor's comparison
_NARROW_FLOAT_TYPES = frozenset(_BY_NAME[name] for name in _NARROW_FLOATS)
_FLOAT_TYPES = frozenset(_BY_NAME[name] for name in _FLOATS)
_WIDE_FLOAT_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def numpy_dtype(torch_name: str) -> np.dtype | None:
    """The numpy dtype for torch's dtype name (``bfloat16``, ``float8_e4m3fn``...); None if unknown."""
    return _BY_NAME.get(torch_name)


_NAME_OF = {dtype: name for name, dtype in _BY_NAME.items()}


def dtype_name(values: np.ndarray) -> str:
    """The array's element type as torch names it."""
    return _NAME_OF.get(values.dtype) or values.dtype.name


def is_float(values: np.ndarray) -> bool:
    """Whether the array holds real floats, ml_dtypes' narrow ones included (numpy's kind check
    misses those)."""
    return values.dtype in _FLOAT_TYPES


def is_complex(values: np.ndarray) -> bool:
    """Whether the array holds complex numbers (complex64 or complex128)."""
    return values.dtype.kind == "c"


def widened(values: np.ndarray) -> np.ndarray:
    """The values as float32 (floats of 16 bits or fewer: exact) or float64 (everything else: exact
    for every integer up to 2**53), contiguous: what the metric kernels take."""
    if values.dtype in _WIDE_FLOAT_TYPES:
        return np.ascontiguousarray(values)
    target = np.float32 if values.dtype in _NARROW_FLOAT_TYPES else np.float64
    return np.ascontiguousarray(values, dtype=target)


def bfloat16_if_exact(values: np.ndarray) -> np.ndarray:
    """A float32 array every element of which is a bfloat16 (the low 16 bits of each zero) as the
    bfloat16 it was before a writer widened it (TorchAir's FX dumper saves bf16 as float32: np.save
    has no bf16); any other array as it is. Its dtype sets a replay's tolerance: a bf16 kernel's
    rounding, not float32's."""
    if values.dtype != np.float32 or not values.size:
        return values
    bits = np.ascontiguousarray(values).view(np.uint32)
    if np.any(bits & 0xFFFF):
        return values
    narrow = _BY_NAME["bfloat16"]
    return (bits >> 16).astype(np.uint16).view(narrow).reshape(values.shape)
