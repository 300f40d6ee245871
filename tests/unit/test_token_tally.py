"""The token list's own record of the rows it received (tui/token_tally.py)."""

from __future__ import annotations

from tui_acc.tui.token_tally import TokenTally, strip_height


def _row(token: int, passed: bool, kl: float | None = None) -> dict[str, object]:
    return {"token": token, "passed": passed, "verdict": "pass" if passed else "fail", "kl": kl}


def test_counts_follow_each_row_as_it_arrives_in_any_order_and_again() -> None:
    tally = TokenTally([10, 11, 12, 13])
    assert (tally.compared, tally.failing, tally.first_failing()) == (0, 0, None)
    assert tally.add(_row(13, False, kl=1.0)) and tally.first_failing() == 13
    assert tally.add(_row(11, False, kl=0.5)) and tally.first_failing() == 11  # earlier in token order
    assert tally.add(_row(11, True, kl=0.0))  # the same token again: replaced, not counted twice
    assert (tally.compared, tally.failing, tally.first_failing()) == (2, 1, 13)
    assert tally.heights == [0.0, 0.0, 0.0, strip_height(1.0)]
    assert tally.get(11) == _row(11, True, kl=0.0) and tally.get(10) is None


def test_a_row_without_a_verdict_or_of_another_token_is_not_counted() -> None:
    tally = TokenTally([0, 1])
    assert not tally.add({"token": 0, "passed": None, "error": "token 0: no logits"})  # nothing judged
    assert not tally.add(_row(7, False))  # not a token of this comparison
    assert (tally.compared, tally.failing, tally.get(0)) == (0, 0, None)
    tally.add({"token": 1, "passed": False, "verdict": "fail", "kl": None, "norm_rel_diff": 0.25})
    assert tally.heights[1] == strip_height(0.25)  # statistics only: the norm difference makes the bar
