"""TorchAir's graph text (``dynamo_original_graph_{id}_rank_{r}_pid_{pid}_ts_{ts}.txt``): the GE graph
TorchAir built from the FX graph, as protobuf text (``str(GraphDef)``; docs/formats.md §7.2).

What tui-acc takes from it, per op in graph order: its name and type, its data inputs
(``"producer:index"``; a control edge ``":-1"`` is not data), and per output the FX tensor it
computes (``output_desc``'s attr ``_fx_tensor_name`` = ``{fx node}-{target}.OUTPUT.{i}``, which
TorchAir's ``fx2ge_converter.py`` sets) and its shape; and, where TorchAir was asked to record it
(``export.experimental.enable_record_nn_module_stack``), the op's ``nn_module_stack`` attr, the FX
node's module path.

The text is read by a tokenizer of the text format (one regular expression) and an iterative parser:
no recursion, however deep the nesting; a file that is not protobuf text is refused by name. What
``str(GraphDef)`` writes (a field or a brace at a time, double-quoted strings, no comments) is read
a field at a time first, three to four times faster (``_plain``); anything else is read token by token.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NoReturn

from tui_acc.dumps.model import DumpError
from tui_acc.dumps.policy import LoadPolicy

# dynamo_original_graph_{graph id}_rank_{rank}_pid_{pid}_ts_{time}.txt (torchair debug_config.py full_path)
GRAPH_FILE = re.compile(r"^dynamo_original_graph_(?P<id>\d+)(?:_rank_(?P<rank>\d+))?.*\.(?:txt|pbtxt)$")
FX_TENSOR_ATTR = "_fx_tensor_name"
MODULE_ATTR = "nn_module_stack"
_DIM = re.compile(r"-?[0-9]{1,18}")
_OUTPUT_SUFFIX = re.compile(r"\.OUTPUT\.(\d{1,9})$", re.ASCII)
# each token with the white space and comments before it skipped by the regex engine (findall of
# strings, not a Match per token: twice as fast on a graph text of 1,000 ops): strings (with their
# escapes), words and numbers, braces, colons, the brackets of a repeated field, commas; the end (an
# empty token, so that trailing white space is skipped in one match, not retried at each of its
# characters); any other single character is one the format does not have. A string left open is a
# token to the end of its line (refused as such): tried again at each character after it, a line of
# escaped quotes took quadratic time
_TOKEN = re.compile(
    r'(?:\s+|#[^\n]*)*("(?:[^"\\\n]|\\.)*"?|\'(?:[^\'\\\n]|\\.)*\'?|[A-Za-z0-9_.+\-]+|[{}:<>\[\],;]|\Z|.)'
)
# what str() of a protobuf message writes, one field or brace per match: ``name: value`` (a
# double-quoted string or a word), ``name {`` (``name: {`` too), ``}``, the end; any other character
# (a comment, a single quote, a string continued or left open, ``<``, ``[``) sends the whole text to
# the tokenizer: it is the last match, the rest of the text (not matched again at each character
# after it: a long line of escaped quotes would take quadratic time)
_PLAIN = re.compile(
    r'[ \t\r\n]*(?:([A-Za-z0-9_.+\-]+)[ \t]*:[ \t]*("(?:[^"\\\n]|\\.)*"|[A-Za-z0-9_.+\-]+)'
    r"|([A-Za-z0-9_.+\-]+)[ \t]*:?[ \t]*\{|(\})|(\Z)|([\s\S]+))"
)
_PUNCTUATION = frozenset("{}:<>[],;")
_WORD = re.compile(r"[A-Za-z0-9_.+\-]")
_ESCAPES = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.S)
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b'"': b'"', b"'": b"'", b"\\": b"\\"}
# nn_module_stack is str() of dynamo's {key: (module path, class)}, outermost first: the path quoted
# either way (str() picks "" for L['self'].layers.0), the class as str(type) or its name
_MODULE_ENTRY = re.compile(
    r"""\(\s*(?:'(?P<single>[^'\\]*)'|"(?P<double>[^"\\]*)")\s*,\s*"""
    r"""(?:<class\s+'(?P<type>[^']*)'>|'(?P<named>[^']*)')"""
)
# dynamo's source names: L['self'].model.layers.0 (torch 2.1+), older self.model.layers.0 or
# L__self___model_layers_0; the model itself is the root, not a module of its own
_MODULE_ROOT = re.compile(r"""^(?:L\[(?:'[^']*'|"[^"]*")\]|self)(?:\.|$)""")

# A message: its fields in the order written, each a name and a string (scalars kept as written,
# strings unescaped) or a message.
Message = list[tuple[str, "str | Message"]]
# an attr's value as GE's AttrDef holds it: b, i, f, s, or a list of one of them
Scalar = bool | int | float | str
AttrValue = Scalar | list[Scalar]
_ATTR_KINDS = ("b", "i", "f", "s")


class GraphTextError(DumpError):
    """A graph text that cannot be read (the message names the file and where it goes wrong)."""


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


def parse(text: str, path: Path) -> Message:
    """Protobuf text format into nested field lists (``[(name, value)]``); GraphTextError where the
    text is not that format, with the line. Adjacent string literals of one field are one value."""
    plain = _plain(text)
    return plain if plain is not None else _tokenized(text, path)


def _plain(text: str) -> Message | None:
    """``text`` read a field at a time, where it holds only what str() of a message writes; None for
    anything else (``_tokenized`` reads it, or names what is wrong): the same fields either way."""
    root: Message = []
    stack = [root]
    current = root
    for name, value, opened, closed, _, other in _PLAIN.findall(text):
        if name:
            if value[0] == '"':
                value = value[1:-1] if "\\" not in value and value.isascii() else _unquoted(value)
            current.append((name, value))
        elif opened:
            child: Message = []
            current.append((opened, child))
            stack.append(child)
            current = child
        elif closed:
            if len(stack) == 1:
                return None
            stack.pop()
            current = stack[-1]
        elif other:
            return None
    return root if len(stack) == 1 else None


def _tokenized(text: str, path: Path) -> Message:
    """``parse`` a token at a time: any text of the format, or the line where it is not."""
    root: Message = []
    stack: list[tuple[Message, str]] = [(root, "")]
    name: str | None = None
    colon = False
    last_string: str | None = None  # the field a string literal just ended, which another may continue
    pieces: list[str] = []  # that string's literals
    for at, token in enumerate(_TOKEN.findall(text)):
        if not token:
            continue  # the end
        if len(token) == 1 and token not in _PUNCTUATION and not _WORD.match(token):
            _fail(path, text, at, f"unexpected character {token!r}")
        if token[0] in "\"'" and not _closed(token):
            _fail(path, text, at, f"unexpected character {token[0]!r}")
        if token in ",;[]":
            continue  # a repeated field's list brackets: each value is added as it comes
        current = stack[-1][0]
        if token[0] in "\"'":
            if last_string is not None and name is None:  # "ab" "cd": one string, joined once at its end
                pieces.append(_unquoted(token))
                continue
            if name is None or not colon:
                _fail(path, text, at, "a string without a field name and ':'")
            last_string = name
            _join(current, pieces)
            pieces = [_unquoted(token)]
            current.append((name, pieces[0]))
            name, colon = None, False
            continue
        _join(stack[-1][0], pieces)
        pieces = []
        last_string = None
        if token in "{<":
            if name is None:
                _fail(path, text, at, f"{token!r} without a field name")
            child: Message = []
            current.append((name, child))
            stack.append((child, "}" if token == "{" else ">"))
            name, colon = None, False
        elif token in "}>":
            if name is not None or len(stack) == 1 or stack[-1][1] != token:
                _fail(path, text, at, f"unbalanced {token!r}")
            stack.pop()
        elif token == ":":
            if name is None or colon:
                _fail(path, text, at, "':' out of place")
            colon = True
        elif name is None:
            name = token
        elif colon:
            current.append((name, token))
            name, colon = None, False
        else:
            _fail(path, text, at, f"{token!r} after field {name!r} without ':'")
    if name is not None or len(stack) > 1:
        raise GraphTextError(f"{path}: ends inside a message or a field")
    _join(stack[-1][0], pieces)
    return root


def _closed(string: str) -> bool:
    """Whether a string token ends with its own quote, not an escaped one (an even run of
    backslashes before it)."""
    body = string[:-1]
    return len(string) >= 2 and string[-1] == string[0] and (len(body) - len(body.rstrip("\\"))) % 2 == 0


def _join(current: Message, pieces: list[str]) -> None:
    """The last field's string, made of the adjacent literals ``pieces``, joined once."""
    if len(pieces) > 1 and current:
        current[-1] = (current[-1][0], "".join(pieces))


def _unquoted(token: str) -> str:
    """A token's value: a string literal unescaped (C escapes, octal and hex bytes as UTF-8)."""
    if token[0] not in "\"'":
        return token
    raw = token[1:-1].encode("utf-8", "surrogateescape")
    if b"\\" in raw:
        raw = _ESCAPES.sub(_escape, raw)
    return raw.decode("utf-8", "replace")


def _escape(found: re.Match[bytes]) -> bytes:
    octal, hexa, other = found.groups()
    if octal is not None:
        return bytes([int(octal, 8) & 0xFF])
    if hexa is not None:
        return bytes([int(hexa, 16)])
    return _SIMPLE_ESCAPES.get(other, b"\\" + other)


def _fail(path: Path, text: str, token: int, problem: str) -> NoReturn:
    """GraphTextError at the line of the ``token``-th token (found again: only a failure needs it)."""
    found = next(itertools.islice(_TOKEN.finditer(text), token, None))
    line = text.count("\n", 0, found.start(1)) + 1
    raise GraphTextError(f"{path}: not protobuf text at line {line}: {problem}")


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
