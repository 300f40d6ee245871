"""Replay one node at one token on both sides, and read the two verdicts together."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tui_acc.dumps.model import DumpIndex
from tui_acc.dumps.msprobe_passes import api_of
from tui_acc.numbers import cosine, number
from tui_acc.replay.call import Replayed, ReplayImpossible
from tui_acc.replay.gather import gather
from tui_acc.replay.judge import consistent, tolerance
from tui_acc.replay.registry import PluginError, Registry
from tui_acc.replay.remedy import remedy

if TYPE_CHECKING:
    from tui_acc.session import Comparison

Verdict = Literal["consistent", "disagrees", "impossible"]
METRICS = ("cosine", "max_abs_err", "rel_euclidean", "mean_abs_err", "max_rel_err")


class UnknownNode(ValueError):
    """The node is not a paired golden node at that token."""


@dataclass(frozen=True)
class SideReplay:
    """One side's replay: the verdict, why, and the distance of its dumped output from the replay."""

    side: str
    node: str
    type: str
    verdict: Verdict
    reason: str
    reference: str | None = None  # which reference replayed it ("built-in Functional.linear", a plug-in)
    dtype: str | None = None  # the dumped output's
    tolerance: float | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    remedy: str | None = None  # impossible: what to dump so that it becomes possible (remedy.py)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("side")
        data["notes"] = list(self.notes)
        return data


READINGS = {
    "operator": "the operator itself disagrees with its inputs",
    "inputs": "consistent with its inputs; the difference came in with them",
    "both": "both sides disagree with the replay: the reference may not be what this operator computes "
    "(a parameter not recorded, a fused step)",
    "golden": "the golden disagrees with its own inputs while the test is consistent with its inputs",
    "impossible": "replay impossible",
}


@dataclass(frozen=True)
class Replay:
    """Both sides' replays of one node at one token."""

    token: int
    golden: SideReplay
    test: SideReplay

    @property
    def finding(self) -> str:
        """``operator``, ``inputs``, ``both``, ``golden`` or ``impossible`` (a key of READINGS)."""
        verdicts = (self.golden.verdict, self.test.verdict)
        if "impossible" in verdicts:
            return "impossible"
        return {
            ("consistent", "disagrees"): "operator",
            ("consistent", "consistent"): "inputs",
            ("disagrees", "disagrees"): "both",
            ("disagrees", "consistent"): "golden",
        }[verdicts]

    @property
    def reading(self) -> str:
        """The finding in words, with why a side could not be replayed (JSON, the status line)."""
        return self._read(with_reasons=True)

    @property
    def headline(self) -> str:
        """The reading where each side's reason is said beside it (the dialog, the text form): a
        reason is never said twice; one both sides share stays here, once."""
        return self._read(with_reasons=self.shared_reason)

    def _read(self, with_reasons: bool) -> str:
        finding = self.finding
        if finding != "impossible":
            return READINGS[finding]
        sides = [s for s in (self.golden, self.test) if s.verdict == "impossible"]
        if len(sides) == 2 and sides[0].reason == sides[1].reason:
            return "replay impossible on both sides" + (f": {sides[0].reason}" if with_reasons else "")
        said = " ({})".format("; ".join(f"{s.side}: {s.reason}" for s in sides)) if with_reasons else ""
        others = [s for s in (self.golden, self.test) if s.verdict != "impossible"]
        return f"replay impossible on {' and '.join(s.side for s in sides)}{said}" + "".join(
            f"; the {s.side} is {'consistent with' if s.verdict == 'consistent' else 'far from'} its replay"
            for s in others
        )

    @property
    def shared_reason(self) -> bool:
        """Both sides impossible for the same reason: said once, in the reading."""
        return (
            self.golden.verdict == self.test.verdict == "impossible"
            and self.golden.reason == self.test.reason
        )

    def remedies(self) -> list[tuple[str, str]]:
        """(whose, what to dump) once each: ``both`` where the sides need the same."""
        found = [
            (s.side, s.remedy) for s in (self.golden, self.test) if s.verdict == "impossible" and s.remedy
        ]
        if len(found) == 2 and found[0][1] == found[1][1]:
            return [("both", found[0][1])]
        return found

    def as_dict(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "golden": self.golden.as_dict(),
            "test": self.test.as_dict(),
            "finding": self.finding,
            "reading": self.reading,
        }

    def describe(self) -> list[str]:
        """The replay as text lines (report's text form, the TUI's dialog)."""
        lines = [f"replay of {self.golden.node} at token {self.token}: {self.headline}"]
        for side in (self.golden, self.test):
            name = f" ({side.node})" if side.node != self.golden.node else ""
            reason = "" if self.shared_reason else side.reason  # the reading says it already
            lines.append(f"  {side.side:<6} {side.verdict:<10} {reason}{name}".rstrip())
            if side.metrics:
                lines.append(
                    f"         cosine {cosine(side.metrics.get('cosine'))}"
                    f"  max abs {number(side.metrics.get('max_abs_err'))}"
                    f"  rel eucl {number(side.metrics.get('rel_euclidean'))}"
                    f"  at {side.dtype} (tolerance {number(side.tolerance)}; {side.reference})"
                )
            lines += [f"         note: {note}" for note in side.notes]
        for whose, what in self.remedies():
            lines.append(f"  to replay it{'' if whose == 'both' else f' ({whose})'}: {what}")
        return lines


def replay_node(cmp: Comparison, token: int, golden_node: str, registry: Registry | None = None) -> Replay:
    """Replay ``golden_node`` and its test partner at ``token``. UnknownNode if it is not paired there."""
    pair = next((p for p in cmp.pairing.node_pairs(token) if p.golden == golden_node), None)
    if pair is None:
        raise UnknownNode(f"{golden_node!r} is not a paired node at token {token}")
    registry = registry or Registry()
    return Replay(
        token,
        replay_side(cmp.golden, token, pair.golden, registry, "golden"),
        replay_side(cmp.test, token, pair.test, registry, "test"),
    )


def replay_side(index: DumpIndex, token: int, node: str, registry: Registry, side: str) -> SideReplay:
    """One side's replay of ``node`` at ``token`` (never raises for what the dump lacks: impossible)."""
    found = index.tree.nodes.get(node)
    node_type = found.type if found is not None else "?"

    def impossible(reason: str, reference: str | None = None) -> SideReplay:
        return SideReplay(
            side, node, node_type, "impossible", reason, reference, remedy=remedy(index.format, reason)
        )

    api = api_of(node) if index.format.startswith("msprobe") else None
    entry = registry.find(api, node_type)
    if entry is None:
        return impossible(
            f"type unknown: {api or node_type} (no reference; [replay] in tui-acc.toml adds one)"
        )
    gathered = gather(index, token, node)
    if gathered.statistics_only:
        return impossible("inputs missing: a statistics-only dump holds no tensor data", entry.describe())
    if gathered.output is None:
        return impossible("output not dumped" + _missing(gathered.missing), entry.describe())
    try:
        result = entry.load()(gathered.call)
    except ReplayImpossible as exc:
        return impossible(str(exc) + _missing(gathered.missing), entry.describe())
    except PluginError as exc:
        return impossible(str(exc), entry.describe())
    except Exception as exc:  # a reference (a user's plug-in most likely) that failed: named, not a crash
        origin = entry.describe()
        return impossible(f"{origin} failed: {type(exc).__name__}: {exc}", origin)
    replayed = result if isinstance(result, Replayed) else Replayed(np.asarray(result))
    return _judged(side, node, node_type, gathered.output, replayed, entry.describe())


def _missing(missing: list[str]) -> str:
    return f" (unreadable: {'; '.join(missing)})" if missing else ""


def _judged(
    side: str, node: str, node_type: str, dumped: np.ndarray, replayed: Replayed, reference: str
) -> SideReplay:
    from tui_acc.dumps.dtypes import dtype_name
    from tui_acc.metrics.kernels import compare_tensors

    values = np.asarray(replayed.values)
    notes = list(replayed.notes)
    if values.size != dumped.size:
        reason = f"shape mismatch: the replay is {list(values.shape)}, the dumped output {list(dumped.shape)}"
        return SideReplay(side, node, node_type, "impossible", reason, reference, notes=tuple(notes))
    if values.shape != dumped.shape:
        notes.append(
            f"shapes differ ({list(values.shape)} replayed, {list(dumped.shape)} dumped): compared flat"
        )
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
    # the replay is the reference ("golden" to the kernel): relative errors are relative to it
    row = compare_tensors(values.reshape(dumped.shape), dumped, kl=False)
    dtype = dtype_name(dumped)
    bound = tolerance(dtype, replayed.reduction)
    ok, reason = consistent(row, bound)
    metrics = {key: _finite_or_none(row.get(key)) for key in METRICS}
    return SideReplay(
        side,
        node,
        node_type,
        "consistent" if ok else "disagrees",
        reason,
        reference,
        dtype,
        bound,
        metrics,
        tuple(notes),
    )


def _finite_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
