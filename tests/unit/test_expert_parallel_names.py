"""A gathered expert-parallel test renames each rank's own calls where another rank uses the name
(msprobe numbers API calls per rank): whatever reads a call's record reads it under the name its own
rank's dump.json gives it (tests/data/tp/moe-ep2-msprobe.tar.xz, the real msprobe's dump)."""

from __future__ import annotations

import json

from tests.unit.ranks_dumps import case_of, rank_folder
from tui_acc import CompareOptions, open_comparison
from tui_acc.redump.select import selection_for
from tui_acc.replay.dumped_call import recorded_arguments


def test_a_renamed_calls_scalars_are_its_own_ranks(tp_case) -> None:
    """Rank 1's ``chosen == e`` calls, renamed: their recorded scalar is the expert id rank 1's
    dump.json holds for that record (2 or 3), never rank 0's call of the same number."""
    ep = tp_case("moe-ep2-msprobe")
    comparison = open_comparison(ep / "golden", ep / "clean", CompareOptions(cache=False))
    records = json.loads((rank_folder(ep, "clean", 1) / "dump.json").read_text(encoding="utf-8"))["data"]
    checked = 0
    for token in comparison.pairing.tokens:
        for name in comparison.test.tokens[token]:
            rank, record = comparison.test.origins.get(name, (0, name))
            if rank != 1 or not record.startswith("Tensor.__eq__.") or name == record:
                continue
            expected = records[record]["input_args"][1]["value"]
            assert recorded_arguments(comparison.test, token, name) == {"argument 1": expected}
            assert expected in (2, 3)
            checked += 1
    assert checked


def test_a_re_dump_of_a_ranks_own_call_names_its_record(tp_case) -> None:
    ep = tp_case("moe-ep2-msprobe")
    fault = case_of(ep)["fault"]
    comparison = open_comparison(ep / "golden", ep / fault["case"], CompareOptions(cache=False))
    token = fault["token"]
    [culprit] = [row for row in comparison.verdicts.token(token).rows if row["label"] == "local"]
    rank, record = comparison.test.origins[culprit["test_node"]]
    assert rank == fault["rank"] and culprit["test_node"] != record  # renamed in the gathered index
    selection = selection_for(comparison, "test", token, culprit["golden_node"])
    assert selection.nodes[0] == record
