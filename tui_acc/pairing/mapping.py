"""Which ATB operation types stand for which torch module types, and user mapping files.

Two file formats are accepted (``--mapping FILE``):

* msit's ``op_mapping_file.json`` (docs/formats.md §2.5): ``{"AtbOpType": "TorchType" | [...],
  "AtbType_outtensor0": ["TorchType_output_0"]}``; the second form pins which files are compared.
* our TOML, easier to read and able to pin single nodes::

      [types]                      # ATB op type = torch module type(s), matched as substrings
      LinearOperation = "Linear"
      MlpGateLayerV2 = ["MLP", "BloomMLP"]

      [nodes]                      # ATB node folder = torch module name, overriding everything
      "3_LlamaLayer/9_SelfAttentionOperation" = "root.model.layers.2.self_attn"

      [tensors]                    # ATB type.file = torch type.file
      "CommonLayer.outtensor0" = "GLMBlock.output_0"
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tui_acc.errors import TuiAccError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# msit's built-in map (docs/formats.md §2.5) and more. Values match torch types as substrings.
BUILTIN_TYPES: dict[str, tuple[str, ...]] = {
    "LinearOperation": ("Linear",),
    "LinearParallelOperation": ("Linear",),
    "LmHead": ("Linear",),
    "RmsNormOperation": ("RMSNorm", "RmsNorm"),
    "LayerNormOperation": ("LayerNorm",),
    "SelfAttentionOperation": ("CoreAttention",),
    "MlpGateLayerV2": ("BloomMLP", "MLP"),
    "ActivationOperation": ("Activation", "SiLU", "GELU", "GeLU"),
    "WordEmbedding": ("Embedding",),
    "GatherOperation": ("Embedding",),
}

# a mapped name -> torch types that contain it without being that operation (matched only by their
# full name): a rotary embedding computes cos and sin, it looks nothing up
NOT_THE_SAME = {"embedding": ("rotaryembedding",)}


def _contains(torch_type: str, mapped: str) -> bool:
    """Whether the (lower-case) torch type holds the mapped name, as msit matches them; a type
    ``NOT_THE_SAME`` sets apart only by its full name."""
    if any(word in torch_type for word in NOT_THE_SAME.get(mapped, ())):
        return torch_type == mapped
    return mapped in torch_type


_NAME = re.compile(r"^[A-Za-z0-9_]*$")


class MappingError(TuiAccError, ValueError):
    """A mapping file that cannot be used; the message names the file and the problem."""


@dataclass
class OpMapping:
    """Built-in and user type maps, pinned node pairs and pinned tensor files."""

    types: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(BUILTIN_TYPES))
    nodes: dict[str, str] = field(default_factory=dict)  # ATB node name -> torch module name
    # (ATB type, ATB file) -> (torch types, torch file): which files of such a node pair are compared
    tensors: dict[tuple[str, str], tuple[tuple[str, ...], str]] = field(default_factory=dict)
    source: str | None = None

    def torch_types_for(self, atb_type: str) -> tuple[str, ...]:
        """Torch type substrings an ATB type stands for; quantized variants map like their float op."""
        for candidate in (atb_type, atb_type.replace("Quant", ""), re.sub(r"W\d+A\d+", "", atb_type)):
            if candidate in self.types:
                return self.types[candidate]
        if atb_type.endswith("Operation") and len(atb_type) > len("Operation"):
            return (atb_type.removesuffix("Operation"),)
        return (atb_type,)

    def matches(self, atb_type: str, torch_type: str) -> bool:
        """Whether ``torch_type`` contains one of the torch types ``atb_type`` stands for
        (case-insensitive), other than as a word a different module also ends in (``Embedding`` is
        no ``LlamaRotaryEmbedding``: a rotary embedding computes cos and sin, not a lookup)."""
        wanted = torch_type.lower()
        return any(t and _contains(wanted, t.lower()) for t in self.torch_types_for(atb_type))


def load_mapping(path: Path | None) -> OpMapping:
    """The built-in map, extended by ``path`` (msit JSON or our TOML) when given."""
    if path is None:
        return OpMapping()
    if path.is_dir():  # msit's -mf takes the folder holding op_mapping_file.json
        path = path / "op_mapping_file.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MappingError(f"{path}: cannot read the mapping file ({exc.strerror or exc})") from exc
    return _from_msit_json(path, text) if path.suffix == ".json" else _from_toml(path, text)


def _from_msit_json(path: Path, text: str) -> OpMapping:
    """The built-in map with msit's ``op_mapping_file.json`` added."""
    mapping = OpMapping(source=str(path))
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise MappingError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise MappingError(f"{path}: expected a JSON object of ATB type -> torch type(s)")
    for key, value in raw.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise MappingError(f"{path}: {key!r} must map to a string or a list of strings")
        for name in [key, *values]:
            if not _NAME.match(name):
                raise MappingError(f"{path}: {name!r} is not a plain name (letters, digits, _)")
        tensor_key = re.match(r"^(\w+?)_((?:out|in)tensor\d+)$", key)
        if tensor_key:
            if not all("_output_" in v for v in values):
                raise MappingError(
                    f"{path}: {key!r} pins a file; its values must look like TorchType_output_0"
                )
            torch_types = tuple(v.rpartition("_output_")[0] for v in values)
            torch_slot = "output_" + values[0].rpartition("_output_")[2]
            mapping.tensors[(tensor_key.group(1), tensor_key.group(2))] = (torch_types, torch_slot)
            mapping.types.setdefault(tensor_key.group(1), torch_types)
        else:
            mapping.types[key] = tuple(values)
    return mapping


def _from_toml(path: Path, text: str) -> OpMapping:
    """The built-in map with our TOML's [types], [nodes] and [tensors] added."""
    mapping = OpMapping(source=str(path))
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"{path}: not valid TOML ({exc})") from exc
    unknown = set(raw) - {"types", "nodes", "tensors"}
    if unknown:
        raise MappingError(
            f"{path}: unknown section(s) {sorted(unknown)}; expected [types], [nodes], [tensors]"
        )
    for atb_type, value in raw.get("types", {}).items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise MappingError(f"{path}: [types] {atb_type} must be a string or a list of strings")
        mapping.types[atb_type] = tuple(values)
    for atb_node, torch_node in raw.get("nodes", {}).items():
        if not isinstance(torch_node, str):
            raise MappingError(f"{path}: [nodes] {atb_node!r} must map to one torch module name")
        mapping.nodes[atb_node] = torch_node
    for key, value in raw.get("tensors", {}).items():
        atb_type, _, atb_slot = key.partition(".")
        torch_type, _, torch_slot = str(value).partition(".")
        if not (atb_slot and torch_slot):
            raise MappingError(
                f'{path}: [tensors] {key!r} = {value!r}; expected "AtbType.outtensor0" = "TorchType.output_0"'
            )
        mapping.tensors[(atb_type, atb_slot)] = ((torch_type,), torch_slot)
    return mapping
