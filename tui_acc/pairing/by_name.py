"""Pairing by identical names: torch against torch, msprobe against msprobe, ATB against ATB."""

from __future__ import annotations

from tui_acc.dumps.model import DumpIndex
from tui_acc.pairing.model import NodePair, TensorPair, Unmatched


def pair_token_by_name(
    token: int, golden: DumpIndex, test: DumpIndex, unmatched: list[Unmatched]
) -> list[NodePair]:
    """Nodes with the same name, files with the same slot; in golden execution order."""
    golden_nodes, test_nodes = golden.tokens[token], test.tokens[token]
    pairs: list[NodePair] = []
    for node in golden.tree.preorder():
        name = node.name
        if name not in golden_nodes:
            continue
        if name not in test_nodes:
            unmatched.append(Unmatched("node", "golden", token, name))
            continue
        test_refs = {ref.slot: ref for ref in test_nodes[name]}
        tensors = []
        for ref in golden_nodes[name]:
            partner = test_refs.pop(ref.slot, None)
            if partner is None:
                unmatched.append(Unmatched("tensor", "golden", token, f"{name}/{ref.slot}"))
            else:
                tensors.append(TensorPair(token, name, name, ref, partner))
        unmatched += [Unmatched("tensor", "test", token, f"{name}/{slot}") for slot in sorted(test_refs)]
        test_type = test.tree.nodes[name].type if name in test.tree.nodes else node.type
        pairs.append(NodePair(token, name, name, node.type, test_type, node.depth, tuple(tensors)))
    for name in sorted(set(test_nodes) - set(golden_nodes)):
        unmatched.append(Unmatched("node", "test", token, name))
    return pairs
