"""numpy arrays written as torch.save writes a tensor (``.pth``/``.pt``), without torch.

The demo's dumps are msit torch dumps, and writing them must not need torch. The archive is what
torch/serialization.py ``_save`` writes for one CPU tensor (torchfile/reader.py reads it, and so does
``torch.load(weights_only=True)``): a zip of stored records in ``archive/``, each record's data
64-byte aligned by padding in its local header's extra field (caffe2/serialize/inline_container.cc
pads with an ``FB`` field), holding ``data.pkl``, ``.format_version``, ``.storage_alignment``,
``byteorder``, ``data/0`` (the storage's bytes) and ``version``. The pickle is protocol 2, as
torch's: ``torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())`` with
the storage as the persistent id ``('storage', torch.<Type>Storage, '0', 'cpu', numel)``. torch's
random ``.data/serialization_id`` is left out, so the same array gives the same file.
"""

from __future__ import annotations

import pickle
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.torchfile.pickle_globals import TYPED_STORAGES

_STORAGE_OF = {dtype: storage for storage, dtype in TYPED_STORAGES.items()}
_ALIGNMENT = 64
_LOCAL_HEADER = 30  # zipfile's sizeFileHeader: the fixed part of a local file header
_ZIP64_EXTRA = 20  # what zipfile adds to a local header when the record may pass 4 GiB
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the file does not depend on when it was written


def write_torch_file(path: Path, values: np.ndarray) -> Path:
    """Write ``values`` (contiguous or not) to ``path`` as a torch tensor file; return ``path``.

    Dtypes with a typed storage only (torch/storage.py's legacy ones: the floats up to float64,
    bfloat16, the integers, bool, complex64/128); another dtype is a ValueError.
    """
    name = dtype_name(values)
    storage = _STORAGE_OF.get(name)
    if storage is None:
        raise ValueError(f"arrays of {name} are not written as torch files here")
    contiguous = np.asarray(values, order="C")  # a 0-d array stays 0-d (ascontiguousarray makes it 1-d)
    data = contiguous.astype(contiguous.dtype.newbyteorder("<"), copy=False).tobytes()
    records = [
        ("data.pkl", _pickled(storage, contiguous.shape)),
        (".format_version", b"1"),
        (".storage_alignment", str(_ALIGNMENT).encode()),
        ("byteorder", b"little"),
        ("data/0", data),
        ("version", b"3\n"),
    ]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for record, body in records:
            archive.writestr(_aligned(archive, f"archive/{record}", len(body)), body)
    return path


def _aligned(archive: zipfile.ZipFile, name: str, size: int) -> zipfile.ZipInfo:
    """A record whose data starts at a multiple of 64 bytes, padded as torch pads."""
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    offset = archive.fp.tell() if archive.fp is not None else 0
    fixed = _LOCAL_HEADER + len(name.encode()) + 4  # 4: the padding field's own id and length
    if size * 1.05 > zipfile.ZIP64_LIMIT:
        fixed += _ZIP64_EXTRA
    padding = -(offset + fixed) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
    return info


def _pickled(storage: str, shape: Sequence[int]) -> bytes:
    numel = int(np.prod(shape, dtype=np.int64))
    strides = [int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape))]
    storage_id = (
        pickle.MARK
        + _text("storage")
        + pickle.GLOBAL
        + f"torch\n{storage}\n".encode()
        + _text("0")
        + _text("cpu")
        + _int(numel)
        + pickle.TUPLE
        + pickle.BINPERSID
    )
    hooks = pickle.GLOBAL + b"collections\nOrderedDict\n" + pickle.EMPTY_TUPLE + pickle.REDUCE
    arguments = storage_id + _int(0) + _ints(shape) + _ints(strides) + pickle.NEWFALSE + hooks
    rebuild = pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n"
    call = rebuild + pickle.MARK + arguments + pickle.TUPLE + pickle.REDUCE
    return pickle.PROTO + b"\x02" + call + pickle.STOP


def _text(value: str) -> bytes:
    raw = value.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    if 0 <= value < 1 << 31:
        return pickle.BININT + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return pickle.LONG1 + bytes([len(raw)]) + raw


def _ints(values: Sequence[int]) -> bytes:
    return pickle.MARK + b"".join(_int(int(v)) for v in values) + pickle.TUPLE
