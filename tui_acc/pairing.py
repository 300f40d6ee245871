"""Align two dump indexes: tokens, nodes and tensor files, golden <-> test.

Torch against torch pairs by token id, module name and file slot (``output`` <-> ``output``).
Whatever has no partner is listed in ``Pairing.unmatched`` rather than dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tui_acc.dumps.model import DumpIndex, TensorRef


@dataclass(frozen=True)
class TensorPair:
    """A golden tensor file and the test file it is compared with."""

    token: int
    golden_node: str
    test_node: str
    golden: TensorRef
    test: TensorRef

    @property
    def slot(self) -> str:
        return self.golden.slot

    @property
    def role(self) -> str:
        return self.golden.role


@dataclass(frozen=True)
class NodePair:
    """A golden node, its test partner, and their paired tensors (inputs, then outputs)."""

    token: int
    golden: str
    test: str
    golden_type: str
    test_type: str
    depth: int
    tensors: tuple[TensorPair, ...]

    @property
    def inputs(self) -> tuple[TensorPair, ...]:
        return tuple(t for t in self.tensors if t.role == "input")

    @property
    def outputs(self) -> tuple[TensorPair, ...]:
        return tuple(t for t in self.tensors if t.role == "output")


@dataclass(frozen=True)
class Unmatched:
    """Something present on one side only."""

    kind: str  # "token" | "node" | "tensor"
    side: str  # "golden" | "test"
    token: int | None
    name: str

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "side": self.side, "token": self.token, "name": self.name}


@dataclass
class Pairing:
    """Everything that could be aligned between two dumps."""

    golden: DumpIndex
    test: DumpIndex
    tokens: list[int]
    nodes: dict[int, list[NodePair]]
    logits_node: str
    unmatched: list[Unmatched] = field(default_factory=list)

    def node_pairs(self, token: int) -> list[NodePair]:
        return self.nodes.get(token, [])

    def logits_pair(self, token: int) -> TensorPair | None:
        """The output tensor holding the token's logits, if both sides dumped it."""
        for node in self.nodes.get(token, []):
            if node.golden == self.logits_node:
                outputs = node.outputs
                return outputs[0] if outputs else None
        return None

    def tensor_pair_count(self) -> int:
        return sum(len(n.tensors) for nodes in self.nodes.values() for n in nodes)


def pair_dumps(golden: DumpIndex, test: DumpIndex, logits_node: str | None = None) -> Pairing:
    """Pair two torch-style dumps by token id and node name."""
    unmatched: list[Unmatched] = []
    golden_tokens, test_tokens = set(golden.tokens), set(test.tokens)
    unmatched += [Unmatched("token", "golden", t, str(t)) for t in sorted(golden_tokens - test_tokens)]
    unmatched += [Unmatched("token", "test", t, str(t)) for t in sorted(test_tokens - golden_tokens)]
    tokens = sorted(golden_tokens & test_tokens)
    order = [node.name for node in golden.tree.preorder()]
    nodes: dict[int, list[NodePair]] = {}
    for token in tokens:
        nodes[token] = _pair_token(token, order, golden, test, unmatched)
    return Pairing(
        golden=golden,
        test=test,
        tokens=tokens,
        nodes=nodes,
        logits_node=logits_node or _last_module_with_output(golden),
        unmatched=unmatched,
    )


def _pair_token(
    token: int, order: list[str], golden: DumpIndex, test: DumpIndex, unmatched: list[Unmatched]
) -> list[NodePair]:
    golden_nodes, test_nodes = golden.tokens[token], test.tokens[token]
    pairs: list[NodePair] = []
    for name in order:
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
        node = golden.tree.nodes[name]
        test_type = test.tree.nodes[name].type if name in test.tree.nodes else node.type
        pairs.append(NodePair(token, name, name, node.type, test_type, node.depth, tuple(tensors)))
    for name in sorted(set(test_nodes) - set(golden_nodes)):
        unmatched.append(Unmatched("node", "test", token, name))
    return pairs


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
