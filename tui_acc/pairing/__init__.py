"""Align two dump indexes: tokens, nodes and tensor files, golden <-> test.

Same-kind dumps (torch and torch, ATB and ATB, msprobe and msprobe) pair by name; torch against
ATB pairs structurally (``structural.py``); a TorchAir GE dump by its graph text (``torchair.py``).
Whatever has no partner is listed, never dropped.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from tui_acc.dumps.model import ATB_FORMATS, TORCHAIR_FORMATS, DumpError, DumpIndex, Node, NodeTree
from tui_acc.lazy import LazyMapping
from tui_acc.pairing.by_name import differing_names, pair_token_by_name
from tui_acc.pairing.mapping import MappingError, OpMapping, load_mapping
from tui_acc.pairing.model import NodePair, TensorPair, Unmatched
from tui_acc.pairing.msprobe_mapping import MsprobeMapping, bind, load_msprobe_mapping
from tui_acc.pairing.result import Pairing
from tui_acc.pairing.structural import pair_token_structurally, structural_notes
from tui_acc.pairing.torchair import pair_torchair

__all__ = [
    "MappingError",
    "MsprobeMapping",
    "NodePair",
    "OpMapping",
    "Pairing",
    "TensorPair",
    "Unmatched",
    "load_mapping",
    "load_msprobe_mapping",
    "pair_dumps",
]


def pair_dumps(
    golden: DumpIndex,
    test: DumpIndex,
    logits_node: str | None = None,
    mapping: OpMapping | None = None,
    names: MsprobeMapping | None = None,
) -> Pairing:
    """Pair two dumps: tokens by id, then nodes and files by the strategy their formats call for.

    ``names`` (msprobe's -dm/-lm files) renames the test side of two msprobe dumps for pairing.
    Neither index is changed: where pairing settles on another order for the golden (an ATB test's
    execution order), the pairing's ``golden`` is a new index holding it, which its users read.
    """
    if test.format == "torchair-ge" and golden.format in TORCHAIR_FORMATS:
        return pair_torchair(golden, test, logits_node)  # by the graph text TorchAir wrote
    if golden.format == "torchair-ge" and test.format == "torchair-fx":
        raise DumpError(
            f"{golden.root} is a GE dump and {test.root} an FX dump: the FX dump is the golden "
            "(tui-acc FX_DUMP GE_DUMP)"
        )
    mapping = mapping or OpMapping()
    translation = bind(names, golden, test)
    unmatched: list[Unmatched] = []
    golden_tokens, test_tokens = set(golden.tokens), set(test.tokens)
    unmatched += [Unmatched("token", "golden", t, str(t)) for t in sorted(golden_tokens - test_tokens)]
    unmatched += [Unmatched("token", "test", t, str(t)) for t in sorted(test_tokens - golden_tokens)]
    tokens = sorted(golden_tokens & test_tokens)
    structural = (golden.format in ATB_FORMATS) != (test.format in ATB_FORMATS)
    logits = logits_node or golden.logits_hint or _last_module_with_output(golden)
    if not structural and golden.format != "tensor":
        # by name, token by token when asked: the first screen never waits for every token
        lock = threading.Lock()
        notes = [f"operator mapping: built-in types plus {mapping.source}"] if mapping.source else []
        reordered = _msprobe_order_borrowed(golden, test)
        if reordered is not None:
            golden = reordered
            notes.append(
                "golden execution order taken from the test's dump.json (the golden's records were "
                "reordered after the run)"
            )
        nested = _msprobe_calls_nested_as_the_test(golden, test)
        if nested is not None:
            golden = nested
            notes.append(
                "golden calls nested as the test's construct.json nests the calls of the same names "
                "(the golden's own was lost or not trusted)"
            )
        notes += translation.notes if translation is not None else []
        aligned: list[int] = []

        def build(token: int) -> list[NodePair]:
            if translation is not None:
                found = translation.pair(token, pair_token_by_name)
            else:
                found = pair_token_by_name(token, golden, test)
            with lock:
                unmatched.extend(found.unmatched)
                renamed = translation.view if translation is not None else test
                if differing_names(token, golden, renamed) and not aligned:
                    aligned.append(token)
                    notes.append(
                        f"token {token} (and maybe others): names differ between the sides (call counters "
                        "shifted), so records were paired by kind and order, as msprobe compare's fuzzy match"
                    )
            return found.pairs

        return Pairing(
            golden=golden,
            test=test,
            tokens=tokens,
            nodes=LazyMapping(tokens, build),
            logits_node=logits,
            unmatched_found=unmatched,
            notes=notes,
        )
    nodes: dict[int, list[NodePair]] = {}
    skipped_inputs: list[str] = []
    for token in tokens:
        if golden.format == test.format == "tensor":
            nodes[token] = _pair_single_files(token, golden, test)
        elif structural:
            torch_is_golden = golden.format not in ATB_FORMATS
            torch_side, atb_side = (golden, test) if torch_is_golden else (test, golden)
            torch_logits = (
                logits if torch_is_golden else (logits_node or _last_module_with_output(torch_side))
            )
            found = pair_token_structurally(
                token, torch_side, atb_side, torch_is_golden, torch_logits, mapping
            )
            nodes[token] = found.pairs
            unmatched += found.unmatched
            skipped_inputs += found.skipped_inputs
    notes = []
    # ATB folder ids are the whole execution order: better than msit's model_tree.json order, alone or
    # filling what data flow left open ("data flow and model_tree.json")
    untrusted_order = golden.format == "msit-torch" and not golden.order_is_execution
    borrowed = _borrowed_execution_order(golden, test, nodes) if structural and untrusted_order else None
    if borrowed is not None:
        golden, nodes = borrowed
        notes.append(
            "golden execution order taken from the ATB folder ids (msit's model_tree.json order is not it)"
        )
    if skipped_inputs:
        notes.append(
            f"{len(skipped_inputs)} torch input files have no ATB counterpart because those ATB operations "
            "were dumped without inputs; only their outputs are compared"
        )
    if structural:  # what it could not pair, and why
        notes += structural_notes(golden, test, golden.format not in ATB_FORMATS, unmatched)
    if mapping.source:
        notes.append(f"operator mapping: built-in types plus {mapping.source}")
    return Pairing(
        golden=golden,
        test=test,
        tokens=tokens,
        nodes=nodes,
        logits_node=logits,
        unmatched_found=unmatched,
        notes=notes,
    )


def _borrowed_execution_order(
    golden: DumpIndex, test: DumpIndex, nodes: dict[int, list[NodePair]]
) -> tuple[DumpIndex, dict[int, list[NodePair]]] | None:
    """The golden with its tree's siblings sorted by the ATB order of what they were paired with, and
    the node pairs in that order (None: nothing was paired with an ATB node).

    ATB folder ids are execution order; msit's model_tree.json is not. ``golden`` itself is left as
    it is.
    """
    atb_order = {n.name: i for i, n in enumerate(test.tree.preorder())}
    partner_order: dict[str, int] = {}
    for pairs in nodes.values():
        for pair in pairs:
            if pair.test in atb_order:
                partner_order.setdefault(pair.golden, atb_order[pair.test])
    if not partner_order:
        return None
    tree = _sorted_like(golden.tree, partner_order)
    order = {n.name: i for i, n in enumerate(tree.preorder())}
    in_order = {token: sorted(pairs, key=lambda p: order[p.golden]) for token, pairs in nodes.items()}
    return replace(
        golden, tree=tree, order_source="borrowed from the ATB dump", order_is_execution=True
    ), in_order


def _msprobe_order_borrowed(golden: DumpIndex, test: DumpIndex) -> DumpIndex | None:
    """An msprobe golden whose dump.json records were reordered (``record_order.py``) against a test
    whose records are as msprobe wrote them: the golden's tree with its siblings in the order the
    test's records of the same names ran (None where the orders are not so, or no name is shared)."""
    if not (golden.format == test.format == "msprobe") or golden.order_is_execution:
        return None
    if not test.order_is_execution:
        return None
    test_order = {n.name: i for i, n in enumerate(test.tree.preorder())}
    shared = {name: test_order[name] for name in golden.tree.nodes if name in test_order}
    if not shared:
        return None
    tree = _sorted_like(golden.tree, shared)
    return replace(
        golden, tree=tree, order_source="borrowed from the test's dump.json", order_is_execution=True
    )


def _msprobe_calls_nested_as_the_test(golden: DumpIndex, test: DumpIndex) -> DumpIndex | None:
    """An msprobe golden whose call tree was lost (construct.json missing, unreadable, or distrusted
    for a cycle: its calls flat) against a test whose call tree is intact, both having recorded the
    same calls: the golden with the test's tree, any call of its own the test lacks at the top level
    after them (None where that is not so). A call's name
    says its module and its count: where the calls are the same, they nest alike. A flat golden
    judged each module as an operator of its own (its inputs pass, its output fails: "local"),
    beside the operator inside it that made the error."""
    if not (golden.format == test.format == "msprobe") or not golden.call_tree_lost or test.call_tree_doubted:
        return None
    if not any(test.tree.children(name) for name in test.tree.children(test.tree.root)):
        return None  # the test's calls are flat too
    # API counters are global: one call more on a side gives every later call of that API another's
    # name and place, so both sides must have recorded the same calls (a flat side splits its
    # passes by other rules: which token holds a call may differ, the calls may not)
    if not (isinstance(golden.tokens, dict) and isinstance(test.tokens, dict)):
        return None
    if _recorded(golden) != _recorded(test):
        return None
    tree = test.tree.copy()
    for node in golden.tree.preorder():
        if node.name not in tree.nodes:
            tree.nodes[node.name] = Node(node.name, node.type, tree.root, 1)
            tree.nodes[tree.root].children.append(node.name)
    return replace(golden, tree=tree)


def _recorded(index: DumpIndex) -> set[str]:
    """Every call an msprobe index holds a record of: its tokens' and those between them."""
    return {name for nodes in index.tokens.values() for name in nodes} | set(index.between_tokens)


def _sorted_like(tree: NodeTree, partner_order: dict[str, int]) -> NodeTree:
    """A copy of ``tree`` with each node's children sorted by the earliest place ``partner_order``
    gives them or anything inside them; a child with none keeps its place right after the sibling it
    followed."""
    earliest: dict[str, float] = {}
    for node in reversed(list(tree.preorder())):
        keys = [earliest[c] for c in node.children if c in earliest]
        if node.name in partner_order:
            keys.append(partner_order[node.name])
        if keys:
            earliest[node.name] = min(keys)
    sorted_tree = tree.copy()
    for node in sorted_tree.nodes.values():
        keyed, previous = [], -1.0
        for child in node.children:
            previous = earliest.get(child, previous + 1e-6)
            keyed.append((previous, child))
        node.children = [child for _, child in sorted(keyed, key=lambda k: k[0])]
    return sorted_tree


def _pair_single_files(token: int, golden: DumpIndex, test: DumpIndex) -> list[NodePair]:
    """Two tensor files: whatever their names, they are the pair."""
    (g_name, g_refs), (t_name, t_refs) = (
        next(iter(golden.tokens[token].items())),
        next(iter(test.tokens[token].items())),
    )
    pair = TensorPair(token, g_name, t_name, g_refs[0], t_refs[0])
    g_type, t_type = golden.tree.nodes[g_name].type, test.tree.nodes[t_name].type
    return [NodePair(token, g_name, t_name, g_type, t_type, 0, (pair,))]


def _last_module_with_output(index: DumpIndex) -> str:
    """The model's last module that wrote an output: its output is the token's logits.

    The first token with files decides (every token runs the same modules), so that no other
    token has to be listed for it.
    """
    first = next((index.tokens[t] for t in index.tokens if any(index.tokens[t].values())), {})
    has_output = {name for name, refs in first.items() if any(r.role == "output" for r in refs)}
    last = None
    for node in index.tree.preorder():
        if node.name in has_output:
            last = node.name
    return last or index.tree.leaf_chain_end()
