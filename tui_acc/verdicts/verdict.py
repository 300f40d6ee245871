"""The verdict of a token: one typed result that every view reads.

``NodeVerdict`` is one node's: its label (where an error starts, comes in, or is held), the rule that
decided and its numbers, and how its inputs looked to that rule (the In column). ``TokenVerdict`` is
a token's: every node's verdict beside its metric row, the culprit (◆) and the counts. The operator
screen's tree, table, header and detail, the report's text, JSON and CSV, the plots and the hunt
all read a ``TokenVerdict``; none of them picks a culprit or counts failures itself, so they cannot
disagree.

Nothing here imports numpy or polars: the screens read verdicts before those are loaded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, cast

from tui_acc.dumps.model import NodeTree
from tui_acc.rows import NodeRow

Label = Literal["local", "inherited", "contains"]
Rule = Literal["threshold", "weights", "replay", "baseline", "error model"]
# the fields of a node row a verdict sets (the rest are the engine's metrics)
VERDICT_FIELDS = (
    "inputs_effective",
    "inputs_from",
    "input_error",
    "output_error",
    "suspect",
    "label",
    "rule",
    "local_error",
    "expected_error",
    "reason",
    "operator",
)


def shown_failing(label: object, outputs_passed: object) -> bool | None:
    """What a view shows of a node: ✗ (True) where an error starts in it, is held inside it or came
    in and fails it; ✓ (False) where its outputs pass and nothing inside fails; None while not known."""
    if label is not None:
        return True
    return None if outputs_passed is None else not outputs_passed


def row_failing(row: Mapping[str, object] | None) -> bool | None:
    """``shown_failing`` of a judged node row (None: no row yet)."""
    return None if row is None else shown_failing(row.get("label"), row.get("outputs_passed"))


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict at one token.

    ``label``: "local" where the error starts here, "inherited" where the node fails (its output, or
    something inside it) only with error that came in, "contains" for a module holding a local
    operator, None where nothing fails. ``inputs_passed`` is the In column: the inputs as the rule
    that decided saw them, so that In and the label never contradict (an "inherited" node's inputs
    are off by definition, whatever the thresholds say of them).
    """

    node: str
    label: Label | None = None
    rule: Rule | None = None
    local_error: float | None = None  # the error the rule measured
    expected_error: float | None = None  # the most the rule allows (None: a threshold)
    reason: str = ""
    inputs_passed: bool | None = None
    inputs_from: str | None = None  # "files", or the node whose outputs stood for its inputs
    input_error: float | None = None  # the largest relative error its inputs (or what fed it) carry
    output_error: float | None = None  # the largest among its outputs
    outputs_passed: bool | None = None  # its outputs against the thresholds (the engine's)
    # inside a module: the test's own operator (a record the golden lacks) its replay found wrong
    operator: str | None = None

    @property
    def failing(self) -> bool | None:
        """What a view shows (``shown_failing``)."""
        return shown_failing(self.label, self.outputs_passed)

    def fields(self) -> NodeRow:
        """The verdict as a node row's fields (``VERDICT_FIELDS``): what the frames and exports carry."""
        return {
            "inputs_effective": self.inputs_passed,
            "inputs_from": self.inputs_from,
            "input_error": self.input_error,
            "output_error": self.output_error,
            "suspect": self.label == "local",
            "label": self.label,
            "rule": self.rule,
            "local_error": self.local_error,
            "expected_error": self.expected_error,
            "reason": self.reason or None,
            "operator": self.operator,
        }


@dataclass(frozen=True)
class Counts:
    """How many nodes of a token carry each label; ``failing`` is where a failure shows (local or
    inherited: a module that only holds a local operator is counted apart, as "contains")."""

    local: int
    inherited: int
    contains: int
    judged: int
    total: int

    @property
    def failing(self) -> int:
        """Local and inherited nodes together."""
        return self.local + self.inherited


@dataclass(frozen=True)
class TokenVerdict:
    """A token's verdict: each node's, in execution order, with its metric row; the culprit; the counts.

    ``complete`` is False for a verdict made from the rows known so far (what a screen shows while the
    token computes): nodes not judged yet are absent, and modules are not relabelled yet.
    """

    token: int
    tree: NodeTree = field(repr=False)
    nodes: Mapping[str, NodeVerdict]  # in execution order
    metrics: Mapping[str, NodeRow] = field(repr=False)  # the engine's rows, by golden name
    total: int = 0  # the token's nodes, judged or not
    complete: bool = True

    def __iter__(self) -> Iterator[NodeVerdict]:
        return iter(self.nodes.values())

    def get(self, name: str) -> NodeVerdict | None:
        """The verdict of node ``name`` (None: not judged, or no such node)."""
        return self.nodes.get(name)

    def row(self, name: str) -> NodeRow | None:
        """Node ``name``'s metric row with its verdict's fields."""
        verdict, metrics = self.nodes.get(name), self.metrics.get(name)
        if verdict is None or metrics is None:
            return None
        return cast(NodeRow, {**metrics, **verdict.fields()})

    @property
    def rows(self) -> list[NodeRow]:
        """Every judged node's row with its verdict, in execution order (the CSV's table)."""
        return [row for name in self.nodes if (row := self.row(name)) is not None]

    @cached_property
    def culprit(self) -> NodeVerdict | None:
        """◆: the innermost, earliest local node in execution order (a module and an operator inside
        it can both be local, the module because the operator is: the operator is the answer)."""

        def search(name: str) -> NodeVerdict | None:
            for child in self.tree.children(name):
                found = search(child)
                if found is not None:
                    return found
            verdict = self.nodes.get(name)
            return verdict if verdict is not None and verdict.label == "local" else None

        return search(self.tree.root)

    @property
    def culprit_row(self) -> NodeRow | None:
        """The culprit's row with its verdict (None: no node is local)."""
        return self.row(self.culprit.node) if self.culprit is not None else None

    @cached_property
    def counts(self) -> Counts:
        """How many nodes carry each label."""
        labels = [v.label for v in self.nodes.values()]
        return Counts(
            local=labels.count("local"),
            inherited=labels.count("inherited"),
            contains=labels.count("contains"),
            judged=len(labels),
            total=max(self.total, len(labels)),
        )

    def failing(self) -> list[NodeRow]:
        """The rows where a failure shows (local or inherited), in execution order."""
        return [
            row
            for name, verdict in self.nodes.items()
            if verdict.label in ("local", "inherited") and (row := self.row(name)) is not None
        ]

    def mark(self, name: str) -> tuple[bool | None, Label | None]:
        """What the tree shows for any node, a container without rows (the layers' list) included:
        its own verdict where it has one, else its subtree's (``c`` where a local node is inside, ``i``
        where something inside fails, ✓ where everything inside is judged and passes)."""
        own = self.nodes.get(name)
        if own is not None:
            return own.failing, own.label
        inside = [self.nodes[n.name] for n in self.tree.preorder(name) if n.name in self.nodes]
        if any(v.label == "local" for v in inside):
            return True, "contains"
        if any(v.failing for v in inside):
            return True, "inherited"
        return (False if inside else None), None
