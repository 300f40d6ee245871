"""Loading tensor files safely, as numpy arrays, without importing torch on the way.

torch's zip format (every ``.pth``/``.pt`` torch has written since 1.6) is read by ``torchfile.reader``:
its pickle may only rebuild tensors (anything else is refused by name, never run, as
``weights_only=True`` refuses it) and its storages are memory-mapped. Files it cannot read (the
legacy format, a record it does not know) go to ``torch.load(weights_only=True)``, mapped to the CPU
so a dump taken on an NPU or GPU opens anywhere, where the torch installed runs that loader safely
(``torchfile.fallback``). msprobe's MindSpore ``.npy`` files are read by numpy, pickles refused; ATB
``.bin`` files by ``atb.bin``.
"""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path

import numpy as np

from tui_acc.dumps.fs import NotRegularFile, open_regular, settled
from tui_acc.dumps.mapped import map_bytes
from tui_acc.dumps.policy import LoadPolicy, OutsideDump
from tui_acc.dumps.torchfile.fallback import FallbackRefused, load_through_torch
from tui_acc.dumps.torchfile.reader import NeedsTorch, RefusedGlobal, TorchFileError, read_torch_file
from tui_acc.errors import TuiAccError


class TensorLoadError(TuiAccError):
    """A tensor file that cannot be used; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def load_tensor(path: Path, policy: LoadPolicy, member: str = "") -> np.ndarray:
    """Load one tensor file: ATB ``.bin`` exactly, torch ``.pth``/``.pt`` without executing code,
    ``.npy`` without unpickling; ``member`` of a GE dump file (TorchAir), which holds several.

    ``policy`` (the dump's, ``DumpIndex.load_policy``) refuses a file that is a symlink to
    somewhere outside the dump, or an ATB header whose ``data=`` points outside it, unless the user
    allowed it: a dump from another machine must not make tui-acc read whatever its links name.
    """
    try:
        readable = policy.check(path)
    except OutsideDump as exc:
        raise TensorLoadError(path, str(exc)) from exc
    except OSError as exc:  # a policy that reads it elsewhere could not (cluster/node_files.py)
        raise TensorLoadError(path, f"cannot read ({exc.strerror or exc})") from exc
    if readable == path:
        return _load_checked(path, policy, member)
    try:
        return _load_checked(readable, policy, member)
    except TensorLoadError as exc:  # said of the file the dump names, not of where it was read
        raise TensorLoadError(path, exc.problem.replace(str(readable), str(path))) from exc


def _load_checked(path: Path, policy: LoadPolicy, member: str) -> np.ndarray:
    """``load_tensor`` of a path its policy allows."""
    if member:
        return _load_ge_member(path, member, policy)
    if path.suffix == ".bin":
        from tui_acc.dumps.atb.bin import BinFileError, load_bin

        try:
            return load_bin(path, policy)
        except BinFileError as exc:
            raise TensorLoadError(path, exc.problem) from exc
    try:
        obj = _load_npy(path) if path.suffix == ".npy" else _load_torch_file(path)
    except TensorLoadError:
        raise
    except FileNotFoundError as exc:
        raise TensorLoadError(path, "file not found") from exc
    except NotRegularFile as exc:
        raise TensorLoadError(path, str(exc)) from exc
    except OSError as exc:  # permissions, a vanished mount, an I/O error
        raise TensorLoadError(path, f"cannot read ({exc.strerror or exc})") from exc
    except pickle.UnpicklingError as exc:
        raise TensorLoadError(path, _unpickling_problem(exc)) from exc
    except Exception as exc:
        raise TensorLoadError(path, f"unreadable torch file ({_first_line(exc)})") from exc
    if isinstance(obj, dict) and ("value" in obj or "meta" in obj):
        obj = _sglang_value(path, obj)
    if not isinstance(obj, np.ndarray):
        raise TensorLoadError(path, f"holds a {type(obj).__name__}, not a tensor")
    return obj


def _load_ge_member(path: Path, member: str, policy: LoadPolicy) -> np.ndarray:
    from tui_acc.dumps.torchair.ge_file import GeDumpError, load_member

    try:
        return load_member(path, member, policy)
    except GeDumpError as exc:
        raise TensorLoadError(path, str(exc).removeprefix(f"{path}: ")) from exc
    except FileNotFoundError as exc:
        raise TensorLoadError(path, "file not found") from exc
    except OSError as exc:
        raise TensorLoadError(path, f"cannot read ({exc.strerror or exc})") from exc


def _load_torch_file(path: Path) -> object:
    """Mapped where the file has settled, so a large tensor is paged in, not read; read whole where
    it may still be being written (a mapped page cut off would be SIGBUS)."""
    try:
        return read_torch_file(path, mapped=settled(path))
    except RefusedGlobal as exc:
        raise TensorLoadError(path, _refused(exc.name)) from exc
    except TorchFileError as exc:
        raise TensorLoadError(path, f"unreadable torch file ({exc})") from exc
    except NeedsTorch as exc:
        try:
            return load_through_torch(path, str(exc))
        except FallbackRefused as refused:  # no torch, or one too old to run its loader safely
            raise TensorLoadError(path, str(refused)) from refused
        except TorchFileError as bad:  # its pickles past the bounds
            raise TensorLoadError(path, f"unreadable torch file ({bad})") from bad


_NPY_MAGIC = b"\x93NUMPY"
# how numpy refuses an array of Python objects, read and mapped
_PICKLED_OBJECTS = ("Object arrays cannot be loaded", "Array can't be memory-mapped: Python objects")


def _load_npy(path: Path) -> np.ndarray:
    """numpy's own format, checked first (a FIFO would block numpy; a file without the header would
    make it try pickle), numbers only, in native byte order (the kernels read it as such)."""
    with open_regular(path) as handle:
        if handle.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
            raise TensorLoadError(path, "unreadable .npy file (no NUMPY header: not a numpy array file)")
    try:
        values = _mapped_npy(path) if settled(path) else np.load(path, allow_pickle=False)
    except ValueError as exc:
        # numpy names allow_pickle in other refusals too (a header over its size limit); mapped, it
        # says the array cannot be memory-mapped
        if str(exc).startswith(_PICKLED_OBJECTS):
            raise TensorLoadError(path, "refused: a .npy of pickled objects, not numbers") from exc
        raise TensorLoadError(path, f"unreadable .npy file ({_first_line(exc)})") from exc
    except (EOFError, OSError) as exc:
        raise TensorLoadError(path, f"unreadable .npy file ({_first_line(exc)})") from exc
    if values.dtype.kind not in "biufc":  # strings, dates, records: not a tensor's values
        raise TensorLoadError(path, f"holds {values.dtype} values, not numbers")
    if not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    return values


def _mapped_npy(path: Path) -> np.ndarray:
    """A settled .npy mapped (mapped.map_bytes: guarded against the file being cut short), its header
    read by numpy's own np.load(mmap_mode="r"), whose mapping is dropped untouched: it is not guarded.
    Read whole where no guard is built."""
    layout = np.load(path, mmap_mode="r", allow_pickle=False)
    offset, dtype, shape = layout.offset, layout.dtype, layout.shape
    order = "F" if layout.flags.f_contiguous and not layout.flags.c_contiguous else "C"
    del layout
    with open_regular(path) as handle:
        data = map_bytes(handle.fileno(), offset, dtype.itemsize * math.prod(shape))
    if data is None:
        return np.load(path, allow_pickle=False)
    return data.view(dtype).reshape(shape, order=order)


def _sglang_value(path: Path, record: dict[object, object]) -> object:
    """SGLang's dumper saves ``{"value": tensor, "meta": {...}}`` (tui_acc/dumps/sglang/dump.py)."""
    if "value" not in record:
        raise TensorLoadError(path, "SGLang dump without 'value' (only its meta was saved)")
    return record["value"]


def _refused(name: str) -> str:
    return f"refused: the file holds pickled code or objects, not just tensors ({name})"


def _unpickling_problem(exc: BaseException) -> str:
    """Say why, without passing on torch's advice to retry with ``weights_only=False``."""
    text = str(exc)
    found = re.search(r"GLOBAL (\S+)", text)
    if found:
        return _refused(found.group(1))
    return "unreadable torch file (not a tensor archive; damaged or truncated?)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
