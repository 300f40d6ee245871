"""Loading tensor files safely.

A ``.pth`` file is a pickle: it is only ever opened with ``weights_only=True``, which refuses
to run code, and mapped to the CPU so a dump taken on an NPU or GPU opens anywhere.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING

from tui_acc.dumps.fs import settled
from tui_acc.dumps.policy import LoadPolicy, OutsideDump

if TYPE_CHECKING:
    import torch


class TensorLoadError(Exception):
    """A tensor file that cannot be used; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def load_tensor(path: Path, policy: LoadPolicy) -> torch.Tensor:
    """Load one tensor file: ATB ``.bin`` exactly, torch ``.pth``/``.pt`` without executing code.

    ``policy`` (the dump's, ``DumpIndex.load_policy``) refuses a file that is a symlink to
    somewhere outside the dump, or an ATB header whose ``data=`` points outside it, unless the user
    allowed it: a dump from another machine must not make tui-acc read whatever its links name.
    """
    try:
        policy.check(path)
    except OutsideDump as exc:
        raise TensorLoadError(path, str(exc)) from exc
    if path.suffix == ".bin":
        from tui_acc.dumps.atb_bin import BinFileError, load_bin

        try:
            return load_bin(path, policy)
        except BinFileError as exc:
            raise TensorLoadError(path, exc.problem) from exc
    import torch  # deferred: indexing and the UI start without paying torch's import

    try:
        obj = _torch_load(path)
    except FileNotFoundError as exc:
        raise TensorLoadError(path, "file not found") from exc
    except OSError as exc:  # permissions, a vanished mount, an I/O error
        raise TensorLoadError(path, f"cannot read ({exc.strerror or exc})") from exc
    except pickle.UnpicklingError as exc:
        raise TensorLoadError(path, _unpickling_problem(exc)) from exc
    except Exception as exc:
        raise TensorLoadError(path, f"unreadable torch file ({_first_line(exc)})") from exc
    if isinstance(obj, dict) and ("value" in obj or "meta" in obj):
        obj = _sglang_value(path, obj)
    if not isinstance(obj, torch.Tensor):
        raise TensorLoadError(path, f"holds a {type(obj).__name__}, not a tensor")
    return obj


def _sglang_value(path: Path, record: dict[object, object]) -> object:
    """SGLang's dumper saves ``{"value": tensor, "meta": {...}}`` (tui_acc/dumps/sglang.py)."""
    if "value" not in record:
        raise TensorLoadError(path, "SGLang dump without 'value' (only its meta was saved)")
    return record["value"]


def _torch_load(path: Path) -> object:
    """Memory-mapped where the file allows it (zip format) and has settled, so a large tensor is
    paged in, not read; read whole otherwise."""
    import zipfile

    import torch

    if zipfile.is_zipfile(path) and settled(path):
        return torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    return torch.load(path, weights_only=True, map_location="cpu")


def _unpickling_problem(exc: BaseException) -> str:
    """Say why, without passing on torch's advice to retry with ``weights_only=False``."""
    text = str(exc)
    found = re.search(r"GLOBAL (\S+)", text)
    if found:
        return f"refused: the file holds pickled code or objects, not just tensors ({found.group(1)})"
    return "unreadable torch file (not a tensor archive; damaged or truncated?)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
