"""What torchfile.reader leaves to torch (the legacy format, a global or record it does not know) loaded by
``torch.load(weights_only=True)``, where that is safe: on a torch whose weights-only loader has its
known holes closed, and on pickles our bounded interpreter has walked first.

pyproject admits torch 2.1 and later (users bring the torch their NPU stack needs), but before 2.6 a
file could make that loader run code (CVE-2025-32434) and before 2.10 corrupt memory
(CVE-2026-24747): on such a torch the fallback is refused, naming the torch installed and the one to
install. torch's loader has no depth or work bound of its own (a pickle nesting 200,000 tuples as a
dict key crashes it as it crashed us), so its pickles first run through ``RestrictedUnpickler``
with every global a placeholder: the same bounds hold for what torch is handed.
"""

from __future__ import annotations

import re
from pathlib import Path

from tui_acc.dumps.torchfile.reader import pickles_for_torch
from tui_acc.dumps.torchfile.unpickler import HASHING_CALLS, RestrictedUnpickler, SafeCall

SAFE_TORCH = (2, 10)  # the first torch with both CVE fixes
_ADVISORIES = "CVE-2025-32434, CVE-2026-24747"


class FallbackRefused(ValueError):
    """torch's own loader would be needed, and torch is not installed, or too old to run it safely."""


def load_through_torch(path: Path, why: str = "this file") -> object:
    """torch's own loader (``weights_only``), for what ``reader`` leaves to it (``why``: what it
    is); its tensors handed on as arrays. Read, never mapped: torch's mappings are not guarded
    against the file being cut short (mapped.py), and these files are few.

    Raises FallbackRefused (torch not installed, or too old to run its loader safely: the message
    names the extra or the version to install), TorchFileError (the pickles go past the bounds, or
    the archive is damaged or forged), and what torch.load raises."""
    walk_pickles(path)  # first: a file refused here never pays torch's import
    from tui_acc.dumps.torchfile.arrays import TorchMissing, from_torch, require_torch

    try:  # deferred: only the files the reader cannot read pay torch's import
        torch = require_torch(f"reading {why}")
    except TorchMissing as exc:
        raise FallbackRefused(str(exc)) from exc
    check_torch_version(torch.__version__, why)
    obj = torch.load(path, weights_only=True, map_location="cpu")
    if isinstance(obj, dict):
        return {key: from_torch(v) if isinstance(v, torch.Tensor) else v for key, v in obj.items()}
    return from_torch(obj) if isinstance(obj, torch.Tensor) else obj


def check_torch_version(version: str, why: str = "this file") -> None:
    """Refuse a torch older than ``SAFE_TORCH`` (``2.5.1+cpu``, ``2.6.0a0+git...``: the first two
    numbers decide) for reading ``why``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found.group(1)), int(found.group(2))) < SAFE_TORCH:
        wanted = ".".join(map(str, SAFE_TORCH))
        raise FallbackRefused(
            f"reading {why} needs torch's own loader, which torch {version} (installed) cannot run "
            f"safely on a file from elsewhere ({_ADVISORIES}): install torch {wanted} or later to read it"
        )


def walk_pickles(path: Path) -> None:
    """Run what torch.load will unpickle through our interpreter, every global a placeholder, so that
    a pickle past the depth and work bounds is refused before torch's loader meets it."""
    data, count = pickles_for_torch(path)
    start = 0
    for _ in range(count):
        sketch = _Sketch(data, start)
        sketch.load()
        start = sketch.position


class _Placeholder:
    """What a global, a call or a storage of a pickle stands for while it is only walked."""


def _placeholder(*_args: object) -> _Placeholder:
    return _Placeholder()


class _Sketch(RestrictedUnpickler):
    """A pickle run for its shape only: nothing named in it is called (a global is a placeholder,
    except the builtins torch's loader calls that hash, which are called as torch would), so only
    the bounds can refuse it. What torch's loader refuses, it still refuses."""

    def find_class(self, module: str, name: str) -> object:
        qualified = f"{module}.{name}"
        return HASHING_CALLS.get(qualified) or SafeCall(qualified, _placeholder)

    def persistent_load(self, pid: object) -> object:
        return _Placeholder()

    def build(self, target: object, state: object) -> None:
        return None
