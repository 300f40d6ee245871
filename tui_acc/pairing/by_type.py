"""Torch modules against ATB operations by type, inside one scope (a layer pair, or the rest).

A pair is made only where it can be justified:

* **Types.** An ATB type the operator map names (built in, or a ``--mapping`` file) stands for
  the torch types it lists, matched as substrings as msit does. An ATB type the map does not
  name stands only for the torch type of the same name, bare or behind the model's family prefix
  (``Attention`` for ``Attention`` or ``Qwen2MoeAttention``): a looser match took ``MoeMlp``, the
  routed experts' graph, for ``Qwen2MoeMLP``, the shared expert.
* **Counts.** Operations of a type pair with their modules in order only when both sides hold
  the same number of them; otherwise none of them pairs.
* **Nesting.** Where a graph operation pairs with a module (``Attention`` with ``self_attn``),
  what is inside each pairs only with what is inside the other, so that an MoE router's linear
  cannot take the place of the shared expert's ``gate_proj`` just because the counts agree
  across the layer. Two such pairs that nest differently on the two sides (the shared expert
  inside the torch MoE block but beside the ATB ``SparseMoe``) cannot both hold: the outer one,
  whose outputs then differ, is dropped.

Whatever is not justified stays unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from tui_acc.dumps.model import NodeTree
from tui_acc.pairing.mapping import OpMapping


class TypeMatcher:
    """Which torch module types an ATB operation type stands for, for one torch model."""

    def __init__(self, mapping: OpMapping, family: str) -> None:
        self.mapping = mapping
        self.family = family.lower()

    def named(self, atb_type: str) -> bool:
        """Whether the operator map names ``atb_type`` (as ``OpMapping.torch_types_for`` looks it up)."""
        candidates = (atb_type, atb_type.replace("Quant", ""), re.sub(r"W\d+A\d+", "", atb_type))
        return any(c in self.mapping.types for c in candidates)

    def matches(self, atb_type: str, torch_type: str) -> bool:
        """Whether ``atb_type`` stands for ``torch_type``: by the operator map where it names the type,
        else by the bare name (``XOperation`` -> ``X``, or the family's ``{family}X``), case-insensitive."""
        if self.named(atb_type):
            return self.mapping.matches(atb_type, torch_type)
        (name,) = self.mapping.torch_types_for(atb_type)  # the bare name: ``XOperation`` -> ``X``
        wanted = torch_type.lower()
        return wanted == name.lower() or (bool(self.family) and wanted == self.family + name.lower())


def family_prefix(model_type: str, layer_type: str) -> str:
    """The words two of a model's classes start with: ``Qwen2Moe`` for ``Qwen2MoeModel`` and
    ``Qwen2MoeDecoderLayer``, ``GPT2`` for ``GPT2Model`` and ``GPT2Block``, nothing for
    ``DummyModel`` and ``DecoderLayer``."""
    length = 0
    for a, b in zip(model_type, layer_type, strict=False):
        if a != b:
            break
        length += 1

    def word_ends(name: str, at: int) -> bool:
        return at == len(name) or name[at].isupper()

    while length and not (word_ends(model_type, length) and word_ends(layer_type, length)):
        length -= 1
    return model_type[:length]


def pair_scope(
    torch_tree: NodeTree, torch_names: list[str], atb_tree: NodeTree, atb_names: list[str], types: TypeMatcher
) -> list[tuple[str, str]]:
    """(torch, ATB) pairs among the given nodes (each list in execution order)."""
    flat = _by_type(torch_tree, torch_names, atb_tree, atb_names, types)
    torch_set, atb_set = set(torch_names), set(atb_names)
    composites = [
        (t, a)
        for t, a in flat
        if any(n in torch_set for n in _descendants(torch_tree, t))
        or any(n in atb_set for n in _descendants(atb_tree, a))
    ]
    clashing = _nested_apart(torch_tree, atb_tree, composites)
    if clashing:  # they stay unmatched; what is inside them may still pair
        torch_left = [n for n in torch_names if n not in {t for t, _ in clashing}]
        atb_left = [n for n in atb_names if n not in {a for _, a in clashing}]
        return pair_scope(torch_tree, torch_left, atb_tree, atb_left, types)
    if not composites:
        return flat
    top = [
        (t, a) for t, a in composites if not any(torch_tree.is_ancestor(other, t) for other, _ in composites)
    ]
    pairs: list[tuple[str, str]] = []
    inside_torch: set[str] = set()
    inside_atb: set[str] = set()
    for t, a in top:
        torch_inner = [n for n in torch_names if torch_tree.is_ancestor(t, n)]
        atb_inner = [n for n in atb_names if atb_tree.is_ancestor(a, n)]
        pairs.append((t, a))
        pairs += pair_scope(torch_tree, torch_inner, atb_tree, atb_inner, types)
        inside_torch |= {t, *torch_inner}
        inside_atb |= {a, *atb_inner}
    rest_torch = [n for n in torch_names if n not in inside_torch]
    rest_atb = [n for n in atb_names if n not in inside_atb]
    return pairs + pair_scope(torch_tree, rest_torch, atb_tree, rest_atb, types)


def _nested_apart(
    torch_tree: NodeTree, atb_tree: NodeTree, composites: list[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The pairs that hold another pair's node on one side only: they compute more, or less, than
    their partners (a torch MoE block holding the shared expert, an ATB ``SparseMoe`` beside it)."""
    clashing = set()
    for i, (t1, a1) in enumerate(composites):
        for t2, a2 in composites[i + 1 :]:
            if torch_tree.is_ancestor(t1, t2) != atb_tree.is_ancestor(a1, a2):
                clashing.add((t1, a1))
            if torch_tree.is_ancestor(t2, t1) != atb_tree.is_ancestor(a2, a1):
                clashing.add((t2, a2))
    return clashing


def _by_type(
    torch_tree: NodeTree, torch_names: list[str], atb_tree: NodeTree, atb_names: list[str], types: TypeMatcher
) -> list[tuple[str, str]]:
    """Zip ATB ops with the torch modules their types stand for, in order, when counts agree.

    ATB types that stand for the same torch modules (``RmsNormOperation`` and a custom norm both
    meaning ``RMSNorm``) form one group, so that together they pair with those modules in order;
    a group whose order would put an operation beside a module its type does not stand for is
    left unpaired.
    """
    candidates: dict[str, list[str]] = {}  # normalised ATB type -> torch candidates
    for name in atb_names:
        atb_type = _normalised(atb_tree.nodes[name].type)
        if atb_type not in candidates:
            matching = [n for n in torch_names if types.matches(atb_type, torch_tree.nodes[n].type)]
            candidates[atb_type] = _outermost(torch_tree, matching)
    pairs = []
    for group in _overlapping(candidates):
        # an operation inside another of the group (WordEmbedding's GatherOperation, LmHead's
        # LinearOperation) pairs inside its graph's partner, not beside it
        atb_group = _outermost(
            atb_tree, [n for n in atb_names if _normalised(atb_tree.nodes[n].type) in group]
        )
        torch_group = [n for n in torch_names if any(n in candidates[t] for t in group)]
        if len(torch_group) != len(atb_group) and len(group) == 1:
            # a mapped name that several modules hold (a user's "Norm"): try the exact type names alone
            (atb_type,) = group
            exact = {t.lower() for t in types.mapping.torch_types_for(atb_type)}
            torch_group = [n for n in torch_group if torch_tree.nodes[n].type.lower() in exact]
        if len(torch_group) != len(atb_group):
            continue
        zipped = list(zip(torch_group, atb_group, strict=True))
        if all(_stands_for(types, atb_tree.nodes[a].type, torch_tree.nodes[t].type) for t, a in zipped):
            pairs += zipped
    return pairs


def _stands_for(types: TypeMatcher, atb_type: str, torch_type: str) -> bool:
    return types.matches(_normalised(atb_type), torch_type)


def _overlapping(candidates: dict[str, list[str]]) -> list[set[str]]:
    """Group ATB types whose torch candidates overlap (connected components)."""
    groups: list[tuple[set[str], set[str]]] = []  # (ATB types, torch names)
    for atb_type, names in candidates.items():
        types, torch_names = {atb_type}, set(names)
        for other in [g for g in groups if g[1] & torch_names]:
            groups.remove(other)
            types |= other[0]
            torch_names |= other[1]
        groups.append((types, torch_names))
    return [types for types, _ in groups]


def _normalised(atb_type: str) -> str:
    """Quantized and parallel variants align with their plain op (msit normalises them too)."""
    return re.sub(r"Quant|W\d+A\d+", "", atb_type)


def _outermost(tree: NodeTree, names: list[str]) -> list[str]:
    """Drop modules nested in another candidate (an MLP type inside an MLP type) to keep one per op."""
    chosen = set(names)
    return [n for n in names if not any(a in chosen for a in _ancestors(tree, n))]


def _ancestors(tree: NodeTree, name: str) -> Iterator[str]:
    """The nodes above ``name``, its parent first: a walk up per candidate, where asking every other
    candidate whether it is one was quadratic (20,000 sibling folders: minutes)."""
    parent = tree.nodes[name].parent
    while parent is not None:
        yield parent
        parent = tree.nodes[parent].parent


def _descendants(tree: NodeTree, name: str) -> Iterable[str]:
    return (n.name for n in tree.preorder(name) if n.name != name)
