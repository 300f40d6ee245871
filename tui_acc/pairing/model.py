"""The records pairing produces: tensor pairs grouped by node pairs, and what stayed unpaired
(``Pairing`` in result.py holds them, per token; ``TokenPairs`` is what pairing one token returns)."""

from __future__ import annotations

from dataclasses import dataclass

from tui_acc.dumps.model import TensorRef


@dataclass(frozen=True)
class TensorPair:
    """A golden tensor file and the test file it is compared with."""

    token: int
    golden_node: str
    test_node: str
    golden: TensorRef
    test: TensorRef
    # the "golden" is a tensor of the test dump: an op GE inserted, held against its own input
    # (pairing/ge_inserted.py); it is read under the test's load policy
    golden_from_test: bool = False

    @property
    def slot(self) -> str:
        """The golden tensor's slot (``input_0``, ``output``…), which names the pair."""
        return self.golden.slot

    @property
    def role(self) -> str:
        """``input`` or ``output`` (the golden tensor's)."""
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
    # an op GE inserted, paired with itself (pairing/ge_inserted.py): its golden input is its golden
    # output by construction, no in-place op
    inserted: bool = False

    @property
    def inputs(self) -> tuple[TensorPair, ...]:
        """The input tensor pairs, in slot order."""
        return tuple(t for t in self.tensors if t.role == "input")

    @property
    def outputs(self) -> tuple[TensorPair, ...]:
        """The output tensor pairs, in slot order."""
        return tuple(t for t in self.tensors if t.role == "output")


@dataclass(frozen=True)
class CarriedLogits:
    """A token's logits as ops after the op computing them carried them (GE's Cast of the logits to
    float32, pairing/ge_inserted.py): the golden node whose pair holds them, and each side's nodes
    a dump needs for them (the logits' op and the ops after it)."""

    holder: str
    golden: tuple[str, ...]
    test: tuple[str, ...]
    dtype: str = ""  # what the logits' op wrote (the logits are judged at it, not the Cast's float32)


@dataclass(frozen=True)
class Unmatched:
    """Something present on one side only."""

    kind: str  # "token" | "node" | "tensor"
    side: str  # "golden" | "test"
    token: int | None
    name: str

    def as_dict(self) -> dict[str, object]:
        """The record for ``report --json`` (kind, side, token, name)."""
        return {"kind": self.kind, "side": self.side, "token": self.token, "name": self.name}


@dataclass(frozen=True)
class TokenPairs:
    """What pairing one token found: its node pairs, in golden execution order, and what has no partner."""

    pairs: list[NodePair]
    unmatched: list[Unmatched]
