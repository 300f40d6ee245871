"""Ordering and filtering the tables' rows (tui/sorting.py), without a terminal."""

from __future__ import annotations

import math

from tui_acc.tui.sorting import Sort, matching_keys, sorted_keys

VALUES = {"a": 0.5, "b": None, "c": 0.1, "d": math.nan, "e": 0.5, "f": 0.9}


def _value(key: str, column: str) -> object:
    return VALUES[key]


def test_unknown_values_stay_last_either_way_and_ties_keep_the_natural_order() -> None:
    keys = list(VALUES)
    assert sorted_keys(keys, _value, Sort("cosine")) == ["c", "a", "e", "f", "b", "d"]
    assert sorted_keys(keys, _value, Sort("cosine", descending=True)) == ["f", "a", "e", "c", "b", "d"]
    assert sorted_keys(keys, _value, Sort()) == keys  # no column: the view's own order


def test_booleans_and_text_sort_as_themselves() -> None:
    flips = {"x": True, "y": False, "z": None}
    assert sorted_keys(list(flips), lambda k, c: flips[k], Sort("top1")) == ["y", "x", "z"]
    assert sorted_keys(["b.2", "a.10", "a.9"], lambda k, c: k, Sort("name")) == ["a.10", "a.9", "b.2"]


def test_a_filter_matches_any_text_of_a_row_in_any_case_and_keeps_the_order() -> None:
    texts = {
        "root.mlp.down_proj": ("root.mlp.down_proj", "5_Linear", "Linear", "LinearOperation"),
        "root.attn.o_proj": ("root.attn.o_proj", "3_Linear", "Linear", "LinearOperation"),
        "root.norm": ("root.norm", "7_RmsNorm", "RMSNorm", "RmsNormOperation"),
    }
    assert matching_keys(texts, "LINEAR") == ["root.mlp.down_proj", "root.attn.o_proj"]
    assert matching_keys(texts, "rmsnormop") == ["root.norm"]
    assert matching_keys(texts, "a.b[") == []  # taken literally, not as a pattern
    assert matching_keys(texts, "") == list(texts)


def test_signed_differences_sort_worst_first_by_magnitude() -> None:
    """MaxDiff -0.0172 is the worst of these, not the best: signed columns sort by magnitude."""
    from tui_acc.tui.sorting import SortColumn, worst_end

    diffs = {"small": 0.001, "neg": -0.0172, "pos": 0.005, "none": None, "zero": 0.0}
    for column in ("max_diff", "min_diff", "mean_diff"):
        worst_first = Sort().picked(SortColumn(column, column, worst_end(column)))
        assert sorted_keys(list(diffs), lambda k, c: diffs[k], worst_first) == [
            "neg",
            "pos",
            "small",
            "zero",
            "none",
        ]
        assert sorted_keys(list(diffs), lambda k, c: diffs[k], worst_first.reversed())[0] == "zero"
