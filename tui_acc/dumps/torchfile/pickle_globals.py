"""The globals a tensor file's pickle may name, as torch's weights_only loader allows them: each one
our function or value (``find_global``), nothing of torch imported."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tui_acc.dumps.dtypes import TENSOR_DTYPES
from tui_acc.dumps.torchfile.refusals import NeedsTorch, RefusedGlobal, TorchFileError, brief
from tui_acc.dumps.torchfile.unpickler import HASHING_CALLS, SafeCall

# torch/storage.py _dtype_to_storage_type_map: the legacy typed storages, by the dtype they hold
TYPED_STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
}
# every dtype torch's weights_only loader lets a pickle name (torch/_weights_only_unpickler.py
# _get_allowed_globals): as a value (SGLang's meta holds dtypes) each is its name
DTYPE_NAMES = (
    TENSOR_DTYPES
    | {"complex32", "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2"}
    | {"bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"}
    | {f"uint{bits}" for bits in range(1, 8)}
    | {f"int{bits}" for bits in range(1, 8)}
)


@dataclass(frozen=True)
class StorageType:
    """A storage class the pickle names: the dtype of its elements (untyped: bytes)."""

    dtype: str


def find_global(module: str, name: str) -> object:
    """What ``module.name`` stands for in a tensor file's pickle, other than the tensor rebuilds (the
    reader's, which read its storages). Raises NeedsTorch for a torch global not here (torch's
    weights_only loader decides), RefusedGlobal for any other."""
    qualified = f"{module}.{name}"
    found = GLOBALS.get(qualified)
    if found is not None:
        return found
    if module == "torch" and name in DTYPE_NAMES:
        return name  # a dtype as a value: its name
    if module == "torch" and name in TYPED_STORAGES:
        return StorageType(TYPED_STORAGES[name])
    if module == "torch" or module.startswith("torch."):
        raise NeedsTorch(f"the pickle names {qualified}")  # torch's weights_only decides
    raise RefusedGlobal(qualified)


def _parameter(data: object, _requires_grad: object = False, _hooks: object = None) -> object:
    if not isinstance(data, np.ndarray):
        raise TorchFileError("a parameter without a tensor")
    return data


def _parameter_with_state(data: object, requires_grad: object, hooks: object, _state: object) -> object:
    return _parameter(data, requires_grad, hooks)


def _size(dims: object = ()) -> tuple[int, ...]:
    items = tuple(dims) if isinstance(dims, (tuple, list)) else None
    if items is None or not all(type(item) is int for item in items):
        raise TorchFileError(f"torch.Size of {brief(dims)}")
    return items


def _device(kind: object, index: object = None) -> str:
    if not isinstance(kind, str) or not (index is None or type(index) is int):
        raise TorchFileError(f"torch.device of {brief(kind)}, {brief(index)}")
    return kind if index is None else f"{kind}:{index}"


def _complex(real: object = 0, imag: object = 0) -> complex:
    if not all(type(part) in (int, float) for part in (real, imag)):
        raise TorchFileError("complex of something other than numbers")
    assert isinstance(real, (int, float)) and isinstance(imag, (int, float))
    return complex(real, imag)


def _encode(text: object, encoding: object = "utf-8") -> bytes:
    """How protocol 2 pickles bytes: ``_codecs.encode(text, "latin1")``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise TorchFileError("_codecs.encode other than bytes as latin-1")
    return text.encode("latin-1")


def _bytearray(*args: object) -> bytearray:
    """How protocol 2 pickles a bytearray: from latin-1 text (never from a count: no forged allocation)."""
    if not args:
        return bytearray()
    if isinstance(args[0], bytes) and len(args) == 1:
        return bytearray(args[0])
    if len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1"):
        return bytearray(args[0].encode("latin-1"))
    raise TorchFileError("bytearray other than from bytes")


# the other globals a tensor file's pickle may name, as torch's weights_only loader allows them
GLOBALS: dict[str, object] = {
    "torch._utils._rebuild_parameter": SafeCall("_rebuild_parameter", _parameter),
    "torch._utils._rebuild_parameter_with_state": SafeCall(
        "_rebuild_parameter_with_state", _parameter_with_state
    ),
    "torch.storage.UntypedStorage": StorageType("uint8"),
    "torch.UntypedStorage": StorageType("uint8"),
    "torch.Size": SafeCall("Size", _size),
    "torch.device": SafeCall("device", _device),
    # what else torch's weights_only loader allows outside torch (a meta dict may hold them)
    **HASHING_CALLS,
    "builtins.complex": SafeCall("complex", _complex),
    "builtins.bytearray": SafeCall("bytearray", _bytearray),
    "_codecs.encode": SafeCall("encode", _encode),
}
