"""A tensor row's pass or fail: against the thresholds, or against the noise floor with a baseline.

The logits module's outputs (and any enclosing module's, which end in them) are judged as logits,
so the operator view never passes what the token view fails; KL, a logits metric, is computed for
those alone. This is a tensor's own verdict: a node's label (local, inherited) is
``tui_acc.verdicts``'s, above the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tui_acc.metrics.schema import TensorRow
from tui_acc.pairing import Pairing, TensorPair
from tui_acc.tolerances.noise import judged, noise_fields
from tui_acc.tolerances.thresholds import (
    Thresholds,
    logits_passed,
    near_tie,
    precision_class,
    tensor_passed,
)


class PassFail:
    """The thresholds' verdict on each tensor row of a Pairing."""

    def __init__(self, pairing: Pairing, thresholds: Thresholds, noise_floor: bool) -> None:
        """``noise_floor``: a baseline judges each row whose baseline row it has (``--baseline``)."""
        self.pairing = pairing
        self.thresholds = thresholds
        self.noise_floor = noise_floor
        run_dtypes = pairing.golden.float_dtypes | pairing.test.float_dtypes
        self.stats_floor = precision_class(*run_dtypes) if run_dtypes else None
        self._logits_holders = _logits_holders(pairing)

    def judge(self, pair: TensorPair, row: TensorRow, baseline_row: TensorRow | None) -> None:
        """Set the row's verdict: against the noise floor where a baseline row judges it, else
        against the thresholds (for the logits, the logits' own)."""
        against_noise = None
        if self.noise_floor:
            row.update(noise_fields(row, baseline_row))
            against_noise = judged(row, baseline_row, self.thresholds)
        if against_noise is not None:
            row["passed"] = against_noise
        elif self.holds_logits(pair):
            row["passed"] = logits_passed(row, self.thresholds, self.stats_floor, self.computed_in(row))
        else:
            row["passed"] = tensor_passed(row, self.thresholds, self.stats_floor)

    def token_verdict(self, logits: TensorRow) -> tuple[bool, str]:
        """A token's pass and verdict ("pass", "fail", "near-tie", "error") from its logits' row."""
        passed = (
            bool(logits.get("passed"))  # judged against the noise floor, or as logits: see judge
            if self.noise_floor
            else logits_passed(logits, self.thresholds, self.stats_floor, self.computed_in(logits))
        )
        if logits.get("error"):
            return passed, "error"
        if passed and near_tie(logits, self.thresholds):
            return passed, "near-tie"  # the argmax flipped between near-equal candidates
        return passed, "pass" if passed else "fail"

    def wants_kl(self, pair: TensorPair) -> bool:
        """KL is a logits metric: computed for the logits module's outputs and for single files."""
        if self.pairing.golden.format == "tensor":
            return True
        return self.holds_logits(pair)

    def holds_logits(self, pair: TensorPair) -> bool:
        """Whether ``pair`` is an output that ends in the logits (judged as logits): also the output
        of an op that carried them past the logits' op (``Pairing.logits_at``)."""
        if pair.role != "output":
            return False
        held = self.pairing.logits_at.get(pair.token)
        if held is not None and held.holder == pair.golden_node:
            return True
        return self.pairing.golden.stable_name(pair.golden_node) in self._logits_holders

    def computed_in(self, row: Mapping[str, Any]) -> str:
        """The dtype the logits in ``row`` (a tensor's row, or a token's) were computed in where a Cast
        carried them on (``Pairing.logits_at``); "" otherwise."""
        held = self.pairing.logits_at.get(row.get("token"))  # type: ignore[arg-type]
        if held is None or row.get("golden_node", held.holder) != held.holder:
            return ""
        return held.dtype


def _logits_holders(pairing: Pairing) -> set[str]:
    """Stable names of the logits module, the call inside it that made the logits, and every module
    enclosing it (their outputs end in the logits)."""
    tree = pairing.golden.tree
    holder: str | None = pairing.logits_node if pairing.logits_node in tree.nodes else None
    holders: set[str] = set()
    inner = holder
    while inner is not None and tree.children(inner):  # the call inside that made the logits
        inner = tree.children(inner)[-1]  # (msprobe mix: lm_head's F.linear, its last child)
        holders.add(pairing.golden.stable_name(inner))
    while holder is not None:
        holders.add(pairing.golden.stable_name(holder))
        holder = tree.nodes[holder].parent
    return holders
