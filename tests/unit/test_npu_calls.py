"""torch_npu calls as real msprobe records them (tests/data/npu/npu-calls-msprobe-L1,
scripts/make_npu_call_fixtures.py): lists of tensors, a dtype passed by position (recorded as
``{}``), an int64 scale, group and routing arguments. Each operator's first record is computed as
its doc says and must be consistent with its replay; its second was made wrong by a known amount
and must disagree."""

from __future__ import annotations

import pytest

from tui_acc.dumps import open_dump
from tui_acc.replay.registry import Registry
from tui_acc.verdicts.replay_check import replay_side

OPERATORS = ("npu_grouped_matmul", "npu_quantize", "npu_quant_matmul", "npu_moe_gating_top_k")


@pytest.fixture(scope="module")
def calls(npu_case):
    return open_dump(npu_case("npu-calls-msprobe-L1") / "dump")


@pytest.mark.parametrize("api", OPERATORS)
def test_each_call_as_msprobe_records_it_replays_and_its_wrong_twin_disagrees(calls, api: str) -> None:
    token = next(iter(calls.tokens))
    right = replay_side(calls, token, f"NPU.{api}.0.forward", Registry(), "test")
    wrong = replay_side(calls, token, f"NPU.{api}.1.forward", Registry(), "test")
    assert right.verdict == "consistent", right.reason
    assert wrong.verdict == "disagrees", wrong.reason
