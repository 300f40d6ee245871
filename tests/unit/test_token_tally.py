"""The token list's own record of the rows it received (tui/token_tally.py)."""

from __future__ import annotations

from tui_acc.tui.token_tally import OVER, STRIP_BARS, TokenTally, strip_level

KL_BOUND = 1e-4


def _bound_of(row: object) -> tuple[str, float | None]:
    return ("NormRel", 0.01) if row.get("kl") is None else ("KL", KL_BOUND)  # type: ignore[attr-defined]


def _row(token: int, passed: bool, kl: float | None = None) -> dict[str, object]:
    return {"token": token, "passed": passed, "verdict": "pass" if passed else "fail", "kl": kl}


def test_counts_follow_each_row_as_it_arrives_in_any_order_and_again() -> None:
    tally = TokenTally([10, 11, 12, 13], _bound_of)
    assert (tally.compared, tally.failing, tally.first_failing()) == (0, 0, None)
    assert tally.add(_row(13, False, kl=1.0)) and tally.first_failing() == 13
    assert tally.add(_row(11, False, kl=0.5)) and tally.first_failing() == 11  # earlier in token order
    assert tally.add(_row(11, True, kl=0.0))  # the same token again: replaced, not counted twice
    assert (tally.compared, tally.failing, tally.first_failing()) == (2, 1, 13)
    assert tally.levels == [None, 0, None, strip_level(1.0, KL_BOUND)] and tally.failed == [False] * 3 + [
        True
    ]
    assert tally.get(11) == _row(11, True, kl=0.0) and tally.get(10) is None


def test_a_row_without_a_verdict_or_of_another_token_is_not_counted() -> None:
    tally = TokenTally([0, 1], _bound_of)
    assert not tally.add({"token": 0, "passed": None, "error": "token 0: no logits"})  # nothing judged
    assert not tally.add(_row(7, False))  # not a token of this comparison
    assert (tally.compared, tally.failing, tally.get(0)) == (0, 0, None)
    tally.add({"token": 1, "passed": False, "verdict": "fail", "kl": None, "norm_rel_diff": 0.25})
    # statistics only: NormRel makes the bar, against its own threshold
    assert tally.levels[1] == strip_level(0.25, 0.01) and tally.strip_metric == "NormRel"


def test_the_strip_is_scaled_against_the_threshold_not_from_min_to_max() -> None:
    """An all-pass run (KL 1.5e-6 to 2e-6, threshold 1e-4) draws one flat level, not min-to-max's ▁▇█▁."""
    from tui_acc.tui.widgets.threshold_strip import ThresholdStrip

    all_pass = [strip_level(kl, KL_BOUND) for kl in (1.5e-6, 1.9e-6, 2e-6, 1.6e-6)]
    assert len(set(all_pass)) == 1 and all_pass[0] is not None and all_pass[0] < OVER
    strip = ThresholdStrip()
    strip.show(all_pass, [False] * 4)
    assert strip.bars(80).plain == STRIP_BARS[all_pass[0]] * 4
    # a decade a step; at the threshold still within, just over it over; NaN as tall as a bar gets
    assert strip_level(KL_BOUND, KL_BOUND) == OVER - 1 < strip_level(1.01 * KL_BOUND, KL_BOUND) == OVER
    assert (
        strip_level(5e-3, KL_BOUND) == OVER + 1 and strip_level(float("nan"), KL_BOUND) == len(STRIP_BARS) - 1
    )
    assert strip_level(0.0, KL_BOUND) == 0 and strip_level(1e-12, KL_BOUND) == 0
    assert strip_level(None, KL_BOUND) is None and strip_level(1.0, None) is None
    # more tokens than cells: each cell the worst of its tokens
    strip.show([0, 1, 6, 2, None, None], [False, False, True, False, False, False])
    assert strip.bars(3).plain == STRIP_BARS[1] + STRIP_BARS[6] + " "


def test_a_token_without_logits_is_compared_and_leaves_the_strips_threshold_alone() -> None:
    """The engine judges a token with no logits "error" (it is not pending forever), and an error
    row, which names no dtype, does not set the threshold the strip is drawn against."""
    tally = TokenTally([0, 1], _bound_of)
    assert tally.add(_row(0, True, kl=1e-6)) and tally.strip_metric == "KL"
    no_logits = {"token": 1, "passed": None, "verdict": "error", "error": "token 1: no logits", "kl": None}
    assert tally.add(no_logits) and tally.compared == 2
    assert (tally.strip_metric, tally.strip_bound) == ("KL", KL_BOUND)
