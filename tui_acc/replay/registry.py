"""Which reference replays a node: looked up by its record name (msprobe's ``Functional.linear`` from
``Functional.linear.3.forward``) and then by its type (``LinearOperation``, ``Linear``, ``LlamaRMSNorm``).

Users add or override references, first match wins in this order:

1. ``tui-acc.toml``::

       [replay]
       "MyFusedOp" = "my_pkg.my_module:replay_my_fused_op"
       "*MoeGate"  = "my_pkg.moe:replay_gate"        # globs match too

2. the entry point group ``tui_acc.replay`` of installed packages (name: the type or record name,
   value: ``module:function``);
3. the built-ins (torch_ops.py, the npu_*.py modules, atb_ops.py, atb_attention.py; ge_ops.py for a
   TorchAir GE dump's ops, asked for as ``GE.{type}``; aten_ops.py for its FX dump's aten nodes).

A plug-in is imported only when a node it matches is replayed; one that cannot be imported, is not
callable or raises is named in the side's reason (``PluginError``), never a crash.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tui_acc.errors import TuiAccError

ENTRY_POINT_GROUP = "tui_acc.replay"
Reference = Callable[..., Any]


class RegistryError(TuiAccError, ValueError):
    """A ``[replay]`` table that cannot be used (the message names the file and the key)."""


class PluginError(TuiAccError):
    """A user's reference that cannot be loaded or that failed (the message names it)."""


@dataclass
class Entry:
    """One key of the registry and where its reference comes from."""

    key: str
    origin: str  # "built-in", the toml file, or "entry point (distribution)"
    spec: str = ""  # "module:function" for plug-ins
    function: Reference | None = field(default=None, repr=False)

    def matches(self, candidate: str) -> bool:
        """Whether ``candidate`` (a record name or a type) is this key, or matches it as a glob (``*?[``)."""
        return candidate == self.key or (
            any(c in self.key for c in "*?[") and fnmatch.fnmatchcase(candidate, self.key)
        )

    def load(self) -> Reference:
        """The reference, imported on first use."""
        if self.function is None:
            self.function = _import(self.spec, self.describe())
        return self.function

    def describe(self) -> str:
        """Where the reference comes from, for messages: ``built-in Linear`` or ``plug-in 'X' = 'pkg:fn'
        (file)``."""
        if self.origin == "built-in":
            return f"built-in {self.key}"
        return f"plug-in {self.key!r} = {self.spec!r} ({self.origin})"


class Registry:
    """References by key: the user's (toml, entry points) before the built-ins."""

    def __init__(
        self,
        plugins: Mapping[str, str] | None = None,
        source: str = "tui-acc.toml",
        entry_points: bool = True,
    ) -> None:
        self._user = [Entry(key, source, spec) for key, spec in (plugins or {}).items()]
        self._entry_points: list[Entry] | None = None if entry_points else []
        self._builtins: list[Entry] | None = None  # imported on first use: they import numpy
        self._found: dict[tuple[str, ...], Entry | None] = {}  # what find said of each candidates

    @classmethod
    def from_config(cls, section: Any, source: str = "tui-acc.toml", entry_points: bool = True) -> Registry:
        """From ``[replay]`` of the config (``Config.sections.get("replay")``); checked here, so a
        malformed table is said at start, with its file."""
        if section is None:
            return cls(source=source, entry_points=entry_points)
        if not isinstance(section, dict):
            raise RegistryError(f'{source}: [replay] must be a table of "Type" = "module:function"')
        for key, spec in section.items():
            if not isinstance(spec, str) or ":" not in spec or not all(spec.split(":", 1)):
                raise RegistryError(
                    f'{source}: [replay] "{key}" = {spec!r}: expected "module:function" '
                    '(e.g. "my_pkg.ops:replay_my_op")'
                )
        return cls(section, source, entry_points)

    def entries(self) -> Iterator[Entry]:
        """Every entry in the order they are tried: the user's toml, then entry points (read on first use),
        then the built-ins."""
        yield from self._user
        if self._entry_points is None:
            self._entry_points = _entry_points()
        yield from self._entry_points
        yield from self._builtin_entries()

    def _builtin_entries(self) -> list[Entry]:
        """The built-in modules' references (torch_ops, the npu_* modules, atb_ops), imported on first
        use: a registry is made at start, before the first frame, which imports no numpy."""
        if self._builtins is None:
            from tui_acc.replay import (
                atb_attention,
                atb_moe,
                atb_ops,
                aten_ops,
                collective,
                ge_ops,
                npu_attention,
                npu_cache,
                npu_flash_attention,
                npu_moe,
                npu_moe_routing,
                npu_ops,
                npu_quant,
                npu_quant_param,
                npu_swiglu_quant,
                torch_ops,
            )

            tables = (
                torch_ops.API_REFERENCES,
                npu_ops.REFERENCES,
                npu_attention.REFERENCES,
                npu_flash_attention.REFERENCES,
                npu_quant.REFERENCES,
                npu_quant_param.REFERENCES,
                npu_swiglu_quant.REFERENCES,
                npu_cache.REFERENCES,
                npu_moe.REFERENCES,
                npu_moe_routing.REFERENCES,
                atb_ops.REFERENCES,
                atb_attention.REFERENCES,
                atb_moe.REFERENCES,
                collective.REFERENCES,
                ge_ops.REFERENCES,
                aten_ops.REFERENCES,
                torch_ops.MODULE_REFERENCES,
            )
            self._builtins = [
                Entry(key, "built-in", function=function)
                for table in tables
                for key, function in table.items()
            ]
        return self._builtins

    def find(self, *candidates: str | None) -> Entry | None:
        """The first entry matching the first candidate that any matches (record name, then type)."""
        wanted = tuple(c for c in candidates if c)
        if wanted in self._found:
            return self._found[wanted]
        found = next((e for c in wanted for e in self.entries() if e.matches(c)), None)
        self._found[wanted] = found
        return found


def _entry_points() -> list[Entry]:
    from importlib.metadata import entry_points

    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(point, "dist", None)
        where = f"entry point of {dist.name}" if dist is not None else "entry point"
        found.append(Entry(point.name, where, point.value))
    return found


def _import(spec: str, described: str) -> Reference:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name.strip())
        for part in attribute.strip().split("."):
            target = getattr(target, part)
    except Exception as exc:  # whatever the user's module raises on import: named, not a crash
        raise PluginError(f"{described} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if not callable(target):
        raise PluginError(f"{described} is not callable (a {type(target).__name__})")
    function: Reference = target
    return function
