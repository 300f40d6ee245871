"""Pairing a torch dump with an ATB dump, whose names have nothing in common.

The two graphs are aligned the way an engineer would do it by hand (and as msit's matcher does),
pairing only what can be justified; the rest is listed as unmatched, and ``structural_notes``
says why:

1. **Layers by order.** The torch layers are the children of the first module whose children
   repeat one type (``root.model.layers``); the ATB layers are the top-level nodes of the most
   repeated type (``LlamaLayer``). The k-th layer pairs with the k-th layer, when both sides have
   the same number of layers.
2. **Operators by type and order within a layer** (``by_type.py``). Inside a layer pair, ATB
   operations of a type pair with the torch modules that type stands for (``LinearOperation`` ->
   ``Linear``), in order, when both sides have the same number of them, graph inside graph.
3. **Outside the layers**, the same rule over the rest of the model (``WordEmbedding`` ->
   ``Embedding``, the final ``RmsNormOperation`` -> the final norm), and the last ATB node with
   the module holding the logits.
4. A user mapping file adds types, pins nodes, and pins which files are compared.

Outputs pair in order (``outtensor0`` <-> ``output``/``output_0``); the first input pairs with the
first input (``intensor0`` <-> ``input_0``); the other ATB inputs (weights, masks) are listed as
unmatched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from tui_acc.dumps.model import DumpIndex, Node, NodeTree, TensorRef
from tui_acc.pairing.by_type import TypeMatcher, family_prefix, pair_scope
from tui_acc.pairing.mapping import OpMapping
from tui_acc.pairing.model import NodePair, TensorPair, TokenPairs, Unmatched


@dataclass(frozen=True)
class StructuralPairs(TokenPairs):
    """One token paired structurally, and the torch input files set aside because their ATB
    operation was dumped without inputs (a dump setting, which the notes count once)."""

    skipped_inputs: list[str]


class _FilePairs(NamedTuple):
    tensors: tuple[TensorPair, ...]
    unmatched: list[Unmatched]
    skipped_inputs: list[str]


def pair_token_structurally(
    token: int,
    torch_side: DumpIndex,
    atb_side: DumpIndex,
    torch_is_golden: bool,
    logits_node: str,
    mapping: OpMapping,
) -> StructuralPairs:
    """One token of a torch dump paired with the same token of an ATB dump: layers by order, operators by type
    and order within them (the module's docstring has the rules).

    Args:
        token: the token, present on both sides.
        torch_side: the torch dump (msit torch or msprobe).
        atb_side: the ATB dump.
        torch_is_golden: which side the torch dump is, for the pairs' and unmatched records' sides.
        logits_node: the torch module holding the logits (paired with the last ATB node).
        mapping: the ATB type -> torch type map (built-in, extended by the user's file).

    Returns:
        The node pairs in the torch tree's order, what was left unmatched, and the torch input files set aside
            because their ATB operation was dumped without inputs.
    """
    torch_nodes = torch_side.tokens[token]
    atb_nodes = atb_side.tokens[token]
    # msprobe names a module's call per token (``Module.lm_head.Linear.forward.2``): this token's
    wanted = torch_side.stable_name(logits_node)
    logits_here = next((n for n in torch_nodes if torch_side.stable_name(n) == wanted), logits_node)
    matches = match_nodes(
        torch_side.tree, set(torch_nodes), atb_side.tree, set(atb_nodes), logits_here, mapping
    )
    torch_side_name = "golden" if torch_is_golden else "test"
    atb_side_name = "test" if torch_is_golden else "golden"
    by_torch = dict(matches)
    pairs: list[NodePair] = []
    unmatched: list[Unmatched] = []
    skipped_inputs: list[str] = []
    for node in torch_side.tree.preorder():
        if node.name not in torch_nodes:
            continue
        atb_name = by_torch.get(node.name)
        if atb_name is None:
            if torch_nodes[node.name]:
                unmatched.append(Unmatched("node", torch_side_name, token, node.name))
            continue
        atb_node = atb_side.tree.nodes[atb_name]
        tensors, alone, skipped = _pair_files(
            token, node, torch_nodes[node.name], atb_node, atb_nodes[atb_name], torch_is_golden, mapping
        )
        unmatched += alone
        skipped_inputs += skipped
        if torch_is_golden:
            pairs.append(NodePair(token, node.name, atb_name, node.type, atb_node.type, node.depth, tensors))
        else:
            pairs.append(
                NodePair(token, atb_name, node.name, atb_node.type, node.type, atb_node.depth, tensors)
            )
    paired_atb = set(by_torch.values())
    for name in atb_side.tree.nodes:
        if name in atb_nodes and name not in paired_atb and atb_nodes[name]:
            unmatched.append(Unmatched("node", atb_side_name, token, name))
    if not torch_is_golden:
        order = {n.name: i for i, n in enumerate(atb_side.tree.preorder())}
        pairs.sort(key=lambda p: order[p.golden])
    return StructuralPairs(pairs, unmatched, skipped_inputs)


def match_nodes(
    torch_tree: NodeTree,
    torch_present: set[str],
    atb_tree: NodeTree,
    atb_present: set[str],
    logits_node: str,
    mapping: OpMapping,
) -> list[tuple[str, str]]:
    """(torch module, ATB node) pairs for the nodes present at one token."""
    pinned = [(t, a) for a, t in mapping.nodes.items() if a in atb_present and t in torch_present]
    taken_torch = {t for t, _ in pinned}
    taken_atb = {a for _, a in pinned}
    matches = list(pinned)

    def add(pairs: Iterable[tuple[str, str]]) -> None:
        for t, a in pairs:
            if t not in taken_torch and a not in taken_atb:
                matches.append((t, a))
                taken_torch.add(t)
                taken_atb.add(a)

    all_torch_layers = _torch_layers(torch_tree, torch_present)
    types = _type_matcher(torch_tree, all_torch_layers, mapping)
    atb_top = [
        c
        for c in atb_tree.children(atb_tree.root)
        if c in atb_present or _has_present(atb_tree, c, atb_present)
    ]
    atb_layers = _atb_layers(atb_tree, atb_top)
    for torch_layer, atb_layer in _layer_pairs(all_torch_layers, atb_layers, pinned):
        if not _has_present(torch_tree, torch_layer, torch_present):
            continue
        add([(torch_layer, atb_layer)])
        torch_inside = [n for n in _descendants(torch_tree, torch_layer) if n in torch_present]
        atb_inside = [n for n in _descendants(atb_tree, atb_layer) if n in atb_present]
        add(pair_scope(torch_tree, torch_inside, atb_tree, atb_inside, types))
    # outside the layers
    in_layers = {d for layer in all_torch_layers for d in [layer, *_descendants(torch_tree, layer)]}
    torch_outside = [
        n.name
        for n in torch_tree.preorder()
        if n.name in torch_present and n.name not in in_layers and n.name != torch_tree.root
    ]
    atb_layer_set = set(atb_layers)
    atb_outside = [
        n
        for top in atb_top
        if top not in atb_layer_set
        for n in [top, *_descendants(atb_tree, top)]
        if n in atb_present
    ]
    lm_head = [a for a in atb_outside if "lmhead" in atb_tree.nodes[a].type.lower().replace("_", "")]
    if lm_head and logits_node in torch_present:
        add([(logits_node, lm_head[-1])])
    add(pair_scope(torch_tree, torch_outside, atb_tree, atb_outside, types))
    # msit's policy_output: the last ATB node holds the logits
    if atb_top and logits_node in torch_present:
        add([(logits_node, atb_top[-1])])
    return matches


def _layer_pairs(
    torch_layers: list[str], atb_layers: list[str], pinned: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The k-th torch layer with the k-th ATB layer, when both sides have the same number of them.

    With different numbers, which layer is which cannot be told: none pairs by position, only
    the layers a mapping file pins (and what is inside them, by type).
    """
    if len(torch_layers) == len(atb_layers):
        return list(zip(torch_layers, atb_layers, strict=True))
    torch_set, atb_set = set(torch_layers), set(atb_layers)
    return [(t, a) for t, a in pinned if t in torch_set and a in atb_set]


def _type_matcher(torch_tree: NodeTree, torch_layers: list[str], mapping: OpMapping) -> TypeMatcher:
    """Types matched for this model: its family is what its layer class shares with a class above
    the layers (``Qwen2Moe`` from ``Qwen2MoeDecoderLayer`` and ``Qwen2MoeModel``)."""
    family = ""
    if torch_layers:
        layer = torch_tree.nodes[torch_layers[0]]
        above = layer.parent
        while above is not None:
            shared = family_prefix(torch_tree.nodes[above].type, layer.type)
            family = max(family, shared, key=len)
            above = torch_tree.nodes[above].parent
    return TypeMatcher(mapping, family)


def _torch_layers(tree: NodeTree, present: set[str]) -> list[str]:
    """The children of the first module whose children at this token repeat one type
    (``root.model.layers``); all of them, so that a dump of some layers keeps the model's numbering.
    Where some children have children of their own, only those count: a layer holds operations, and
    msprobe's API records (a ``Tensor.__mul__`` the model calls between its modules) are leaves."""
    for node in tree.preorder():
        kids = [k for k in node.children if _has_present(tree, k, present)]
        kids = [k for k in kids if tree.nodes[k].children] or kids
        if len(kids) < 2:
            continue
        counts = Counter(tree.nodes[k].type for k in kids)
        kind, count = counts.most_common(1)[0]
        # msprobe records no ModuleList: a two-layer model's layers sit beside the embedding, the
        # rotary embedding and the norm, each of its own type
        beside_singles = all(n == 1 for other, n in counts.items() if other != kind)
        if count >= 2 and (count * 2 >= len(kids) or beside_singles):
            return [k for k in node.children if tree.nodes[k].type == kind]
    return []


def _atb_layers(tree: NodeTree, top: list[str]) -> list[str]:
    if len(top) < 2:
        return []
    kind, count = Counter(tree.nodes[n].type for n in top).most_common(1)[0]
    return [n for n in top if tree.nodes[n].type == kind] if count >= 2 else []


def _descendants(tree: NodeTree, name: str) -> list[str]:
    return [n.name for n in tree.preorder(name)][1:]


def _has_present(tree: NodeTree, name: str, present: set[str]) -> bool:
    return any(n.name in present for n in tree.preorder(name))


def _pair_files(
    token: int,
    torch_node: Node,
    torch_refs: list[TensorRef],
    atb_node: Node,
    atb_refs: list[TensorRef],
    torch_is_golden: bool,
    mapping: OpMapping,
) -> _FilePairs:
    torch_out = [r for r in torch_refs if r.role == "output" and r.slot.count("_") < 2]
    atb_out = [r for r in atb_refs if r.role == "output"]
    pairs: list[tuple[TensorRef, TensorRef]] = []
    pinned = [
        (slot, torch_slot)
        for (atb_type, slot), (torch_types, torch_slot) in mapping.tensors.items()
        if atb_type == atb_node.type and any(t in torch_node.type for t in torch_types)
    ]
    if pinned:
        torch_by_slot = {r.slot: r for r in torch_refs}
        atb_by_slot = {r.slot: r for r in atb_refs}
        pairs += [
            (torch_by_slot[t], atb_by_slot[a]) for a, t in pinned if t in torch_by_slot and a in atb_by_slot
        ]
    else:
        pairs += list(zip(torch_out, atb_out, strict=False))  # extras are reported below
        torch_in = [r for r in torch_refs if r.slot == "input_0"]
        atb_in = [r for r in atb_refs if r.slot == "intensor0"] or [
            r for r in atb_refs if r.slot == "intensor0.after"
        ]
        pairs += list(zip(torch_in, atb_in, strict=False))
    used_torch = {t.slot for t, _ in pairs}
    used_atb = {a.slot for _, a in pairs}
    unmatched: list[Unmatched] = []
    skipped_inputs: list[str] = []
    torch_side, atb_side = ("golden", "test") if torch_is_golden else ("test", "golden")
    # An ATB node dumped without inputs (msit dump -stp 1, or a child op) has nothing to pair the
    # torch inputs with; that is a dump setting, counted once in the notes rather than per file.
    atb_has_inputs = any(r.role == "input" for r in atb_refs)
    for ref in torch_refs:
        if ref.slot in used_torch or ref.slot.count("_") >= 2:
            continue
        if ref.role == "input" and not atb_has_inputs:
            skipped_inputs.append(f"{torch_node.name}/{ref.slot}")
            continue
        unmatched.append(Unmatched("tensor", torch_side, token, f"{torch_node.name}/{ref.slot}"))
    for ref in atb_refs:
        if ref.slot not in used_atb:
            unmatched.append(Unmatched("tensor", atb_side, token, f"{atb_node.name}/{ref.slot}"))
    ordered = sorted(pairs, key=lambda p: (p[0].role != "input", p[0].slot))
    result = []
    for torch_ref, atb_ref in ordered:
        golden, test = (torch_ref, atb_ref) if torch_is_golden else (atb_ref, torch_ref)
        golden_node, test_node = (
            (torch_node.name, atb_node.name) if torch_is_golden else (atb_node.name, torch_node.name)
        )
        # the golden file's slot names the pair; roles follow the golden side
        result.append(TensorPair(token, golden_node, test_node, golden, test))
    return _FilePairs(tuple(result), unmatched, skipped_inputs)


def structural_notes(
    golden: DumpIndex, test: DumpIndex, torch_is_golden: bool, unmatched: list[Unmatched]
) -> list[str]:
    """Why modules stayed unmatched (a model family the operator map does not know, operations that
    cannot be told apart, layers that differ), and how a mapping file can name them."""
    torch_side, atb_side = (golden, test) if torch_is_golden else (test, golden)
    torch_name, atb_name = ("golden", "test") if torch_is_golden else ("test", "golden")
    torch_tree, atb_tree = torch_side.tree, atb_side.tree
    notes = []
    layer_counts = set()
    for token in [t for t in atb_side.tokens if t in torch_side.tokens]:
        torch_layers = _torch_layers(torch_tree, set(torch_side.tokens[token]))
        present = set(atb_side.tokens[token])
        top = [c for c in atb_tree.children(atb_tree.root) if _has_present(atb_tree, c, present)]
        atb_layers = _atb_layers(atb_tree, top)
        if torch_layers and atb_layers and len(torch_layers) != len(atb_layers):
            layer_counts.add(
                (
                    len(torch_layers),
                    _types_of(torch_tree, torch_layers),
                    len(atb_layers),
                    _types_of(atb_tree, atb_layers),
                )
            )
    for torch_count, torch_type, atb_count, atb_type in sorted(layer_counts):
        notes.append(
            f"the torch model has {torch_count} layers{torch_type}, the ATB dump {atb_count}{atb_type}: "
            "which is which cannot be told, so no layer is paired by position (a --mapping file's [nodes] "
            "can pin layers; inside pinned layers operations pair by type)"
        )
    lonely = _types_unmatched(torch_tree, unmatched, torch_name)
    spare = _types_unmatched(atb_tree, unmatched, atb_name)
    # Only where both sides have leftovers: modules an ATB graph computes inside other operations
    # (a Llama's rotary embedding) leave nothing a mapping could name.
    if lonely and spare:
        notes.append(
            f"{sum(lonely.values())} torch modules have no ATB counterpart known to stand for them and are "
            f"listed as unmatched ({_counted(lonely)}), as are {sum(spare.values())} ATB operations "
            f"({_counted(spare)}): no ATB type is mapped to those torch types, or the operations that are "
            "differ in number or nesting; if some of these operations compute those modules, a --mapping "
            'file can name them ([types] AtbType = ["TorchType"], [nodes] for single operations)'
        )
    return notes


def _types_unmatched(tree: NodeTree, unmatched: list[Unmatched], side: str) -> Counter[str]:
    """How many nodes of each type one side has without a partner (at any token)."""
    names = {u.name for u in unmatched if u.kind == "node" and u.side == side}
    return Counter(tree.nodes[name].type for name in names if name in tree.nodes)


def _types_of(tree: NodeTree, names: list[str]) -> str:
    kinds = sorted({tree.nodes[n].type for n in names})
    return f" ({', '.join(kinds)})" if kinds else ""


def _counted(counts: Mapping[str, int]) -> str:
    ordered = sorted(counts.items(), key=lambda kind_count: (-kind_count[1], kind_count[0]))
    return ", ".join(f"{count} {kind}" for kind, count in ordered)
