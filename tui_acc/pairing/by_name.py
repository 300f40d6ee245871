"""Pairing by name: torch against torch, msprobe against msprobe, ATB against ATB.

msprobe numbers every call across the run (``Functional.linear.43.forward``), so one extra call on
one side (a cast the test model makes, a ``generate()`` step) shifts every later counter of that
API. Where a token's names differ between the sides, its records are aligned by what they are
(the API, or the module without its call index) in execution order, as msprobe compare's fuzzy
match does; what the alignment cannot place stays unmatched.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from tui_acc.dumps.model import DumpIndex, logical_name
from tui_acc.dumps.msprobe.passes import api_of
from tui_acc.pairing.model import NodePair, TensorPair, TokenPairs, Unmatched


def pair_token_by_name(token: int, golden: DumpIndex, test: DumpIndex) -> TokenPairs:
    """Nodes with the same name (or, where names differ, aligned by kind and order), files with the
    same slot; in golden execution order."""
    golden_nodes, test_nodes = golden.tokens[token], test.tokens[token]
    golden_order = [node.name for node in golden.tree.preorder() if node.name in golden_nodes]
    if golden_nodes.keys() == test_nodes.keys():
        partner = {name: name for name in golden_order}
    elif golden.format == test.format == "msprobe" and golden.call_tree_doubted != test.call_tree_doubted:
        # one side's call tree lost or damaged (its construct.json missing, or cut where it was
        # wrong): its tree's order is not the other's; both are aligned in dump.json's order
        # instead (each token's records are kept in it: the order calls completed), which no call
        # tree changes
        partner = _align(list(golden_nodes), list(test_nodes))
    else:
        partner = _align(golden_order, [n.name for n in test.tree.preorder() if n.name in test_nodes])
    pairs: list[NodePair] = []
    unmatched: list[Unmatched] = []
    for name in golden_order:
        node = golden.tree.nodes[name]
        test_name = partner.get(name)
        if test_name is None:
            unmatched.append(Unmatched("node", "golden", token, name))
            continue
        test_refs = {ref.slot: ref for ref in test_nodes[test_name]}
        tensors = []
        for ref in golden_nodes[name]:
            other = test_refs.pop(ref.slot, None)
            if other is None:
                unmatched.append(Unmatched("tensor", "golden", token, f"{name}/{ref.slot}"))
            else:
                tensors.append(TensorPair(token, name, test_name, ref, other))
        unmatched += [Unmatched("tensor", "test", token, f"{test_name}/{slot}") for slot in sorted(test_refs)]
        test_type = test.tree.nodes[test_name].type if test_name in test.tree.nodes else node.type
        pairs.append(NodePair(token, name, test_name, node.type, test_type, node.depth, tuple(tensors)))
    paired = set(partner.values())
    for name in sorted(set(test_nodes) - paired):
        unmatched.append(Unmatched("node", "test", token, name))
    return TokenPairs(pairs, unmatched)


def differing_names(token: int, golden: DumpIndex, test: DumpIndex) -> bool:
    """Whether ``token``'s records are named differently on the two sides (and so were aligned)."""
    return golden.tokens[token].keys() != test.tokens[token].keys()


def _kind(name: str) -> str:
    """What a record is, without its counter: ``Functional.linear``, ``Module.model.norm.RMSNorm.forward``."""
    return api_of(name) or logical_name(name)


def _align(golden_order: list[str], test_order: list[str]) -> dict[str, str]:
    """Golden name -> test name: the longest common runs of kinds, in order (difflib)."""
    matcher = SequenceMatcher(
        None, [_kind(n) for n in golden_order], [_kind(n) for n in test_order], autojunk=False
    )
    partner = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            partner[golden_order[block.a + offset]] = test_order[block.b + offset]
    return partner
