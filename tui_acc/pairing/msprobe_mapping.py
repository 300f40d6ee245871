"""msprobe compare's mapping files, for two msprobe dumps whose names differ (``-dm``, ``-lm``).

* ``--data-mapping FILE`` (msprobe ``-dm``): YAML ``test tensor name: golden tensor name``, the
  names msprobe compare prints: the record, then ``.input.0``, ``.output.0``, ``.parameters.weight``
  (where dump.json gives a file, its name without ``.pt``: a tensor dump's keyword inputs are
  ``.kwargs.x``). As msprobe's ``Comparator.process_data_mapping``, a test tensor the file does
  not name keeps its own name, and a golden name ``N/A`` (msprobe writes it) pairs with nothing.
* ``--layer-mapping [FILE]`` (msprobe ``-lm``): YAML ``{TestClass: {test child: golden child}}``,
  applied to whole records as ``msprobe_layers.py`` tells; their files pair by slot, as msprobe's
  ``generate_data_mapping`` pairs them by suffix. Without a file, records pair by their place in
  the layer tree. Where both files are given, a tensor the data mapping names follows it.

The pairing itself stays by name: the test dump is seen through the golden's names (a view of its
index, ``NameTranslation.view``), paired by ``pair_token_by_name``, and every pair and unmatched
entry gets its test names back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.pairing.mapping import MappingError
from tui_acc.pairing.model import NodePair, TokenPairs, Unmatched
from tui_acc.pairing.msprobe_layers import (
    LayerRules,
    compile_rules,
    is_module_record,
    map_records,
    records_of,
)

FORMAT = "msprobe"
NOT_AVAILABLE = "N/A"  # msprobe's "no partner"

PairToken = Callable[[int, DumpIndex, DumpIndex], TokenPairs]
Target = tuple[str, str]  # (golden record, golden suffix or slot)


@dataclass(frozen=True)
class MsprobeMapping:
    """What the files say, before it is applied to two dumps."""

    data: dict[str, str | None]  # test tensor name -> golden tensor name (None: N/A)
    layers: LayerRules | None  # None: no -lm; {}: -lm without a file
    sources: tuple[str, ...]


def load_msprobe_mapping(
    data_mapping: Path | None = None, layer_mapping: Path | bool | None = None
) -> MsprobeMapping | None:
    """Read and check the files; None when neither is given.

    Raises:
        MappingError: a file is unreadable, not YAML, or not of the shape msprobe reads.
    """
    if data_mapping is None and not layer_mapping:
        return None
    data: dict[str, str | None] = {}
    sources = []
    if data_mapping is not None:
        for key, value in _mapping(data_mapping, "test tensor name: golden tensor name").items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise MappingError(f"{data_mapping}: {key!r}: {value!r}: both names must be strings")
            data[key] = None if value == NOT_AVAILABLE else value
        sources.append(f"data mapping {data_mapping} ({len(data)} tensors)")
    layers = None
    if isinstance(layer_mapping, Path):
        raw: dict[str, dict[str, str]] = {}
        for class_name, children in _mapping(layer_mapping, "Class: {test child: golden child}").items():
            if not isinstance(children, dict) or not children:
                raise MappingError(
                    f"{layer_mapping}: {class_name!r} must map child names to golden names, like "
                    "'attention: self_attn'"
                )
            for child, golden in children.items():
                if not (_is_name(child) and _is_name(golden)):
                    raise MappingError(
                        f"{layer_mapping}: {class_name}.{child!r}: {golden!r}: names must be text"
                    )
            raw[str(class_name)] = {str(k): str(v) for k, v in children.items()}
        layers = compile_rules(raw)
        sources.append(f"layer mapping {layer_mapping}")
    elif layer_mapping:
        layers = {}
        sources.append("layer mapping without a file (records paired by their place in the layer tree)")
    return MsprobeMapping(data, layers, tuple(sources))


def _is_name(value: object) -> bool:
    """Text, or a number YAML read from a name such as a layer index (``0: 1``)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _mapping(path: Path, shape: str) -> dict[Any, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise MappingError(f"{path}: cannot read the mapping file ({reason})") from exc
    import yaml  # here, not at import: only a session given these files pays for it

    try:
        raw = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise MappingError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict) or not raw:
        raise MappingError(f"{path}: expected a YAML mapping of {shape}; found {type(raw).__name__}")
    return raw


def bind(mapping: MsprobeMapping | None, golden: DumpIndex, test: DumpIndex) -> NameTranslation | None:
    """The mapping applied to two dumps (None without one).

    Raises:
        MappingError: the dumps are not both msprobe dumps.
    """
    if mapping is None:
        return None
    if golden.format != FORMAT or test.format != FORMAT:
        raise MappingError(
            f"{'; '.join(mapping.sources)}: msprobe's mapping files pair two msprobe dumps; these are "
            f"{golden.format} (golden) and {test.format} (test)"
        )
    return NameTranslation(mapping, golden, test)


class NameTranslation:
    """The test dump seen through the golden's names, and the way back."""

    def __init__(self, mapping: MsprobeMapping, golden: DumpIndex, test: DumpIndex) -> None:
        self.golden, self.test = golden, test
        self.notes = [f"msprobe name mapping: {'; '.join(mapping.sources)}"]
        self._layers = mapping.layers
        self._lock = threading.RLock()
        self._records: dict[str, str | None] | None = None  # by layer: test record -> golden record
        self._tree: NodeTree | None = None
        self._renamed: dict[str, str] = {}  # test record -> its name in the view's tree
        self._current: dict[int, _TokenView] = {}  # the tokens being paired (kept only meanwhile)
        # test record -> {its tensor's suffix: (golden record, golden suffix) or None}
        self._data: dict[str, dict[str, Target | None]] = {}
        test_records, golden_records = set(test.tree.nodes), set(golden.tree.nodes)
        unknown, missing = [], []
        for key, value in mapping.data.items():
            record = _record_of(key, test_records)
            if record is None:
                unknown.append(key)
                continue
            target_record = _record_of(value, golden_records) if value is not None else None
            if value is not None and target_record is None:
                missing.append(value)
            target = (target_record, value[len(target_record) + 1 :]) if value and target_record else None
            self._data.setdefault(record, {})[key[len(record) + 1 :]] = target
        for names, side, what in ((unknown, "test", "unused"), (missing, "golden", "left unpaired")):
            if names:
                self.notes.append(
                    f"data mapping: {len(names)} of its names are not records of the {side} dump "
                    f"(e.g. {names[0]}); {what}"
                )
        if self._layers is not None and not (_has_tree(golden) and _has_tree(test)):
            self._layers = None  # msprobe's layer mapping finds no data item without construct.json
            self.notes.append(
                "layer mapping not applied: a dump without construct.json's module tree (level L1) has no "
                "layers to map; records paired by name"
            )
        self.view = replace(test, tokens=_ViewTokens(self))

    def pair(self, token: int, pair_token: PairToken) -> TokenPairs:
        """``pair_token`` over the view, its results under the test's own names."""
        with self._lock:
            self._build()
            view = self._current[token] = self._token_view(token)  # what the view shows meanwhile
            try:
                found = pair_token(token, self.golden, self.view)
            finally:
                del self._current[token]
        return TokenPairs(
            [view.restore(pair, self.test.tree) for pair in found.pairs],
            view.extras + [view.restore_unmatched(u) for u in found.unmatched],
        )

    def token_nodes(self, token: int) -> dict[str, list[TensorRef]]:
        """One token of the test dump under golden names (what the view's ``tokens[token]`` is)."""
        with self._lock:
            self._build()
            return (self._current.get(token) or self._token_view(token)).nodes

    # --- the view -------------------------------------------------------------------------------

    def _build(self) -> None:
        """Once, on first use: the layer mapping's record pairs and the renamed tree."""
        if self._tree is not None:
            return
        if self._layers is not None:
            self._records = map_records(records_of(self.golden), records_of(self.test), self._layers)
        tree = self.test.tree
        renamed = {tree.root: tree.root}
        taken = {tree.root}
        for node in tree.preorder():
            if node.name == tree.root:
                continue
            name = self._tree_name(node.name) or node.name
            while name in taken:  # another record has it: a name nothing is ever filed under
                name += "\x00"
            renamed[node.name] = name
            taken.add(name)
        view = NodeTree(tree.root, {})
        for node in tree.nodes.values():
            parent = renamed[node.parent] if node.parent is not None else None
            children = [renamed[c] for c in node.children]
            view.nodes[renamed[node.name]] = Node(renamed[node.name], node.type, parent, node.depth, children)
        self._tree, self._renamed = view, renamed
        self.view.tree = view

    def _record_target(self, record: str) -> str | None:
        """Where a test record's files go when the data mapping does not say (None: nowhere)."""
        if self._records is not None:
            return self._records.get(record, record)
        return record

    def _tree_name(self, record: str) -> str | None:
        """The record's name in the view's tree: where the data mapping sends its first file, else
        where its files go."""
        targets = [t[0] for t in self._data.get(record, {}).values() if t is not None]
        return targets[0] if targets else self._record_target(record)

    def _token_view(self, token: int) -> _TokenView:
        view = _TokenView()
        golden_nodes = self.golden.tokens.get(token, {})
        for record, refs in self.test.tokens.get(token, {}).items():
            rules = self._data.get(record, {})
            default = self._record_target(record)
            missed = []
            for ref in refs:
                target = self._target(record, ref, rules, default, golden_nodes)
                if target is not None and view.add(target, record, ref):
                    self._ensure_node(target[0], record)
                else:
                    missed.append(ref.slot)
            if not refs and default is not None and default not in view.nodes:
                view.nodes[default] = []  # a call without files still has its place (and children)
                view.back_node.setdefault(default, record)
                self._ensure_node(default, record)
            elif not refs or len(missed) == len(refs):
                view.extras.append(Unmatched("node", "test", token, record))
            else:
                view.extras += [Unmatched("tensor", "test", token, f"{record}/{slot}") for slot in missed]
        return view

    def _target(
        self,
        record: str,
        ref: TensorRef,
        rules: dict[str, Target | None],
        default: str | None,
        golden_nodes: Mapping[str, list[TensorRef]],
    ) -> Target | None:
        """(golden record, golden slot) for one test file; None: it has no partner."""
        for suffix in _suffixes(record, ref) if rules else ():
            if suffix in rules:
                target = rules[suffix]
                if target is None:
                    return None
                golden_record, golden_suffix = target
                for golden_ref in golden_nodes.get(golden_record, []):
                    if golden_suffix in _suffixes(golden_record, golden_ref):
                        return golden_record, golden_ref.slot
                return target  # not in this token: the pairing lists it as unmatched
        return (default, ref.slot) if default is not None else None

    def _ensure_node(self, name: str, record: str) -> None:
        """A name files are filed under exists in the view's tree (beside its record's node)."""
        tree = self._tree
        assert tree is not None
        if name in tree.nodes:
            return
        own = tree.nodes[self._renamed[record]]
        parent = tree.nodes[own.parent or tree.root]
        tree.nodes[name] = Node(name, own.type, parent.name, own.depth)
        parent.children.insert(parent.children.index(own.name) + 1, name)


class _TokenView:
    """One token of the test dump under golden names, and where each name came from."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[TensorRef]] = {}
        self.back: dict[tuple[str, str], tuple[str, TensorRef]] = {}  # (view name, slot) -> own
        self.back_node: dict[str, str] = {}  # view name -> the test record first filed under it
        self.extras: list[Unmatched] = []

    def add(self, target: Target, record: str, ref: TensorRef) -> bool:
        if target in self.back:
            return False  # two test files for one golden file: the first keeps it
        name, slot = target
        self.nodes.setdefault(name, []).append(ref if slot == ref.slot else replace(ref, slot=slot))
        self.back[target] = (record, ref)
        self.back_node.setdefault(name, record)
        return True

    def restore(self, pair: NodePair, tree: NodeTree) -> NodePair:
        tensors = []
        for tensor in pair.tensors:
            record, ref = self.back.get((tensor.test_node, tensor.test.slot), (tensor.test_node, tensor.test))
            tensors.append(replace(tensor, test_node=record, test=ref))
        record = self.back_node.get(pair.test, pair.test)
        test_type = tree.nodes[record].type if record in tree.nodes else pair.test_type
        return replace(pair, test=record, test_type=test_type, tensors=tuple(tensors))

    def restore_unmatched(self, entry: Unmatched) -> Unmatched:
        if entry.side != "test":
            return entry
        if entry.kind == "tensor":
            name, _, slot = entry.name.rpartition("/")
            if (name, slot) in self.back:
                record, ref = self.back[(name, slot)]
                return replace(entry, name=f"{record}/{ref.slot}")
        return replace(entry, name=self.back_node.get(entry.name, entry.name))


class _ViewTokens(Mapping[int, dict[str, list[TensorRef]]]):
    """The view's tokens: each one translated when the pairing asks for it."""

    def __init__(self, translation: NameTranslation) -> None:
        self._translation = translation

    def __getitem__(self, token: int) -> dict[str, list[TensorRef]]:
        if token not in self._translation.test.tokens:
            raise KeyError(token)
        return self._translation.token_nodes(token)

    def __iter__(self) -> Iterator[int]:
        return iter(self._translation.test.tokens)

    def __len__(self) -> int:
        return len(self._translation.test.tokens)


def _record_of(name: str, records: set[str]) -> str | None:
    """The longest record ``name`` starts with (``X.forward.0.input.0`` -> ``X.forward.0``)."""
    at = len(name)
    while (at := name.rfind(".", 0, at)) > 0:
        if name[:at] in records:
            return name[:at]
    return None


def _suffixes(record: str, ref: TensorRef) -> tuple[str, ...]:
    """The names msprobe compare may give a file, after its record's: from dump.json's data_name
    where there is a file (``kwargs.x``), else from where it sits (``input.x``), which tui-acc's
    slots spell."""
    stem = Path(ref.location).name.rpartition(".")[0] if ref.has_data else ""
    if stem.startswith(record + ".") and stem[len(record) + 1 :] != ref.slot:
        return (stem[len(record) + 1 :], ref.slot)
    return (ref.slot,)


def _has_tree(index: DumpIndex) -> bool:
    """Whether construct.json placed any record below a module (levels L0 and mix; never L1)."""
    root = index.tree.root
    return any(
        node.parent not in (None, root) and is_module_record(node.parent)
        for node in index.tree.nodes.values()
    )
