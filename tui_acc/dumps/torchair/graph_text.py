"""TorchAir's graph text (``dynamo_original_graph_{id}_rank_{r}_pid_{pid}_ts_{ts}.txt``): the GE graph
TorchAir built from the FX graph, as protobuf text (``str(GraphDef)``; docs/formats.md §7.2).

What tui-acc takes from it, per op in graph order: its name and type, its data inputs
(``"producer:index"``; a control edge ``":-1"`` is not data), and per output the FX tensor it
computes (``output_desc``'s attr ``_fx_tensor_name`` = ``{fx node}-{target}.OUTPUT.{i}``, which
TorchAir's ``fx2ge_converter.py`` sets) and its shape; and, where TorchAir was asked to record it
(``export.experimental.enable_record_nn_module_stack``), the op's ``nn_module_stack`` attr, the FX
node's module path.

The text is read by text_format.py (no recursion, however deep the nesting); a file that is not
protobuf text is refused by name, with the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tui_acc.dumps.policy import LoadPolicy
from tui_acc.dumps.torchair.text_format import GraphTextError, Message, parse

# dynamo_original_graph_{graph id}_rank_{rank}_pid_{pid}_ts_{time}.txt (torchair debug_config.py full_path)
GRAPH_FILE = re.compile(r"^dynamo_original_graph_(?P<id>\d+)(?:_rank_(?P<rank>\d+))?.*\.(?:txt|pbtxt)$")
FX_TENSOR_ATTR = "_fx_tensor_name"
MODULE_ATTR = "nn_module_stack"
_DIM = re.compile(r"-?[0-9]{1,18}")
_OUTPUT_SUFFIX = re.compile(r"\.OUTPUT\.(\d{1,9})$", re.ASCII)
# nn_module_stack is str() of dynamo's {key: (module path, class)}, outermost first: the path quoted
# either way (str() picks "" for L['self'].layers.0), the class as str(type) or its name
_MODULE_ENTRY = re.compile(
    r"""\(\s*(?:'(?P<single>[^'\\]*)'|"(?P<double>[^"\\]*)")\s*,\s*"""
    r"""(?:<class\s+'(?P<type>[^']*)'>|'(?P<named>[^']*)')"""
)
# dynamo's source names: L['self'].model.layers.0 (torch 2.1+), older self.model.layers.0 or
# L__self___model_layers_0; the model itself is the root, not a module of its own
_MODULE_ROOT = re.compile(r"""^(?:L\[(?:'[^']*'|"[^"]*")\]|self)(?:\.|$)""")

# an attr's value as GE's AttrDef holds it: b, i, f, s, or a list of one of them
Scalar = bool | int | float | str
AttrValue = Scalar | list[Scalar]
_ATTR_KINDS = ("b", "i", "f", "s")


@dataclass
class GraphOp:
    """One op of the graph as TorchAir built it."""

    name: str
    type: str
    inputs: list[str]  # data edges, "producer:index"
    fx_outputs: list[str | None]  # per output: the FX node ("{node}-{target}") it computes, or None
    fx_indices: list[int]  # per output: which of that node's outputs (``.OUTPUT.{i}``)
    output_shapes: list[tuple[int, ...]]
    module: str | None = None  # the innermost module path, where nn_module_stack was recorded
    # every module the FX node ran in, outermost first: (path, class name)
    modules: list[tuple[str, str]] = field(default_factory=list)
    # the op's attributes (``transpose_x2``, ``axes``, ``epsilon``): what a replay of it needs
    attrs: dict[str, AttrValue] = field(default_factory=dict)

    @property
    def fx_node(self) -> str | None:
        """The FX node whose outputs this op computes (its first output's)."""
        return next((name for name in self.fx_outputs if name), None)


@dataclass
class GraphText:
    """A graph text file: the graph's id (its file name's), rank, name and ops in graph order."""

    path: Path
    graph_id: int
    rank: int | None
    name: str
    ops: dict[str, GraphOp] = field(default_factory=dict)

    @cached_property
    def consumers(self) -> dict[str, set[str]]:
        """Op -> the ops that take one of its outputs (the graph's data edges), read once."""
        found: dict[str, set[str]] = {}
        for op in self.ops.values():
            for edge in op.inputs:
                found.setdefault(edge.rpartition(":")[0], set()).add(op.name)
        return found

    def by_fx_node(self) -> dict[str, list[GraphOp]]:
        """FX node -> the ops that compute its outputs (most nodes one)."""
        found: dict[str, list[GraphOp]] = {}
        for op in self.ops.values():
            for node in dict.fromkeys(n for n in op.fx_outputs if n):
                found.setdefault(node, []).append(op)
        return found


def is_graph_file(name: str) -> bool:
    """Whether a file name is a TorchAir graph text's."""
    return GRAPH_FILE.match(name) is not None


def read_graph(path: Path, policy: LoadPolicy) -> GraphText:
    """The graph text at ``path``; GraphTextError where it is not one."""
    matched = GRAPH_FILE.match(path.name)
    if matched is None:
        raise GraphTextError(f"{path}: not named like a TorchAir graph text (dynamo_original_graph_*.txt)")
    try:
        text = policy.read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphTextError(f"{path}: cannot read ({exc})") from exc
    message = parse(text, path)
    graph = GraphText(path, int(matched["id"]), int(matched["rank"]) if matched["rank"] else None, "")
    holder = _fields(message, "graph")  # a ModelDef holds its graphs; a GraphDef is the file itself
    for top in holder or [message]:
        graph.name = graph.name or _scalar(top, "name") or ""
        for op in _fields(top, "op"):
            parsed = _op(op)
            if parsed.name:
                graph.ops.setdefault(parsed.name, parsed)
    if not graph.ops:
        raise GraphTextError(f"{path}: a graph text without an op")
    return graph


def _fields(message: Message, name: str) -> list[Message]:
    return [value for key, value in message if key == name and isinstance(value, list)]


def _scalar(message: Message, name: str) -> str | None:
    values = [value for key, value in message if key == name and isinstance(value, str)]
    return values[0] if values else None


def _scalars(message: Message, name: str) -> list[str]:
    return [value for key, value in message if key == name and isinstance(value, str)]


def _attr(message: Message, key: str) -> str | None:
    """The string value of attr ``key`` (``attr { key: "k" value { s: "..." } }``)."""
    for attr in _fields(message, "attr"):
        named, value = _key_value(attr)
        if named == key and value is not None:
            return "".join(_scalars(value, "s"))
    return None


def _key_value(attr: Message) -> tuple[str | None, Message | None]:
    """An attr's key and its (first) value, read in one pass."""
    key: str | None = None
    value: Message | None = None
    for name, field_value in attr:
        if name == "key" and key is None and isinstance(field_value, str):
            key = field_value
        elif name == "value" and value is None and isinstance(field_value, list):
            value = field_value
    return key, value


def _op(message: Message) -> GraphOp:
    # one pass over the op's fields (a graph of thousands of ops, each of dozens): the first name and
    # type, every data input, the output descriptions and the attrs in the order written
    name: str | None = None
    kind: str | None = None
    inputs: list[str] = []
    descs: list[Message] = []
    attrs: dict[str, AttrValue] = {}
    stack: str | None = None
    for key, field_value in message:
        if isinstance(field_value, str):
            if key == "input":
                if field_value and not field_value.endswith(":-1"):
                    inputs.append(field_value)
            elif key == "name" and name is None:
                name = field_value
            elif key == "type" and kind is None:
                kind = field_value
        elif key == "output_desc":
            descs.append(field_value)
        elif key == "attr":
            named, value = _key_value(field_value)
            if named and value is not None:
                if named == MODULE_ATTR and stack is None:
                    stack = "".join(_scalars(value, "s"))
                if (parsed := _attr_value(value)) is not None:
                    attrs[named] = parsed
    fx_outputs: list[str | None] = []
    fx_indices: list[int] = []
    shapes: list[tuple[int, ...]] = []
    for desc in descs:
        tensor = _attr(desc, FX_TENSOR_ATTR) or ""
        index = _OUTPUT_SUFFIX.search(tensor)
        fx_outputs.append(tensor[: index.start()] if index else None)
        fx_indices.append(int(index[1]) if index else len(fx_indices))
        dims: list[int] = []
        for shape in _fields(desc, "shape"):
            dims += [int(d) for d in _scalars(shape, "dim") if _DIM.fullmatch(d)]
        shapes.append(tuple(dims))
    modules = _modules(stack) if stack else []
    return GraphOp(
        name=name or "",
        type=kind or "",
        inputs=inputs,
        fx_outputs=fx_outputs,
        fx_indices=fx_indices,
        output_shapes=shapes,
        module=modules[-1][0] if modules else None,
        modules=modules,
        attrs=attrs,
    )


def _modules(stack: str) -> list[tuple[str, str]]:
    """The modules of an ``nn_module_stack`` attr, outermost first: each path without the model's own
    prefix (``L['self'].``), and the class's own name (``LlamaDecoderLayer``)."""
    found = []
    for entry in _MODULE_ENTRY.finditer(stack):
        path = _MODULE_ROOT.sub("", entry["single"] if entry["single"] is not None else entry["double"])
        kind = (entry["type"] or entry["named"] or "").rpartition(".")[2]
        if path:
            found.append((path, kind or "module"))
    return found


def _attr_value(value: Message) -> AttrValue | None:
    """An AttrDef's value (``value { b: true }``, ``value { list { i: -1 i: 2 } }``); None for the kinds
    a replay has no use for (tensors, graphs, functions) and for a number that is none."""
    for kind in _ATTR_KINDS:
        written = _scalars(value, kind)
        if written:
            return _typed(kind, written[0]) if kind != "s" else "".join(written)
    for listed in _fields(value, "list"):
        for kind in _ATTR_KINDS:
            items = [_typed(kind, item) for item in _scalars(listed, kind)]
            if None in items:  # an item that is no number: the list is not read (never a shorter one)
                return None
            if items:
                return [item for item in items if item is not None]
        return []
    return None


def _typed(kind: str, written: str) -> Scalar | None:
    """A scalar as the text writes it (``true``, ``-1``, ``1e-06``, ``inf``) in its kind's type."""
    if kind == "b":
        return written in ("true", "True", "t", "1")
    if kind == "i":
        return int(written) if _DIM.fullmatch(written) else None
    if kind == "f":
        try:
            return float(written.rstrip("fF")) if len(written) <= 40 else None
        except ValueError:
            return None
    return written
