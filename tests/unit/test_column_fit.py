"""Column widths for the wide tables and sideways scrolling by whole columns (tui_acc.tui.column_fit)."""

from __future__ import annotations

from tui_acc.tui.column_fit import Spec, fit, page

PAD = 2
# An operator table: #, Operator, In, Out pinned; the cosine in view; then metrics and text
OPS = [
    Spec("order", 3, 3),
    Spec("name", 12, 26),
    Spec("inputs", 2, 2),
    Spec("outputs", 3, 3),
    Spec("cosine", 8, 8),
    Spec("test_name", 18, 47),
    Spec("max_abs_err", 9, 9),
    Spec("type", 14, 22),
    Spec("shape", 14, 14),
]


def _edges(widths: dict[str, int]) -> list[tuple[str, int, int]]:
    spans, x = [], 0
    for spec in OPS:
        spans.append((spec.key, x, x + widths[spec.key] + PAD))
        x += widths[spec.key] + PAD
    return spans


def _cut_at_the_edge(widths: dict[str, int], room: int) -> list[str]:
    """Columns the right edge shows in part (more than their right padding cut)."""
    return [key for key, start, end in _edges(widths) if start < room and end - PAD // 2 > room]


def test_every_column_as_wide_as_its_longest_cell_where_they_all_fit() -> None:
    widths = fit(OPS, 200, PAD, 4, 5, "name")
    assert widths == {s.key: s.natural for s in OPS}


def test_text_columns_share_the_room_where_they_fit_only_cut() -> None:
    room = 150  # the narrowest of every column fit, not the longest
    widths = fit(OPS, room, PAD, 4, 5, "name")
    assert sum(w + PAD for w in widths.values()) == room
    assert widths["name"] == 26  # the name first, whole
    assert 14 <= widths["type"] <= 22 and 18 <= widths["test_name"] <= 47
    assert _cut_at_the_edge(widths, room) == []


def test_a_scrolling_table_shows_no_column_in_part_at_its_right_edge() -> None:
    for room in range(50, 120):
        widths = fit(OPS, room, PAD, 4, 5, "name")
        assert _cut_at_the_edge(widths, room) == [], (room, widths)
        assert widths["name"] >= 12
        # the cosine is in view without scrolling wherever the names fit whole beside it
        cosine_end = next(end for key, _, end in _edges(widths) if key == "cosine")
        assert room < 52 or cosine_end <= room, (room, widths)


def test_a_text_column_the_edge_would_cut_is_narrowed_rather_than_the_name_widened() -> None:
    room = 90
    widths = fit(OPS, room, PAD, 4, 5, "name")
    assert widths["name"] == 26  # not 26 + what the test name would leave
    assert widths["test_name"] == room - 52 - PAD  # what is left after the cosine


def test_right_shows_the_next_hidden_column_first_and_left_goes_back() -> None:
    pinned = 20
    spans = [(20, 30), (30, 41), (41, 52), (52, 60), (60, 76)]
    view, max_scroll = 45, 76 - 45
    x = page(spans, 0, view, pinned, max_scroll, 1, PAD)  # 20..45 shows (20, 30) and (30, 41) whole
    assert x == 41 - pinned  # (41, 52) is the first column after the pinned ones
    x2 = page(spans, x, view, pinned, max_scroll, 1, PAD)
    assert x2 == min(60 - pinned, max_scroll)
    assert page(spans, max_scroll, view, pinned, max_scroll, 1, PAD) == max_scroll
    back = page(spans, x, view, pinned, max_scroll, -1, PAD)
    assert back == 0
    assert page(spans, 0, view, pinned, max_scroll, -1, PAD) == 0


def test_a_column_wider_than_the_window_is_scrolled_through_a_window_at_a_time() -> None:
    spans = [(10, 40), (40, 50)]
    x = page(spans, 0, 25, 10, 25, 1)
    assert x == 15  # (10, 40) does not fit the 15-cell window: a window further
