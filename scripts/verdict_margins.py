"""The error model's margins, measured: how close each correct operator comes to its bound, and how far
above it each injected fault sits. A measurement, not a test (exit status 0).

For every pair it can find, each unpacked or made in a temporary folder:

- ``families``: tests/data/families, golden against clean (clean) and golden against test (the bug);
- ``sensitivity``: tests/data/sensitivity's sweep, each level's clean run and its faulty runs;
- ``models``: tests/data/models, golden against test (the tokens before the fault's are clean);
- ``reference``: the msit and msprobe reference pairs (no fault), from the full set where it is
  (``$TUI_ACC_REFERENCE``, else ../shared/reference, as the tests find it), else
  tests/data/reference's compact cut;
- ``gpu``: the full set's gpu-msprobe-L0 where present (an H100 port: a clean run, 3 faults and an
  int8 weight);
- ``demo``: ``python -m tui_acc demo --no-tui --baseline``: golden against its baseline (clean) and
  against its test (the fault);

every token is judged as every view judges it (``open_comparison(golden, test,
CompareOptions(cache=False)).verdicts.token(t)``), and every node whose rule measured an error
against a bound (replay, weights, error model, with an ``expected_error``) gives the ratio
``local_error / expected_error``: 1 is where the node would be called local. Each ratio is kept with
the operator's kind (its type, coarsened: linear, norm, act, softmax, rotary, attention, embedding,
lm_head...), the reading behind the rule (replay, pass-through, weights, error model, error model over
a module's inside, glue, own rounding: told apart by the verdict's reason), the output's dtype and
element count. For every operator (a node without children) that another rule decided, the error
model's own reading is taken too ("error model alone": what it would say where no replay is
possible, so that its factors are measured where the replay decides), and its weights' ("weights
alone": how far a correct weight sits from its cast's bound). Tokens of a faulty run before its
first fault are skipped where they are bit for bit a clean run's (families, sensitivity, gpu); in
the models and the demo, which have no clean run, they count as clean.

Printed: per reading and kind, over the clean nodes, the count, median, p99 and max ratio, with the
node that gives the max; each fault's culprit and its ratio (how far above 1 it sits); every correct
node above 0.8 (clean, or beside a fault: close to a false local); every local that is not the
injected fault; and the error model's factors (softmax amplification, cancellation, few elements)
where they were above 1. ``--json FILE`` writes the numbers there too.

    python scripts/verdict_margins.py [--only GROUP ...] [--sample N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from margin_pairs import GROUPS, Pair, pairs  # noqa: E402  (scripts/ is the script's own folder)

from tui_acc import CompareOptions, open_comparison  # noqa: E402
from tui_acc.dumps.model import NodeTree  # noqa: E402
from tui_acc.pairing import NodePair  # noqa: E402
from tui_acc.rows import NodeRow  # noqa: E402
from tui_acc.session import Comparison  # noqa: E402
from tui_acc.verdicts.propagation import GROWTH, linear_map, rotary  # noqa: E402
from tui_acc.verdicts.rules import Facts, Reading, by_error_model, by_weights, data_inputs, type_of  # noqa: E402
from tui_acc.verdicts.verdict import NodeVerdict  # noqa: E402

NEAR = 0.8  # a correct node above this is close to a false local
BOUNDED = ("error model", "replay", "weights")


@dataclass
class Sample:
    """One node's ratio at one token. ``role``: clean, fault (the injected culprit), beside (a
    correct node of a faulty run), contains (a module holding the culprit)."""

    group: str
    pair: str
    token: int
    node: str
    role: str
    kind: str
    type: str | None
    rule: str | None
    reading: str
    label: str | None
    dtype: str | None
    elements: int | None
    local_error: float | None
    expected_error: float | None
    ratio: float | None
    input_error: float | None = None  # what came in, as the rule read it
    growth: float | None = None  # the error model's factor on the incoming error
    condition: float | None = None  # a linear map's cancellation, where above 1


# -- what each node is ------------------------------------------------------------------------------

_TYPED = (  # (kind, pattern on the type), first match wins
    ("embedding", r"embed"),
    ("softmax", r"softmax"),
    ("norm", r"norm"),
    ("attention", r"attention|attn|scaled_dot_product"),
    ("linear", r"^(linear|Conv1D|LinearOperation|addmm)$|_proj$|dense|^fc|c_fc|query_key_value"),
    ("matmul", r"matmul|bmm"),
    ("act", r"silu|gelu|relu|sigmoid|tanh|swiglu|swish|^act"),
    ("dropout", r"dropout"),
    ("square", r"^pow$"),  # a norm's variance: the square GROWTH 2 is for
    ("sin/cos", r"^(sin|cos)$"),  # a rotary embedding's, from its angles
    ("mlp/moe", r"mlp|moe|expert"),
    ("layer", r"layer|block"),
    ("model", r"model|causallm"),
)


def kind_of(node_type: str | None, name: str) -> str:
    """The operator's kind, coarsened from its type (where it has none, its name's last part)."""
    if re.search(r"lm_head|embed_out", name):  # a Linear, but the logits'
        return "lm_head"
    text = node_type or name.split("__")[-1].removesuffix(".output").split(".")[-1]
    if rotary(text) or "rotary" in text:
        return "rotary"
    for kind, pattern in _TYPED:
        if re.search(pattern, text, re.IGNORECASE):
            return kind
    return "elementwise" if text.startswith("__") or text.islower() else text


def reading_of(rule: str | None, reason: str) -> str:
    """Which reading of the rule decided, from its reason (rules.py's words)."""
    if rule == "error model":
        if "within its own rounding" in reason:
            return "own rounding"
        if "this module's own code" in reason:
            return "glue"
        if "every output inside it" in reason:
            return "error model (module)"
        return "error model"
    if rule == "replay" and "pass" in reason and "through" in reason:
        return "pass-through"
    return rule or "-"


def _elements(shape: object) -> int | None:
    text = str(shape or "").strip("[]")
    if not text:
        return None
    numbers = [p.strip() for p in text.split(",")]
    return math.prod(int(p) for p in numbers) if all(p.isdigit() for p in numbers) else None


def _ratio(error: float, bound: float) -> float:
    """Error over bound; an exact operator (bound 0) that is exact is at 0, else at infinity."""
    return error / bound if bound > 0 else (math.inf if error > 0 else 0.0)


def _parsed(reason: str, pattern: str) -> float | None:
    found = re.search(pattern, reason)
    return float(found.group(1)) if found else None


# -- judging ----------------------------------------------------------------------------------------


def _role(pair: Pair, token: int, name: str, culprits: set[str], tree: NodeTree) -> str:
    first = min(pair.faults, default=None)
    if name in culprits:
        return "fault"
    if any(tree.is_ancestor(name, c) for c in culprits):
        return "contains"
    if first is None or (token < first and not pair.skip_before):
        return "clean"
    return "beside"


def _sample(
    pair: Pair, token: int, role: str, row: NodeRow, node: NodeVerdict, reading: Reading, alone: bool = False
) -> Sample:
    """A node's sample from one reading: the verdict's, or (``alone``) the error model's on its own."""
    node_type = type_of(row)
    local, bound = reading.local_error, reading.expected_error
    bounded = reading.rule in BOUNDED and local is not None and bound is not None
    return Sample(
        pair.group,
        pair.name,
        token,
        node.node,
        role,
        kind_of(node_type, node.node),
        node_type,
        reading.rule,
        f"{reading.rule} alone" if alone else reading_of(reading.rule, reading.reason),
        node.label,
        row.get("test_dtype"),
        _elements(row.get("shape")),
        local,
        bound,
        _ratio(local, bound) if bounded and local is not None and bound is not None else None,
        node.input_error,
        _parsed(reading.reason, r": (\S+)x that plus"),
        _parsed(reading.reason, r"condition (\S+)\)"),
    )


def _alone(
    comparison: Comparison, nodes: dict[str, NodePair], row: NodeRow, node: NodeVerdict
) -> list[Reading]:
    """What the error model and the weights rule read of an operator (no module) where another rule
    decided: what the model would say where no replay is possible, how far a correct weight is from
    its bound. One rounding of the output (no fixture here sums ranks)."""
    pair = nodes.get(node.node)
    if pair is None or node.rule not in BOUNDED:
        return []
    tensors = [comparison.engine.tensor_row(t) for t in pair.tensors]
    found = []
    if node.rule != "weights":
        found.append(by_weights(tensors, type_of(row)))
    if not (node.rule == "error model" and reading_of(node.rule, node.reason) == "error model"):
        facts = Facts(row, tensors, node.inputs_passed, node.inputs_from, node.input_error, node.output_error)
        outputs = [t for t in tensors if t.get("role") == "output" and not t.get("error")]
        found.append(by_error_model(facts, outputs, data_inputs(row, tensors)))
    return [r for r in found if r is not None and r.expected_error is not None]


def judge(pair: Pair) -> tuple[list[Sample], list[Sample], int]:
    """Every bounded node's sample (and every operator's error model reading on its own), every
    node labelled local (a sample each, bounded or not), and the number of tokens judged."""
    comparison = open_comparison(pair.golden, pair.test, CompareOptions(cache=False))
    first = min(pair.faults, default=None)
    samples: list[Sample] = []
    locals_: list[Sample] = []
    judged = 0
    for token in comparison.pairing.tokens:
        if first is not None and token < first and pair.skip_before:
            continue
        verdict = comparison.verdicts.token(token)
        judged += 1
        nodes = {p.golden: p for p in comparison.pairing.node_pairs(token)}
        culprit = pair.faults.get(token)
        culprits = {v.node for v in verdict if culprit is not None and culprit(v.node, verdict.tree)}
        for node in verdict:
            row = verdict.metrics[node.node]
            role = _role(pair, token, node.node, culprits, verdict.tree)
            own = Reading(
                node.rule or "threshold",
                node.label == "local",
                node.local_error,
                node.expected_error,
                node.reason,
            )
            sample = _sample(pair, token, role, row, node, own)
            if sample.ratio is not None or role == "fault":
                samples.append(sample)
            if node.label == "local":
                locals_.append(sample)
            if not verdict.tree.children(node.node):
                samples += [
                    _sample(pair, token, role, row, node, alone, alone=True)
                    for alone in _alone(comparison, nodes, row, node)
                ]
    return samples, locals_, judged


# -- what the numbers say ---------------------------------------------------------------------------


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _where(s: Sample) -> str:
    return f"{s.group}:{s.pair} t{s.token} {s.node}"


def margins(samples: list[Sample]) -> list[dict[str, Any]]:
    """Per reading and kind, over the clean nodes: count, median, p99, max and where the max is."""
    grouped: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for s in samples:
        if s.role == "clean" and s.ratio is not None:
            grouped[(s.reading, s.kind)].append(s)
    table = []
    for (reading, kind), found in sorted(grouped.items()):
        ratios = [s.ratio for s in found if s.ratio is not None]
        top = max(found, key=lambda s: s.ratio or 0.0)
        table.append(
            {
                "reading": reading,
                "kind": kind,
                "count": len(ratios),
                "median": _median(ratios),
                "p99": _p99(ratios),
                "max": max(ratios),
                "max_at": _where(top),
                "max_dtype": top.dtype,
                "max_elements": top.elements,
            }
        )
    return table


def _without(s: Sample, factor: float) -> float | None:
    """The node's ratio had the error model's growth been ``factor`` times smaller (its rounding kept)."""
    if s.growth is None or s.input_error is None or s.local_error is None or s.expected_error is None:
        return None
    rounding = s.expected_error - s.growth * s.input_error
    bound = s.growth / factor * s.input_error + rounding
    return s.local_error / bound if bound > 0 else math.inf


def factors(samples: list[Sample]) -> dict[str, Any]:
    """The error model's factors over the clean operators it read (where it decided, and where it did
    not: its reading on its own): where each was above 1, the largest ratio with it and without it;
    and the growth the operators needed against the growth allowed."""
    readings = ("error model", "error model alone")
    leaves = [(s, s.growth) for s in samples if s.role == "clean" and s.reading in readings and s.growth]
    found: dict[str, Any] = {}

    def summary(name: str, chosen: list[tuple[Sample, float]]) -> None:
        if not chosen:
            found[name] = {"count": 0}
            return
        top = max(chosen, key=lambda c: c[0].ratio or 0.0)
        bare = [w for s, f in chosen if (w := _without(s, f)) is not None]
        found[name] = {
            "count": len(chosen),
            "factor_max": max(f for _, f in chosen),
            "ratio_max": top[0].ratio,
            "ratio_max_at": _where(top[0]),
            "ratio_max_without_factor": max(bare) if bare else None,
            "above_1_without_factor": sum(1 for w in bare if w > 1),
        }

    summary("softmax", [(s, g / GROWTH) for s, g in leaves if s.kind == "softmax" and g > GROWTH])
    summary(
        "cancellation", [(s, s.condition) for s, _ in leaves if s.condition is not None and s.condition > 1]
    )
    for low, high in ((1, 16), (16, 256), (256, None)):
        chosen = []
        for s, g in leaves:
            if not linear_map(s.type) or s.elements is None or s.elements < low:
                continue
            if high is not None and s.elements >= high:
                continue
            few = g / (GROWTH * (s.condition or 1.0))
            chosen.append((s, few))
        summary(f"few elements {low}-{high - 1 if high else 'more'}", chosen)
    # the growth each operator needed (its error less its rounding, over what came in), by kind
    needed: dict[str, list[tuple[float, Sample]]] = defaultdict(list)
    for s, g in leaves:
        if s.input_error and s.local_error is not None and s.expected_error is not None:
            rounding = s.expected_error - g * s.input_error
            needed[s.kind].append((max(0.0, s.local_error - rounding) / s.input_error, s))
    found["growth"] = {}
    for kind, values in sorted(needed.items()):
        top_need, top = max(values, key=lambda n: n[0])
        found["growth"][kind] = {
            "count": len(values),
            "needed_max": top_need,
            "allowed_there": top.growth,
            "at": _where(top),
            "needed_over_2": sum(1 for n, _ in values if n > GROWTH),
        }
    return found


def result(samples: list[Sample], locals_: list[Sample], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything measured, as the JSON holds it."""
    # a fault's culprit: the verdict's reading and the error model's alone (its weights' says
    # nothing of a fault that is not in a weight)
    faults = [s for s in samples if s.role == "fault" and s.reading != "weights alone"]
    # own rounding judges only outputs within it (at most 1 by construction): no false local there
    near = [
        s
        for s in samples
        if s.role in ("clean", "beside") and s.reading != "own rounding" and (s.ratio or 0.0) > NEAR
    ]
    wrong = [s for s in locals_ if s.role != "fault"]
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s.role == "clean" and s.ratio is not None:
            ratios[s.reading][s.kind].append(s.ratio)
    return {
        "runs": runs,
        "clean": margins(samples),
        "faults": [asdict(s) for s in faults],
        "near": [asdict(s) for s in sorted(near, key=lambda s: -(s.ratio or 0.0))],
        "wrong_locals": [asdict(s) for s in wrong],
        "factors": factors(samples),
        "clean_ratios": ratios,
    }


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def text(found: dict[str, Any]) -> str:
    """The result as tables to read."""
    lines = ["pairs:"]
    lines += [
        f"  {r['group']}:{r['pair']} tokens {r['tokens']} bounded {r['bounded']} {r['seconds']:.1f}s"
        + (f" FAILED: {r['failure']}" if r.get("failure") else "")
        for r in found["runs"]
    ]
    lines += ["", "clean nodes, local_error / expected_error by reading and kind:"]
    lines.append("| reading | kind | count | median | p99 | max | max at (dtype, elements) |")
    lines.append("|---|---|---|---|---|---|---|")
    for m in sorted(found["clean"], key=lambda m: (m["reading"], -m["max"])):
        lines.append(
            f"| {m['reading']} | {m['kind']} | {m['count']} | {m['median']:.3f} | {m['p99']:.3f} | "
            f"{m['max']:.3f} | {m['max_at']} ({m['max_dtype']}, {m['max_elements']}) |"
        )
    lines += ["", "faults: the injected culprit's ratio (1: the bound)"]
    for s in sorted(found["faults"], key=lambda s: s["ratio"] if s["ratio"] is not None else -1):
        lines.append(
            f"  {_g(s['ratio']):>8}  {s['group']}:{s['pair']} t{s['token']} {s['node']} "
            f"[{s['reading']}, {s['kind']}, label {s['label']}]"
        )
    lines += ["", f"correct nodes above {NEAR} (clean, or beside a fault; alike ones across runs once):"]
    seen: dict[tuple[Any, ...], int] = {}
    shown: list[dict[str, Any]] = []
    for s in found["near"]:
        key = (s["group"], s["token"], s["node"], s["reading"], round(s["ratio"], 6))
        if key not in seen:
            shown.append(s)
        seen[key] = seen.get(key, 0) + 1
    for s in shown:
        alike = seen[(s["group"], s["token"], s["node"], s["reading"], round(s["ratio"], 6))] - 1
        lines.append(
            f"  {s['ratio']:.3f}  {s['role']} {s['group']}:{s['pair']} t{s['token']} {s['node']} "
            f"[{s['reading']}, {s['kind']}, {s['dtype']}, {s['elements']} elements, label {s['label']}]"
            + (f" (and {alike} alike)" if alike else "")
        )
    if not shown:
        lines.append("  none")
    lines += ["", "labelled local but not the injected fault:"]
    for s in found["wrong_locals"]:
        lines.append(
            f"  {s['role']} {s['group']}:{s['pair']} t{s['token']} {s['node']} [{s['rule']}, "
            f"{_g(s['local_error'])} / {_g(s['expected_error'])}]"
        )
    if not found["wrong_locals"]:
        lines.append("  none")
    lines += ["", "the error model's factors (clean operators, where it decided and on its own):"]
    factors_found = dict(found["factors"])
    growth = factors_found.pop("growth", {})
    for name, f in factors_found.items():
        said = ", ".join(f"{k} {_g(v) if isinstance(v, float) else v}" for k, v in f.items())
        lines.append(f"  {name}: {said}")
    lines.append("  growth needed ((error - rounding) / what came in), by kind:")
    for kind, g in growth.items():
        lines.append(
            f"    {kind}: {g['count']} operators, needed up to {_g(g['needed_max'])} (allowed there "
            f"{_g(g['allowed_there'])}) at {g['at']}; above 2: {g['needed_over_2']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), help="these groups")
    parser.add_argument("--sample", type=int, default=1, help="every Nth faulty run of the sensitivity sweep")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the numbers there, as JSON")
    args = parser.parse_args(argv)
    samples: list[Sample] = []
    locals_: list[Sample] = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tui-acc-margins-") as temporary:
        for pair in pairs(args.only, Path(temporary), args.sample):
            started = time.perf_counter()
            run: dict[str, Any] = {"group": pair.group, "pair": pair.name, "tokens": 0, "bounded": 0}
            try:
                found, local, run["tokens"] = judge(pair)
            except Exception as error:  # a measurement goes on past one pair
                found, local, run["failure"] = [], [], f"{type(error).__name__}: {error}"
            run["bounded"] = sum(1 for s in found if s.ratio is not None)
            run["seconds"] = time.perf_counter() - started
            runs.append(run)
            samples += found
            locals_ += local
            print(f"{pair.group}:{pair.name} {run['seconds']:.1f}s", file=sys.stderr, flush=True)
    found_all = result(samples, locals_, runs)
    if args.json is not None:
        args.json.write_text(json.dumps(found_all, indent=1), encoding="utf-8")
    print(text(found_all))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
