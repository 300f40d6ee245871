"""Align two dump indexes: tokens, nodes and tensor files, golden <-> test.

Same-kind dumps (torch and torch, ATB and ATB, msprobe and msprobe) pair by name; torch against
ATB pairs structurally (``structural.py``). Whatever has no partner is listed, never dropped.
"""

from __future__ import annotations

from tui_acc.dumps.model import DumpIndex
from tui_acc.pairing.by_name import pair_token_by_name
from tui_acc.pairing.mapping import MappingError, OpMapping, load_mapping
from tui_acc.pairing.model import NodePair, Pairing, TensorPair, Unmatched
from tui_acc.pairing.structural import pair_token_structurally

__all__ = [
    "MappingError",
    "NodePair",
    "OpMapping",
    "Pairing",
    "TensorPair",
    "Unmatched",
    "load_mapping",
    "pair_dumps",
]

_GRAPH_FORMATS = {"msit-atb", "msprobe-atb"}


def pair_dumps(
    golden: DumpIndex, test: DumpIndex, logits_node: str | None = None, mapping: OpMapping | None = None
) -> Pairing:
    """Pair two dumps: tokens by id, then nodes and files by the strategy their formats call for."""
    mapping = mapping or OpMapping()
    unmatched: list[Unmatched] = []
    golden_tokens, test_tokens = set(golden.tokens), set(test.tokens)
    unmatched += [Unmatched("token", "golden", t, str(t)) for t in sorted(golden_tokens - test_tokens)]
    unmatched += [Unmatched("token", "test", t, str(t)) for t in sorted(test_tokens - golden_tokens)]
    tokens = sorted(golden_tokens & test_tokens)
    structural = (golden.format in _GRAPH_FORMATS) != (test.format in _GRAPH_FORMATS)
    logits = logits_node or _last_module_with_output(golden)
    nodes: dict[int, list[NodePair]] = {}
    skipped_inputs: list[str] = []
    for token in tokens:
        if structural:
            torch_is_golden = golden.format not in _GRAPH_FORMATS
            torch_side, atb_side = (golden, test) if torch_is_golden else (test, golden)
            torch_logits = (
                logits if torch_is_golden else (logits_node or _last_module_with_output(torch_side))
            )
            nodes[token] = pair_token_structurally(
                token, torch_side, atb_side, torch_is_golden, torch_logits, mapping, unmatched, skipped_inputs
            )
        else:
            nodes[token] = pair_token_by_name(token, golden, test, unmatched)
    notes = []
    if skipped_inputs:
        notes.append(
            f"{len(skipped_inputs)} torch input files have no ATB counterpart because those ATB operations "
            "were dumped without inputs; only their outputs are compared"
        )
    if mapping.source:
        notes.append(f"operator mapping: built-in types plus {mapping.source}")
    return Pairing(
        golden=golden,
        test=test,
        tokens=tokens,
        nodes=nodes,
        logits_node=logits,
        unmatched=unmatched,
        notes=notes,
    )


def _last_module_with_output(index: DumpIndex) -> str:
    """The model's last module that wrote an output: its output is the token's logits."""
    has_output = {
        name
        for nodes in index.tokens.values()
        for name, refs in nodes.items()
        if any(r.role == "output" for r in refs)
    }
    last = None
    for node in index.tree.preorder():
        if node.name in has_output:
            last = node.name
    return last or index.tree.leaf_chain_end()
