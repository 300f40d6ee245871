"""An operator checked against its own inputs: each side's dumped output against its replay.

The replay (``tui_acc.replay``) recomputes the output from the side's own dumped inputs and weights;
the *local error* is the relative Euclidean distance of the dumped output from it, and a side is
consistent when that is within ``rounding.local_bound`` at the output's dtype (the rounding a
correct operator shows, times the margin). The verdicts use the test side (``local.py``); the ``p``
key and ``report --replay`` show both sides and read them together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from tui_acc.dumps.dtypes import dtype_name
from tui_acc.dumps.model import DumpIndex
from tui_acc.numbers import cosine, number
from tui_acc.pairing import Pairing, TensorPair
from tui_acc.replay.call import NotSampleable, Replayed, ReplayImpossible
from tui_acc.replay.distance import Distance, distance, within_steps
from tui_acc.replay.dumped_call import Gathered, gather
from tui_acc.replay.names import replay_names
from tui_acc.replay.registry import Entry, PluginError, Registry
from tui_acc.replay.remedy import remedy
from tui_acc.replay.sampling import output_focus
from tui_acc.tolerances.rounding import MARGIN, expected_local, local_bound
from tui_acc.verdicts.test_only import test_only_inside

Verdict = Literal["consistent", "disagrees", "impossible"]
METRICS = ("cosine", "max_abs_err", "rel_euclidean", "mean_abs_err", "max_rel_err")


class Compared(Protocol):
    """Two indexed dumps and their pairing (a ``session.Comparison``)."""

    golden: DumpIndex
    test: DumpIndex
    pairing: Pairing


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
    tolerance: float | None = None  # the largest local error rounding explains (rounding.local_bound)
    metrics: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    expected: float | None = None  # the local error a correct operator shows (rounding.expected_local)
    sampled: str | None = None  # "16 of 256 rows" where a sample was replayed
    remedy: str | None = None  # impossible: what to dump so that it becomes possible (remedy.py)
    quantisation: float | None = None  # integer operands: their rounding's relative error (Replayed)
    rank: int | None = None  # a gathered collective: the rank whose output was compared (Replayed)

    @property
    def local_error(self) -> float | None:
        """The dumped output's relative distance from its replay."""
        return self.metrics.get("rel_euclidean")

    def as_dict(self) -> dict[str, Any]:
        """The side as the report's ``replay`` JSON gives it: every field but ``side`` (the key it
        sits under says it), ``notes`` as a list."""
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
    """Both sides' replays of one node at one token; ``inner``: the replays of the records only the
    test has inside it (a port's own operators in a module both sides have)."""

    token: int
    golden: SideReplay
    test: SideReplay
    inner: tuple[SideReplay, ...] = ()

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
        if self.inner:  # the node itself has no replay; the test's own operators inside it do
            return self._inner_reading()
        sides = [s for s in (self.golden, self.test) if s.verdict == "impossible"]
        if len(sides) == 2 and sides[0].reason == sides[1].reason:
            return "replay impossible on both sides" + (f": {sides[0].reason}" if with_reasons else "")
        said = " ({})".format("; ".join(f"{s.side}: {s.reason}" for s in sides)) if with_reasons else ""
        others = [s for s in (self.golden, self.test) if s.verdict != "impossible"]
        return f"replay impossible on {' and '.join(s.side for s in sides)}{said}" + "".join(
            f"; the {s.side} is {'consistent with' if s.verdict == 'consistent' else 'far from'} its replay"
            for s in others
        )

    def _inner_reading(self) -> str:
        wrong = next((s for s in self.inner if s.verdict == "disagrees"), None)
        if wrong is not None:
            return f"inside it, the test's {wrong.node} disagrees with its own inputs: the fault is there"
        if all(s.verdict == "consistent" for s in self.inner):
            return "inside it, the test's own operators are each consistent with their inputs"
        unknown = sum(s.verdict == "impossible" for s in self.inner)
        return f"inside it, the test's own operators agree with their inputs where replayed ({unknown} not)"

    @property
    def shared_reason(self) -> bool:
        """Both sides impossible for the same reason: said once, in the reading (unless the reading
        speaks of the test's own operators inside the node: each side then says its own)."""
        return (
            not self.inner
            and self.golden.verdict == self.test.verdict == "impossible"
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
        """What ``report --replay`` puts in its JSON: the token, each side's ``as_dict``, the
        finding and its reading."""
        return {
            "token": self.token,
            "golden": self.golden.as_dict(),
            "test": self.test.as_dict(),
            "finding": self.finding,
            "reading": self.reading,
            "inner": [{"node": side.node, **side.as_dict()} for side in self.inner],
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
                    + (f"; sampled {side.sampled}" if side.sampled else "")
                )
            lines += [f"         note: {note}" for note in side.notes]
        for whose, what in self.remedies():
            lines.append(f"  to replay it{'' if whose == 'both' else f' ({whose})'}: {what}")
        if self.inner:
            lines.append("  inside it, records only the test has:")
        for side in self.inner:
            error, bound = side.local_error, side.tolerance
            said = side.reason if error is None else f"rel eucl {number(error)} (tolerance {number(bound)})"
            lines.append(f"    {side.node:<48} {side.verdict:<10} {said}".rstrip())
        return lines


def replay_node(
    cmp: Compared,
    token: int,
    golden_node: str,
    registry: Registry | None = None,
    row_of: Callable[[TensorPair], Mapping[str, Any]] | None = None,
) -> Replay:
    """Replay ``golden_node`` and its test partner at ``token``. UnknownNode if it is not paired there.
    ``row_of``: the metrics' row of a tensor pair: a sample holds its ``worst_index`` (``output_focus``)."""
    pair = next((p for p in cmp.pairing.node_pairs(token) if p.golden == golden_node), None)
    if pair is None:
        raise UnknownNode(f"{golden_node!r} is not a paired node at token {token}")
    registry = registry or Registry()
    paired = frozenset(p.test for p in cmp.pairing.node_pairs(token))
    inside = test_only_inside(cmp.test, token, pair.test, paired, registry)
    focus = output_focus([row_of(t) for t in pair.outputs[:1]]) if row_of is not None else None
    return Replay(
        token,
        replay_side(cmp.golden, token, pair.golden, registry, "golden", focus=focus),
        replay_side(cmp.test, token, pair.test, registry, "test", focus=focus),
        tuple(replay_side(cmp.test, token, name, registry, "test") for name in inside),
    )


def replay_side(
    index: DumpIndex,
    token: int,
    node: str,
    registry: Registry,
    side: str,
    sample: bool = True,
    focus: int | None = None,
) -> SideReplay:
    """One side's replay of ``node`` at ``token`` (never raises for what the dump lacks: impossible).
    ``sample``: a large output is replayed on a seeded sample of its rows (``replay/sampling.py``),
    which holds ``focus`` (a flat output index) and its column."""
    found = index.tree.nodes.get(node)
    node_type = found.type if found is not None else "?"

    def impossible(reason: str, reference: str | None = None) -> SideReplay:
        return SideReplay(
            side, node, node_type, "impossible", reason, reference, remedy=remedy(index.format, reason)
        )

    api, asked_type = replay_names(index, node)
    entry = registry.find(api, asked_type)
    if entry is None:
        return impossible(
            f"type unknown: {api or asked_type} (no reference; [replay] in tui-acc.toml adds one)"
        )
    gathered = gather(index, token, node, sample, focus)
    if gathered.statistics_only:
        return impossible("inputs missing: a statistics-only dump holds no tensor data", entry.describe())
    if gathered.output is None and not gathered.call.after:  # an in-place write: read back after it
        return impossible("output not dumped" + _missing(gathered.missing), entry.describe())
    try:
        replayed = _run(entry, gathered)
    except ReplayImpossible as exc:
        return impossible(str(exc) + _missing(gathered.missing), entry.describe())
    except PluginError as exc:
        return impossible(str(exc), entry.describe())
    except Exception as exc:  # a reference (a user's plug-in most likely) that failed: named, not a crash
        origin = entry.describe()
        return impossible(f"{origin} failed: {type(exc).__name__}: {exc}", origin)
    return _judged(side, node, node_type, gathered, replayed, entry.describe())


def _run(entry: Entry, gathered: Gathered) -> Replayed:
    """The reference's result; replayed whole where it cannot compute the sample alone."""
    reference = entry.load()
    try:
        result = reference(gathered.call)
    except NotSampleable:
        gathered.call = gathered.call.whole()
        result = reference(gathered.call)
    return result if isinstance(result, Replayed) else Replayed(np.asarray(result))


def _missing(missing: list[str]) -> str:
    return f" (unreadable: {'; '.join(missing)})" if missing else ""


def _judged(
    side: str, node: str, node_type: str, gathered: Gathered, replayed: Replayed, reference: str
) -> SideReplay:
    dumped = replayed.observed if replayed.observed is not None else gathered.output
    if dumped is None:
        return SideReplay(side, node, node_type, "impossible", "output not dumped", reference)
    if replayed.observed is not None:  # compared element for element: no sample of it
        gathered = Gathered(gathered.call.whole(), dumped, gathered.output_slot)
    notes = list(replayed.notes)
    try:
        values, kept, sampled = _compared_elements(dumped, replayed, gathered)
    except ValueError as exc:
        return SideReplay(side, node, node_type, "impossible", str(exc), reference, notes=tuple(notes))
    if np.asarray(replayed.values).shape not in (dumped.shape, kept.shape) and replayed.rows is None:
        shape = list(np.asarray(replayed.values).shape)
        notes.append(f"shapes differ ({shape} replayed, {list(dumped.shape)} dumped): compared flat")
    found = distance(values, kept)
    dtype = dtype_name(dumped)
    args = (dtype, replayed.reduction, replayed.roundings, replayed.condition)
    bound, expected = local_bound(*args), expected_local(*args)
    if replayed.exact:
        ok, reason = copied_exactly(values, kept)
        bound = expected = 0.0
    elif replayed.unrounded is not None:
        try:
            unrounded, _, _ = _compared_elements(
                dumped, replace(replayed, values=replayed.unrounded), gathered
            )
        except ValueError as exc:
            return SideReplay(side, node, node_type, "impossible", f"unrounded values: {exc}", reference)
        ok, reason, expected = within_steps(unrounded, kept, replayed.step_slack)
        bound = MARGIN * expected
    else:
        ok, reason = consistent(found, bound)
    metrics = {key: _finite_or_none(found.get(key)) for key in METRICS}
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
        expected,
        sampled,
        quantisation=replayed.quantisation or None,
        rank=replayed.rank,
    )


def _compared_elements(
    dumped: np.ndarray, replayed: Replayed, gathered: Gathered
) -> tuple[np.ndarray, np.ndarray, str | None]:
    """The replayed values and the dumped elements they stand for, of one shape, and what sample
    they are ("16 of 256 rows, 512 of 11008 columns"), None when every element is compared."""
    values = np.asarray(replayed.values)
    width = dumped.shape[-1] if dumped.ndim else 1
    table = dumped.reshape(-1, width)
    rows, columns = replayed.rows, replayed.columns
    sample = gathered.call.sample
    if rows is None and sample is not None and values.size == dumped.size:
        rows = sample.rows  # computed whole: the same sample of it is compared
        values = values.reshape(table.shape)[rows]
    if rows is None and columns is None:
        if values.size != dumped.size:
            raise ValueError(
                f"shape mismatch: the replay is {list(values.shape)}, the dumped output {list(dumped.shape)}"
            )
        return values.reshape(dumped.shape), dumped, None
    kept = table if rows is None else table[rows]
    if columns is not None:
        kept = kept[:, columns]
    if values.size != kept.size:
        raise ValueError(f"shape mismatch: the replay is {list(values.shape)}, the sample {list(kept.shape)}")
    said = [f"{len(rows)} of {table.shape[0]} rows"] if rows is not None else []
    said += [f"{len(columns)} of {width} columns"] if columns is not None else []
    return values.reshape(kept.shape), kept, ", ".join(said)


def copied_exactly(values: np.ndarray, dumped: np.ndarray) -> tuple[bool, str]:
    """A copy's output against its sources: equal element for element (NaN where NaN)."""
    want = np.asarray(values, dtype=np.float64).reshape(-1)
    got = np.asarray(dumped, dtype=np.float64).reshape(-1)
    differ = int(np.count_nonzero((want != got) & ~(np.isnan(want) & np.isnan(got))))
    if differ:
        return False, f"{differ} of {want.size} elements are not the values it copies"
    return True, f"all {want.size} elements are the values it copies"


def consistent(found: Distance, bound: float) -> tuple[bool, str]:
    """Whether the dumped output is within ``bound`` of its replay, and a sentence saying why."""
    if found["dumped_nan"] != found["replay_nan"] or found["dumped_inf"] != found["replay_inf"]:
        return False, (
            f"non-finite values differ: dumped {found['dumped_nan']} NaN, {found['dumped_inf']} inf; "
            f"replay {found['replay_nan']} NaN, {found['replay_inf']} inf"
        )
    rel = found["rel_euclidean"]
    if rel is None or math.isnan(rel):
        return False, "no distance could be computed"
    if rel <= bound:
        return True, f"rel euclid {number(rel)} <= tolerance {number(bound)}"
    return False, f"rel euclid {number(rel)} > tolerance {number(bound)}"


def _finite_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
