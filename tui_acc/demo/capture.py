"""Our own capture hook: writes a model's forward passes in msit's torch dump layout.

It produces what ``msit_llm``'s ``DumpConfig`` + ``register_hook`` would (docs/formats.md §1), with
one deliberate improvement: ``model_tree.json`` lists children in execution order (msit meant
to, but a bug leaves them in ``named_children()`` order). It hooks the demo's numpy modules
(modules.py) and torch modules alike (the tests capture small torch models), and writes each
tensor with dumps/writers/torch_file.py: torch is never imported for it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tui_acc.dumps.writers.torch_file import write_torch_file


class Hookable(Protocol):
    """What the capture needs of a model: torch's ``nn.Module`` names (modules.py has them too)."""

    def named_modules(self) -> Iterator[tuple[str, Any]]: ...

    def children(self) -> Iterator[Any]: ...

    def parameters(self) -> Iterator[Any]: ...

    def named_parameters(self) -> Iterator[tuple[str, Any]]: ...

    def register_forward_pre_hook(self, hook: Any) -> Any: ...

    def register_forward_hook(self, hook: Any) -> Any: ...


class MsitTorchCapture:
    """Context manager: every root ``forward()`` is a token; every module call is dumped.

    Args:
        model: the root module (named ``root`` in the dump).
        dump_path: msit's ``dump_path``; ``msit_dump_{ts}/torch_tensors/{device}_{pid}`` goes below it.
        token_range: token ids to dump (default: all).
        module_glob: only dump modules whose full name matches (``*`` wildcards), as msit's ``layer_name``;
            several globs separated by commas.
        tensor_part: 0 inputs only, 1 outputs only, 2 both (msit's meaning).
        timestamp: the ``msit_dump_*`` suffix (default: now).
        dump_weight: also write each parameter once, on entry, as msit's ``dump_weight=True`` does:
            ``weights/root.{name}.pth`` in the device folder (what ``p`` replays a Linear with); only
            the parameters of the modules ``module_glob`` selects.
    """

    def __init__(
        self,
        model: Hookable,
        dump_path: Path,
        token_range: Iterable[int] | None = None,
        module_glob: str | None = None,
        tensor_part: int = 2,
        timestamp: datetime | None = None,
        dump_weight: bool = False,
    ) -> None:
        self.model = model
        self.token_range = None if token_range is None else set(token_range)
        self.module_glob = module_glob
        self.tensor_part = tensor_part
        self.dump_weight = dump_weight
        device = str(getattr(next(model.parameters()), "device", "cpu")).replace(":", "")
        stamp = (timestamp or datetime.now()).strftime("%Y%m%d_%H%M%S")
        self.data_dir = Path(dump_path) / f"msit_dump_{stamp}" / "torch_tensors" / f"{device}_{os.getpid()}"
        self.token = -1
        self._names = {module: _full_name(name) for name, module in model.named_modules()}
        self._first_call: dict[str, int] = {}
        self._handles: list[Any] = []

    @classmethod
    def from_env(cls, model: Hookable, dump_path: Path, dump_weight: bool = False) -> MsitTorchCapture:
        """What tui-acc's re-dumps and hunts ask for: ``TUI_ACC_DUMP_DIR``, ``TUI_ACC_TOKENS`` (else
        ``TUI_ACC_TOKEN``), ``TUI_ACC_MODULES``, ``TUI_ACC_TENSORS`` (``outputs``: msit's
        ``tensor_part=1``).

        Without them (a normal run) everything is dumped under ``dump_path``. ``dump_weight``: as the
        constructor's (the weights of the modules ``TUI_ACC_MODULES`` selects).
        """
        from tui_acc.redump.selection import parse_tokens

        token = os.environ.get("TUI_ACC_TOKEN")
        tokens = parse_tokens(os.environ.get("TUI_ACC_TOKENS", ""))
        return cls(
            model,
            Path(os.environ.get("TUI_ACC_DUMP_DIR") or dump_path),
            token_range=tokens if tokens is not None else [int(token)] if token else None,
            module_glob=os.environ.get("TUI_ACC_MODULES") or None,
            tensor_part=1 if os.environ.get("TUI_ACC_TENSORS") == "outputs" else 2,
            dump_weight=dump_weight,
        )

    def __enter__(self) -> MsitTorchCapture:
        self.data_dir.mkdir(parents=True, exist_ok=False)
        if self.dump_weight:
            self._write_weights()
        self._handles.append(self.model.register_forward_pre_hook(self._next_token))
        for module in self._names:
            self._handles.append(module.register_forward_pre_hook(self._called))
            self._handles.append(module.register_forward_hook(self._dump))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._write_tree()

    # --- hooks --------------------------------------------------------------------------------

    def _next_token(self, module: Hookable, args: Sequence[Any]) -> None:
        self.token += 1

    def _called(self, module: Hookable, args: Sequence[Any]) -> None:
        self._first_call.setdefault(self._names[module], len(self._first_call))

    def _dump(self, module: Hookable, args: Sequence[Any], output: Any) -> None:
        name = self._names[module]
        if self.token_range is not None and self.token not in self.token_range:
            return
        if not self._selected(name):
            return
        folder = self.data_dir / str(self.token) / name
        folder.mkdir(parents=True, exist_ok=True)
        if self.tensor_part in (0, 2):
            for i, arg in enumerate(args):
                values = _as_array(arg)
                if values is not None:
                    write_torch_file(folder / f"input_{i}.pth", values)
        if self.tensor_part in (1, 2):
            values = _as_array(output)
            if values is not None:
                write_torch_file(folder / "output.pth", values)
            elif isinstance(output, (tuple, list)):
                _save_sequence(output, folder, "output")

    def _selected(self, name: str) -> bool:
        return not self.module_glob or any(
            fnmatch.fnmatchcase(name, glob) for glob in self.module_glob.split(",") if glob
        )

    def _write_weights(self) -> None:
        """msit's ``_dump_module_weight``: every parameter once, before the first forward, named
        ``root.`` + its ``named_parameters()`` name (docs/formats.md §1.1)."""
        folder = self.data_dir / "weights"
        folder.mkdir()
        for name, parameter in self.model.named_parameters():
            owner = _full_name(name.rpartition(".")[0])
            values = _as_array(parameter)
            if values is not None and self._selected(owner):
                write_torch_file(folder / f"{_full_name(name)}.pth", values)

    # --- topology -----------------------------------------------------------------------------

    def _write_tree(self) -> None:
        def node(name: str, module: Hookable) -> dict[str, Any]:
            children = [node(self._names[child], child) for child in module.children()]
            children.sort(key=lambda c: self._subtree_first_call(c))
            return {"name": name, "type": type(module).__name__, "children": children}

        tree = node("root", self.model)
        (self.data_dir / "model_tree.json").write_text(json.dumps(tree), encoding="utf-8")

    def _subtree_first_call(self, tree: dict[str, Any]) -> int:
        calls = [self._first_call.get(tree["name"], 1 << 30)]
        calls += [self._subtree_first_call(child) for child in tree["children"]]
        return min(calls)


def _save_sequence(items: Sequence[Any], folder: Path, prefix: str) -> None:
    for i, item in enumerate(items):
        values = _as_array(item)
        if values is not None:
            write_torch_file(folder / f"{prefix}_{i}.pth", values)
        elif isinstance(item, (tuple, list)):
            _save_sequence(item, folder, f"{prefix}_{i}")


def _as_array(value: object) -> np.ndarray | None:
    """A tensor's values (a numpy array, or a torch tensor's, bit for bit); None for anything else.
    A torch tensor can exist only where torch was imported, so torch is never imported here."""
    if isinstance(value, np.ndarray):
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        from tui_acc.dumps.torchfile.arrays import from_torch

        return from_torch(value.detach())
    return None


def _full_name(name: str) -> str:
    return "root" if not name else f"root.{name}"
