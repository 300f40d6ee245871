"""Help states the thresholds in force for the pair on screen, by dtype, and explains the columns and
keys an 80-column user needs."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any, cast

from rich.console import Console
from textual.widgets import Static

from tests.tui.conftest import settle
from tui_acc.session import Comparison
from tui_acc.tolerances.thresholds import Rule, Thresholds, precision_class
from tui_acc.tui.app import AccApp
from tui_acc.tui.bounds import help_lines
from tui_acc.tui.screens.help import HelpScreen


def _pair(*dtypes: str, thresholds: Thresholds | None = None, statistics: bool = False) -> Comparison:
    """What help_lines reads of a comparison: the runs' float dtypes and the thresholds."""
    side = SimpleNamespace(float_dtypes=frozenset(dtypes), statistics_only=statistics)
    return cast(
        Comparison,
        SimpleNamespace(
            golden=side, test=side, baseline=None, single=False, thresholds=thresholds or Thresholds()
        ),
    )


def test_a_float32_pair_gets_the_float32_thresholds_not_the_fp16_ones() -> None:
    lines = help_lines(_pair("float32"))
    assert "Logits (float32): cosine ≥ 0.9999, KL ≤ 1e-5." in lines
    assert "Operator tensors (float32): cosine ≥ 0.999." in lines
    assert not any("float16" in line or "0.99," in line for line in lines)


def test_a_bf16_run_with_float32_tensors_lists_both_and_the_logits_own_when_known() -> None:
    rules = (Rule("*lm_head*", {"cosine": 0.98}),)
    pair = _pair("bfloat16", "float32", thresholds=Thresholds(rules=rules))
    lines = help_lines(pair)
    assert "Operator tensors (float32): cosine ≥ 0.999." in lines
    assert "Operator tensors (bfloat16): cosine ≥ 0.99." in lines
    assert "Operators named *lm_head*: cosine ≥ 0.98." in lines
    known = help_lines(pair, ("bfloat16", "bfloat16"))
    assert [line for line in known if line.startswith("Logits")] == [
        "Logits (bfloat16): cosine ≥ 0.999, KL ≤ 5e-3."
    ]


def test_statistics_dumps_get_the_statistics_tolerance_of_the_run() -> None:
    lines = help_lines(_pair("bfloat16", "float32", statistics=True))
    assert lines[1].startswith("Statistics only (no data): NormRel ≤ 0.03;")  # bf16's 3%, not fp32's 1%


def _help_text(app: AccApp) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(cast(Any, app.screen.query_one(Static).content))
    return console.export_text()


async def test_help_shows_the_pairs_thresholds_top1_and_sideways_scroll(demo_app: AccApp) -> None:
    async with demo_app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(demo_app.screen, HelpScreen)
        text = " ".join(_help_text(demo_app).split())
    row = demo_app.comparison.engine.cached_token_row(demo_app.comparison.pairing.tokens[0])
    assert row is not None
    logits = precision_class(row["golden_dtype"], row["test_dtype"])
    thresholds = demo_app.comparison.engine.thresholds.logits[logits]
    assert f"Logits ({logits}): cosine ≥ {thresholds['cosine']:g}" in text
    assert "Thresholds in force for this pair" in text and "Operator tensors (" in text
    assert "Top-1 g/t: the token each side's logits rank first, golden/test" in text
    assert "← → the next / previous columns that do not fit, whole" in text


def test_dtypes_the_index_does_not_know_are_taken_from_the_logits_else_all_listed() -> None:
    assert "Operator tensors (bfloat16): cosine ≥ 0.99." in help_lines(_pair(), ("bfloat16", "float32"))
    assert len([line for line in help_lines(_pair()) if line.startswith("Operator tensors")]) == 4
