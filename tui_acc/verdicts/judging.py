"""What judging a comparison's nodes needs besides their rows (``Judging``), and what came into a
token before any of its nodes (``TokenInput``)."""

from __future__ import annotations

from dataclasses import dataclass

from tui_acc.dumps.model import NodeTree
from tui_acc.pairing import NodePair
from tui_acc.replay.sampling import output_focus
from tui_acc.rows import TensorRow
from tui_acc.tolerances.errors import error_of
from tui_acc.tolerances.thresholds import gains_non_finite, is_float
from tui_acc.verdicts.local import LocalChecks
from tui_acc.verdicts.rules import Tensors, by_own_rounding, by_weights


@dataclass(frozen=True)
class Judging:
    """What judging a comparison's nodes needs besides their rows."""

    tree: NodeTree
    checks: LocalChecks | None = None  # None: no replay
    baseline: bool = False  # tensors were judged against a baseline's noise floor
    # False: the thresholds alone (one dump checked on its own, whose "failing" is an anomaly: no
    # error to model)
    models: bool = True
    first_token: int = 0  # a later token is a decode step: its attention reads a cache no dump holds
    # whether a module's dumped inputs are all it takes in: msit leaves keyword arguments out (a
    # Llama attention's position embeddings), so what came in cannot be told from its glue there
    whole_inputs: bool = True
    # the test model's own dtype, the coarsest its tensors have: what its buffers were cast to (a
    # rotary embedding's frequencies), whatever dtype the operators that read them compute in
    model_dtype: str | None = None

    def prefetch(self, node: NodePair, tensors: Tensors) -> None:
        """Replay ``node`` now (on a worker, while others compare tensors) where judging it will: the
        judge then finds the replay made. Skipped where the cheaper rules decide without it."""
        if self.checks is None or not self.models or any(pair.test.parts for pair in node.tensors):
            return
        if not self.checks.has_reference(node):
            return
        outputs = [t for t in tensors if t.get("role") == "output"]
        if not outputs or any(t.get("error") or gains_non_finite(t) or integer_differs(t) for t in outputs):
            return
        errors = [e for t in outputs if (e := error_of(t)) is not None]
        if errors and by_own_rounding(max(errors), outputs) is not None:
            return
        weights = by_weights(tensors, node.test_type or node.golden_type)
        if weights is None or not weights.local:
            self.checks.replay(node, output_focus(tensors))


@dataclass(frozen=True)
class TokenInput:
    """What came into a token before any of its nodes: whether it was the golden's, and why not."""

    passed: bool
    source: str


def diverged(previous: int, golden_top1: object, test_top1: object) -> TokenInput | None:
    """A decode step's input where the step before chose another token: every node of it works on
    another token than the golden's, so nothing in it starts an error (where the token ids are not
    dumped to say so themselves)."""
    if golden_top1 is None or test_top1 is None or golden_top1 == test_top1:
        return None
    return TokenInput(False, f"token {previous} chose {test_top1}, the golden {golden_top1}")


def integer_differs(row: TensorRow) -> bool:
    """An integer tensor (token ids, positions) whose values differ: no rounding explains it."""
    if row.get("stats_only"):
        return False
    floats = is_float(row.get("golden_dtype")) and is_float(row.get("test_dtype"))
    return not floats and row.get("max_abs_err") not in (0, 0.0, None)
