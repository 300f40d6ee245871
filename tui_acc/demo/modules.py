"""What the demo model needs of ``torch.nn.Module``, over numpy arrays: named submodules in the
order they are declared, parameters, and forward hooks.

The demo must run where torch is not installed (``pip install tui-acc`` brings no torch), and its
capture hook (capture.py) and fault (faults.py) see its modules exactly as torch's hooks would:
``named_modules()`` walks the tree depth first in declaration order, a pre-hook sees the call's
arguments, a forward hook sees them and the output and may replace the output (``prepend=True``
puts a hook before the others). The method names are torch's, so the capture hook serves torch
modules too (the tests capture small torch models with it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

M = TypeVar("M", bound="Module")
PreHook = Callable[["Module", tuple[Any, ...]], None]
Hook = Callable[["Module", tuple[Any, ...], Any], Any]


class Handle:
    """A registered hook; ``remove()`` unregisters it (as torch's ``RemovableHandle``)."""

    def __init__(self, hooks: list[Any], hook: Any) -> None:
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        """Unregister the hook; removing it twice is a no-op."""
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Module:
    """A node of the model: submodules and parameters are attributes, as in torch."""

    def __init__(self) -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_pre_hooks", [])
        object.__setattr__(self, "_hooks", [])

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:  # only reached for names not set as attributes
        parameters = self.__dict__.get("_parameters", {})
        if name in parameters:
            return parameters[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_parameter(self, name: str, values: np.ndarray) -> None:
        """Keep ``values`` as the parameter ``name`` (read as an attribute, listed by
        ``named_parameters``)."""
        self._parameters[name] = values

    def forward(self, *args: Any) -> Any:
        """The module's computation; a plain container has none and raises ``NotImplementedError``."""
        raise NotImplementedError(f"{type(self).__name__} is a container: call its submodules")

    def __call__(self, *args: Any) -> Any:
        for pre_hook in list(self._pre_hooks):
            pre_hook(self, args)
        output = self.forward(*args)
        for hook in list(self._hooks):
            replaced = hook(self, args, output)
            if replaced is not None:
                output = replaced
        return output

    # --- torch's names ------------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, submodule) of the direct children, in declaration order."""
        yield from self._children.items()

    def children(self) -> Iterator[Module]:
        """The direct children, in declaration order."""
        yield from self._children.values()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(dotted name, module) of this module and every descendant, depth first in declaration order
        (this module's name is ``prefix``, ``""`` at the root)."""
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant, depth first in declaration order."""
        for _, module in self.named_modules():
            yield module

    def named_parameters(self) -> Iterator[tuple[str, np.ndarray]]:
        """(dotted name, array) of every parameter of the tree, as torch names them
        (``layers.0.mlp.up_proj.weight``)."""
        for prefix, module in self.named_modules():
            for name, values in module._parameters.items():
                yield (f"{prefix}.{name}" if prefix else name), values

    def parameters(self) -> Iterator[np.ndarray]:
        """Every parameter array of the tree, in ``named_parameters`` order."""
        for _, values in self.named_parameters():
            yield values

    def to(self: M, dtype: Any) -> M:
        """Every parameter converted to ``dtype`` (rounded to nearest even, as ``Module.to``)."""
        for module in self.modules():
            for name, values in module._parameters.items():
                module._parameters[name] = values.astype(dtype)
        return self

    def register_forward_pre_hook(self, hook: PreHook) -> Handle:
        """Call ``hook(module, args)`` before each ``forward``; the handle removes it."""
        self._pre_hooks.append(hook)
        return Handle(self._pre_hooks, hook)

    def register_forward_hook(self, hook: Hook, prepend: bool = False) -> Handle:
        """Call ``hook(module, args, output)`` after each ``forward``; a hook's non-None result replaces
        the output. ``prepend``: run it before the hooks already registered. The handle removes it."""
        self._hooks.insert(0, hook) if prepend else self._hooks.append(hook)
        return Handle(self._hooks, hook)


class ModuleList(Module):
    """Submodules named ``0``, ``1``, ...; iterated in that order."""

    def __init__(self, modules: Iterator[Module] | list[Module]) -> None:
        super().__init__()
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def __iter__(self) -> Iterator[Module]:
        return self.children()

    def __len__(self) -> int:
        return len(self._children)
