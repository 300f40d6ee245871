"""The pair report's text: what ``tui-acc report GOLDEN TEST`` prints without ``--json``, from the
report's body (the keys ``--json`` prints)."""

from __future__ import annotations

from typing import Any

from tui_acc import numbers
from tui_acc.sides import Swapped

# how the text report counts the failing operators of a token, by label
_LABELS = {"local": "local", "inherited": "inherited", "contains": "containing it"}


def format_text(report: dict[str, Any]) -> str:
    """A terminal summary of the report."""
    lines = [
        f"tui-acc {report['version']}",
        *(f"{side:<6}  {_side_line(report[side])}" for side in ("golden", "test")),
        *([f"noise   {_side_line(report['baseline'])} (--baseline)"] if "baseline" in report else []),
        f"logits  {report['logits_node']}",
        *_swapped_lines(report.get("swapped")),
        "",
        f"{'token':>5}  {'verdict':<7}  {'cosine':>10}  {'KL':>10}  top-1 golden/test",
    ]
    stats = any(t["stats_only"] for t in report["tokens"])
    if stats:
        lines[-1] = (
            f"{'token':>5}  {'verdict':<7}  {'norm rel':>10}   (statistics only: max, min, mean, norm)"
        )
    for t in report["tokens"]:
        verdict = {"error": "ERROR", "fail": "FAIL"}.get(t["verdict"] or "", t["verdict"] or "?")
        top1 = f"{t['golden_top1']}/{t['test_top1']}" if t["golden_top1"] is not None else "-"
        if stats:
            lines.append(f"{t['token']:>5}  {verdict:<7}  {numbers.number(t['norm_rel_diff']):>10}")
        else:
            lines.append(
                f"{t['token']:>5}  {verdict:<7}  {numbers.cosine(t['cosine']):>10}"
                f"  {numbers.number(t['kl']):>10}  {top1}"
            )
    lines.append("")
    failing = report["first_failing_token"]
    why = f" ({report['first_failing_token_reason']})" if report.get("first_failing_token_reason") else ""
    lines.append(f"first failing token: {failing if failing is not None else 'none'}{why}")
    op = report["first_failing_op"]
    if report["analysed_token"] is not None:
        if op:
            partner = f" <-> {op['test']} ({op['test_type']})" if op["test"] != op["golden"] else ""
            if op.get("test_rank") is not None:  # a gathered rank's own call (an expert it owns)
                partner += f", rank {op['test_rank']}'s {op['test_record']}"
            inputs = (
                "inputs pass" if op["inputs_from"] == "files" else f"inputs pass (fed by {op['inputs_from']})"
            )
            if op["in_place"]:
                inputs += f"; in place: {op['in_place']}"
            lines.append(
                f"first failing op at token {op['token']}: {op['golden']} ({op['golden_type']}){partner}"
                f"  cosine {numbers.cosine(op['cosine'])}  max abs {numbers.number(op['max_abs_err'])}"
                f"  {op['label']}, {inputs}" + _noise_text(op, "baseline" in report)
            )
            lines.append(
                f"  its inputs: cosine {numbers.cosine(op.get('input_cosine'))}"
                f"  rel eucl {numbers.number(op.get('input_error'))};"
                f"  its output: rel eucl {numbers.number(op.get('output_error'))}"
            )
            if op.get("rule"):
                lines.append(f"  judged by {op['rule']}: {op.get('reason') or ''}")
            if op.get("operator"):
                lines.append(f"  the operator: {op['operator']} (the test's own, inside it)")
            counts = report.get("counts") or {}
            said = ", ".join(
                f"{counts[label]} {name}" for label, name in _LABELS.items() if counts.get(label)
            )
            lines.append(f"  failing ops at that token: {counts.get('failing', 0)} ({said})")
            if report["modules"]:
                whole = min(report["modules"], key=lambda m: m["depth"])  # the outermost module
                lines.append(
                    f"  all {whole['tensors']} operator outputs inside {whole['golden']}:"
                    f" cosine {numbers.cosine(whole['cosine'])}"
                    f"  rel eucl {numbers.number(whole['rel_euclidean'])}"
                )
        else:
            lines.append(f"first failing op at token {report['analysed_token']}: none found")
    if report.get("explanation"):
        lines.append(f"  {report['explanation']}")
    if not report.get("tensor"):  # two tensor files: there are no operators to speak of
        lines.append(_compared_line(report))
    if report.get("tensor"):
        lines.append("")
        lines += [f"  {key:<14} {_shown(key, value)}" for key, value in report["tensor"].items()]
        lines.append("")
    lines.append(
        f"tensor pairs: {report['pairs']}   unmatched: {len(report['unmatched'])}{_unmatched_summary(report)}"
    )
    if report["unmatched"]:  # listed by --json and the TUI's u: a ticket needs the count
        lines[-1] += "  (--json or the TUI's u list them)"
    for e in report["errors"][:20]:
        lines.append(f"error: {e['file']}: {e['message']}")
    lines += [f"note: {n}" for n in _notes(report)]
    return "\n".join(lines) + "\n"


def _notes(report: dict[str, Any]) -> list[str]:
    """The notes, each once: one both dumps raise (their paths told apart) is said for both."""
    sides = {report[side]["data_dir"]: side for side in ("golden", "test") if report.get(side)}
    said: dict[str, list[str]] = {}
    for note in report["notes"]:
        where, _, text = note.partition(": ")
        key, who = (text, sides[where]) if where in sides and text else (note, "")
        said.setdefault(key, []).append(who)
    return [
        f"({' and '.join(w for w in whose if w)}) {text}" if any(whose) else text
        for text, whose in said.items()
    ]


def _swapped_lines(swapped: dict[str, Any] | None) -> list[str]:
    if not swapped:
        return []
    said = Swapped(swapped["golden_dtype"], swapped["test_dtype"], swapped.get("command"))
    return [f"warning: {said.headline()}", f"         {said.how_to_swap()}"]


def _noise_text(op: dict[str, Any], with_baseline: bool) -> str:
    if not with_baseline:
        return ""
    ratio = op.get("noise_ratio")
    return "  (no baseline tensor)" if ratio is None else f"  {numbers.ratio(ratio)} the baseline's error"


def _compared_line(report: dict[str, Any]) -> str:
    """Which tokens' operators were compared: a passing report says how far it looked."""
    compared: list[int] = report["operators_compared_at"]
    every = [t["token"] for t in report["tokens"]]
    if not compared:
        return "operators compared at: no token (no token's logits fail; --all-tokens compares them all)"
    where = (
        f"every token ({span(compared)})"
        if compared == every and len(every) > 1
        else f"token {span(compared)}"
    )
    line = f"operators compared at: {where}"
    failing_tokens = sorted({f["token"] for f in report["failing"]})
    if len(compared) > 1:
        line += f"; failing ops: {report['failing_ops']}" + (
            f" at token{'s' if len(failing_tokens) > 1 else ''} {span(failing_tokens)}"
            if failing_tokens
            else ""
        )
    return line


def _unmatched_summary(report: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for u in report["unmatched"]:
        key = f"{u['kind']}s only in {u['side']}"
        counts[key] = counts.get(key, 0) + 1
    return f" ({', '.join(f'{n} {k}' for k, n in counts.items())})" if counts else ""


def _side_line(side: dict[str, Any]) -> str:
    sharded = f"; {side['sharding']}, gathered" if side.get("sharding") else ""
    return f"{side['path']}  ({side['format']}, {side['tokens']} tokens, order: {side['order']}{sharded})"


def span(tokens: list[int]) -> str:
    """Tokens as the text says them: ``none``, ``3``, ``2..7`` for a run without gaps, else the list."""
    if not tokens:
        return "none"
    if len(tokens) == 1:
        return str(tokens[0])
    return f"{tokens[0]}..{tokens[-1]}" if tokens == list(range(tokens[0], tokens[-1] + 1)) else str(tokens)


def _shown(key: str, value: Any) -> Any:
    if not isinstance(value, float):
        return value
    return numbers.cosine(value) if key == "cosine" else numbers.number(value)
