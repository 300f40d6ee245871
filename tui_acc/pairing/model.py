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

    @property
    def inputs(self) -> tuple[TensorPair, ...]:
        """The input tensor pairs, in slot order."""
        return tuple(t for t in self.tensors if t.role == "input")

    @property
    def outputs(self) -> tuple[TensorPair, ...]:
        """The output tensor pairs, in slot order."""
        return tuple(t for t in self.tensors if t.role == "output")


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
