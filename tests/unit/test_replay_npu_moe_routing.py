"""torch_npu's MoE dispatch replayed (replay/npu_moe_routing.py), against op-plugin's doc examples
and formulas written again here with plain loops (``torch_npu-npu_moe_init_routing.md``: ``expanded_x[i]
= x[sorted_row_idx[i] % NUM_ROWS]`` after a stable sort of the expert ids; ``_v2.md``: the ids within
``[start, end)`` expert by expert, each in table order, ``x[position // K]``, at most ``active_num``,
optionally quantised to int8). Rows past the routed ones are undefined: the dumped outputs below
hold garbage there, which the replay must leave out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tui_acc.dumps.torchfile.arrays import from_torch
from tui_acc.replay import npu_moe_routing
from tui_acc.replay.call import Call, Replayed, ReplayImpossible
from tui_acc.replay.dumped_call import Gathered
from tui_acc.replay.sampling import plan
from tui_acc.verdicts.replay_check import _judged

V1 = "NPU.npu_moe_init_routing.0.forward"
V2 = "NPU.npu_moe_init_routing_v2.0.forward"


def _call(name: str, positional: dict, keyword: dict, dumped: torch.Tensor, sample: bool = False) -> Call:
    def plain(v):
        return from_torch(v.contiguous()) if isinstance(v, torch.Tensor) else v

    shape = tuple(dumped.shape)
    return Call(
        name,
        "x",
        "msprobe",
        {i: plain(v) for i, v in positional.items()},
        {k: plain(v) for k, v in keyword.items()},
        output_dtype=str(dumped.dtype).removeprefix("torch."),
        output_shape=shape,
        precision=np.float64 if dumped.dtype in (torch.float32, torch.int8) else np.float32,
        sample=plan(shape, name) if sample else None,
    )


def _judge(call: Call, replayed: Replayed, dumped: torch.Tensor) -> str:
    gathered = Gathered(call, from_torch(dumped.contiguous()), "output.0")
    return _judged("test", call.name, "x", gathered, replayed, "built-in").verdict


def _swapped(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    out = t.clone()
    out[[a, b]] = t[[b, a]]
    return out


def test_v1_the_docs_example_gathers_rows_in_the_stable_order_of_the_expert_ids() -> None:
    x = torch.tensor([[0.1] * 4, [0.2] * 4, [0.3] * 4], dtype=torch.float32)
    row_idx = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32)
    expert_idx = torch.tensor([[1, 2], [0, 1], [0, 2]], dtype=torch.int32)
    # by hand: ids 1,2,0,1,0,2 sorted stably take table positions 2,4,0,3,1,5; row_idx there 1,2,0,4,3,5;
    # modulo the 3 rows: tokens 1,2,0,1,0,2
    expected = x[[1, 2, 0, 1, 0, 2]]
    call = _call(V1, {0: x, 1: row_idx, 2: expert_idx, 3: 3}, {}, expected)
    replayed = npu_moe_routing.npu_moe_init_routing(call)
    assert _judge(call, replayed, expected) == "consistent"
    assert _judge(call, replayed, _swapped(expected, 0, 1)) == "disagrees"
    wrong = expert_idx.clone()
    wrong[0, 0] = 0  # token 0 sent to expert 0 instead of 1: another order
    other = _call(V1, {0: x, 1: row_idx, 2: wrong, 3: 3}, {}, expected)
    assert _judge(other, npu_moe_routing.npu_moe_init_routing(other), expected) == "disagrees"


def _v1(x, row_idx, expert_idx, active_num):
    """The doc's formula with a plain sort of (id, table position) pairs."""
    n, k = expert_idx.shape
    ids, rows = expert_idx.reshape(-1).tolist(), row_idx.reshape(-1).tolist()
    ranked = sorted(range(n * k), key=lambda p: (ids[p], p))
    return x[[rows[p] % n for p in ranked][: min(active_num, n) * k]]


def test_v1_keeps_the_first_active_num_tokens_worth_of_rows() -> None:
    rng = np.random.default_rng(3)
    n, k, h = 10, 2, 16
    x = torch.from_numpy(rng.uniform(-1, 1, (n, h))).to(torch.bfloat16)
    row_idx = torch.arange(n * k, dtype=torch.int32).reshape(k, n).T  # the doc's row_idx
    expert_idx = torch.from_numpy(rng.integers(0, 6, (n, k))).to(torch.int32)
    expected = _v1(x, row_idx, expert_idx, 6)
    assert expected.shape == (12, h)
    keyword = {"row_idx": row_idx, "expert_idx": expert_idx, "active_num": 6}
    call = _call(V1, {0: x}, keyword, expected)
    replayed = npu_moe_routing.npu_moe_init_routing(call)
    assert _judge(call, replayed, expected) == "consistent"
    assert _judge(call, replayed, _v1(x, row_idx, expert_idx.flip(0), 6)) == "disagrees"
    too_many = _call(V1, {0: x}, keyword, _v1(x, row_idx, expert_idx, 7))
    with pytest.raises(ReplayImpossible, match="the doc's has min"):
        npu_moe_routing.npu_moe_init_routing(too_many)


def _v2_sources(expert_idx, start, end, active_num):
    """The tokens of the expanded rows: expert by expert within [start, end), each expert's entries in
    table order (a stable sort), at most active_num of them (-1 / 0: all)."""
    k = expert_idx.shape[1]
    flat = expert_idx.reshape(-1).tolist()
    sources = [p // k for e in range(start, end) for p, i in enumerate(flat) if i == e]
    return sources if active_num <= 0 else sources[:active_num]


def _dumped(x: torch.Tensor, sources: list[int], total: int) -> torch.Tensor:
    """The kernel's output: the routed rows, then undefined rows (garbage)."""
    garbage = torch.full((total - len(sources), x.shape[1]), 1e4).to(x.dtype)
    return torch.cat([x[sources], garbage])


@pytest.mark.parametrize(
    ("active_num", "keyword"),
    [
        (-1, {"active_expert_range": [2, 6], "expert_num": 8}),
        (0, {"expert_num": 8, "row_idx_type": 1}),  # the range defaults to [0, expert_num)
        (5, {"active_expert_range": [0, 8], "expert_num": 8}),
        (40, {"active_expert_range": [3, 8], "expert_num": 8, "expert_capacity": 4}),  # capacity unread
    ],
)
def test_v2_emits_the_rows_of_the_active_experts_in_order(active_num: int, keyword: dict) -> None:
    rng = np.random.default_rng(5)
    n, k, h = 12, 3, 8
    x = torch.from_numpy(rng.standard_normal((n, h))).to(torch.float16)
    expert_idx = torch.from_numpy(rng.integers(0, 8, (n, k))).to(torch.int32)
    start, end = keyword.get("active_expert_range", [0, 8])
    sources = _v2_sources(expert_idx, start, end, active_num)
    total = n * k if active_num <= 0 else min(active_num, n * k)
    dumped = _dumped(x, sources, total)
    call = _call(V2, {0: x, 1: expert_idx}, {"active_num": active_num, **keyword}, dumped)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, dumped) == "consistent"
    if len(sources) < total:
        assert any("undefined (doc), left out" in note for note in replayed.notes)
    first = sources[0]
    other = next(i for i, s in enumerate(sources) if x[s].ne(x[first]).any())
    assert _judge(call, replayed, _swapped(dumped, 0, other)) == "disagrees"
    if start > 0:  # every expert's rows emitted, the inactive ones too: other rows
        everything = _dumped(x, _v2_sources(expert_idx, 0, 8, active_num)[:total], total)
        assert _judge(call, replayed, everything) == "disagrees"


def test_v2_a_wrong_expert_id_moves_rows_and_disagrees() -> None:
    rng = np.random.default_rng(8)
    n, k, h = 8, 2, 8
    x = torch.from_numpy(rng.standard_normal((n, h))).to(torch.float32)
    expert_idx = torch.tensor(
        [[0, 1], [2, 3], [1, 2], [3, 0], [0, 2], [1, 3], [2, 0], [3, 1]], dtype=torch.int32
    )
    dumped = _dumped(x, _v2_sources(expert_idx, 0, 4, -1), n * k)
    call = _call(V2, {0: x, 1: expert_idx}, {"expert_num": 4}, dumped)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, dumped) == "consistent"
    wrong = expert_idx.clone()
    wrong[0, 0] = 3  # token 0's first route to expert 3, not 0
    assert _judge(call, replayed, _dumped(x, _v2_sources(wrong, 0, 4, -1), n * k)) == "disagrees"


def test_v2_the_docs_example_shape_is_compared_on_a_sample_of_its_defined_rows() -> None:
    # the doc's call (h 613, k 475, expert_num 226, range [23, 35], active_num 475) with 3 tokens
    rng = np.random.default_rng(9)
    n, k, h = 3, 475, 613
    x = torch.from_numpy(rng.standard_normal((n, h))).to(torch.float32)
    expert_idx = torch.from_numpy(rng.integers(0, 226, (n, k))).to(torch.int32)
    sources = _v2_sources(expert_idx, 23, 35, 475)
    dumped = _dumped(x, sources, 475)
    keyword = {
        "active_num": 475,
        "expert_num": 226,
        "active_expert_range": [23, 35],
        "expert_tokens_num_type": 1,
    }
    keyword |= {"expert_tokens_num_flag": True, "scale": torch.ones(n), "row_idx_type": 0}
    call = _call(V2, {0: x, 1: expert_idx}, keyword, dumped, sample=True)
    assert call.sample is not None
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert replayed.rows is not None and replayed.rows.max() < len(sources)
    assert _judge(call, replayed, dumped) == "consistent"
    a = int(replayed.rows[0])
    b = next(int(r) for r in replayed.rows if sources[r] != sources[a])
    assert _judge(call, replayed, _swapped(dumped, a, b)) == "disagrees"
    scatter = _call(V2, {0: x, 1: expert_idx}, {**keyword, "row_idx_type": 1}, dumped, sample=True)
    assert np.array_equal(npu_moe_routing.npu_moe_init_routing_v2(scatter).values, replayed.values)


def _routing_inputs(seed: int, dtype: torch.dtype):
    rng = np.random.default_rng(seed)
    n, k, h = 16, 4, 32
    x = torch.from_numpy(rng.uniform(-1, 1, (n, h))).to(dtype)
    expert_idx = torch.from_numpy(rng.integers(0, 8, (n, k))).to(torch.int32)
    return x, expert_idx, n * k


def _garbage_int8(routed: torch.Tensor, total: int) -> torch.Tensor:
    return torch.cat([routed, torch.full((total - routed.shape[0], routed.shape[1]), 99, dtype=torch.int8)])


def test_v2_static_quantisation_rounds_x_times_scale_plus_offset() -> None:
    x, expert_idx, total = _routing_inputs(12, torch.bfloat16)
    scale, offset = torch.tensor([90.0]), torch.tensor([3.0])
    sources = _v2_sources(expert_idx, 2, 7, -1)
    exact = (x[sources].double() * 90.0 + 3.0).round().clamp(-128, 127).to(torch.int8)
    # the doc's CPU reference: in float16, rint, clipped
    in_half = (x[sources].half() * scale.half()[0] + offset.half()[0]).double().round().clamp(-128, 127)
    keyword = {
        "scale": scale,
        "offset": offset,
        "quant_mode": 0,
        "active_expert_range": [2, 7],
        "expert_num": 8,
    }
    call = _call(V2, {0: x, 1: expert_idx}, keyword, _garbage_int8(exact, total))
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, _garbage_int8(exact, total)) == "consistent"
    assert _judge(call, replayed, _garbage_int8(in_half.to(torch.int8), total)) == "consistent"
    other = next(i for i, s in enumerate(sources) if s != sources[0])
    assert _judge(call, replayed, _garbage_int8(_swapped(exact, 0, other), total)) == "disagrees"
    for missing in ("offset", "scale"):
        lacking = _call(V2, {0: x, 1: expert_idx}, {**keyword, missing: None}, _garbage_int8(exact, total))
        with pytest.raises(ReplayImpossible, match="requires both"):
            npu_moe_routing.npu_moe_init_routing_v2(lacking)


def _dynamic(rows: torch.Tensor, smooth: torch.Tensor | None) -> torch.Tensor:
    """The doc's dynamic quantisation: per row, times its smoothing row, scaled to 127 at its largest."""
    values = rows.double() if smooth is None else rows.double() * smooth.double()
    scale = values.abs().amax(dim=1, keepdim=True) / 127
    return (values / scale).round().to(torch.int8)


@pytest.mark.parametrize("smoothing", ["per expert", "one row", "none"])
def test_v2_dynamic_quantisation_smooths_each_row_by_its_expert_then_scales_to_127(smoothing: str) -> None:
    x, expert_idx, total = _routing_inputs(13, torch.bfloat16)
    start, end = 1, 6
    flat = expert_idx.reshape(-1).tolist()
    k = expert_idx.shape[1]
    positions = [p for e in range(start, end) for p, i in enumerate(flat) if i == e]
    sources = [p // k for p in positions]
    experts = [flat[p] - start for p in positions]
    rng = np.random.default_rng(14)
    table = torch.from_numpy(rng.uniform(0.5, 1.5, (end - start, x.shape[1]))).float()
    smooth = {"per expert": table, "one row": table[:1], "none": None}[smoothing]
    per_row = None if smooth is None else (table[experts] if smoothing == "per expert" else smooth)
    expected = _garbage_int8(_dynamic(x[sources], per_row), total)
    keyword = {"quant_mode": 1, "active_expert_range": [start, end], "expert_num": 8, "scale": smooth}
    call = _call(V2, {0: x, 1: expert_idx}, keyword, expected)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, expected) == "consistent"
    if smoothing == "per expert":  # each row smoothed by the next expert's row: other values
        shifted = table[[(e + 1) % (end - start) for e in experts]]
        assert _judge(call, replayed, _garbage_int8(_dynamic(x[sources], shifted), total)) == "disagrees"
    other = next(i for i, s in enumerate(sources) if s != sources[0])
    assert _judge(call, replayed, _swapped(expected, 0, other)) == "disagrees"


def test_v2_an_all_zero_row_has_no_dynamic_quantisation_and_is_left_out() -> None:
    x, expert_idx, _ = _routing_inputs(15, torch.float32)
    x[3] = 0
    sources = _v2_sources(expert_idx, 0, 8, -1)
    routed = torch.cat(
        [_dynamic(x[s : s + 1], None) if s != 3 else torch.zeros(1, 32, dtype=torch.int8) for s in sources]
    )
    call = _call(V2, {0: x, 1: expert_idx}, {"quant_mode": 1, "expert_num": 8}, routed)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert any("all zero" in note for note in replayed.notes)
    assert _judge(call, replayed, routed) == "consistent"


@pytest.mark.parametrize(
    ("keyword", "message"),
    [
        ({"drop_pad_mode": 1, "expert_capacity": 4, "expert_num": 8}, "drop_pad_mode 1"),
        ({"quant_mode": 3, "expert_num": 8}, r"quant_mode 3 \(MXFP8 float8_e4m3fn\)"),
        ({"quant_mode": 10, "expert_num": 8}, "not one the doc defines"),
        ({"row_idx_type": 2, "expert_num": 8}, "row_idx_type 2"),
        ({}, "expert_num not recorded"),
        ({"active_expert_range": [5, 2]}, "not \\[start, end\\)"),
        ({"active_num": -2, "expert_num": 8}, "active_num -2"),
        ({"active_expert_range": [8, 12], "expert_num": 12}, "no expert id within"),
        ({"quant_mode": 1, "expert_num": 8}, "a float16 expanded_x from a float16 x: quant_mode 1"),
    ],
)
def test_v2_refuses_what_it_does_not_model_by_name(keyword: dict, message: str) -> None:
    x, expert_idx, total = _routing_inputs(16, torch.float16)
    call = _call(V2, {0: x, 1: expert_idx}, keyword, torch.zeros(total, 32, dtype=torch.float16))
    with pytest.raises(ReplayImpossible, match=message):
        npu_moe_routing.npu_moe_init_routing_v2(call)


def test_v2_an_int8_x_is_gathered_as_it_is_but_not_quantised() -> None:
    x, expert_idx, total = _routing_inputs(17, torch.float32)
    x8 = (x * 100).to(torch.int8)
    dumped = _garbage_int8(x8[_v2_sources(expert_idx, 0, 4, -1)], total)
    call = _call(V2, {0: x8, 1: expert_idx}, {"active_expert_range": [0, 4]}, dumped)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, dumped) == "consistent"
    off_by_one = dumped.clone()
    off_by_one[0, 0] += 1
    assert _judge(call, replayed, off_by_one) == "disagrees"  # a copy is exact
    quantised = _call(V2, {0: x8, 1: expert_idx}, {"active_expert_range": [0, 4], "quant_mode": 1}, dumped)
    with pytest.raises(ReplayImpossible, match="int8 x"):
        npu_moe_routing.npu_moe_init_routing_v2(quantised)


def test_one_row_from_the_wrong_token_is_caught_a_copy_allows_no_rounding() -> None:
    # tokens whose hidden states are alike (a shared direction, 2 % apart): a row gathered from the
    # wrong token moves the output far less than one bf16 rounding's tolerance, yet a gather copies,
    # and any element off is a row taken from the wrong place
    tokens, k, hidden, experts = 1024, 8, 16, 64
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(hidden, generator=gen) + 0.02 * torch.randn(tokens, hidden, generator=gen)).to(
        torch.bfloat16
    )
    expert_idx = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)]).to(
        torch.int32
    )
    order = sorted(range(tokens * k), key=lambda i: (int(expert_idx.reshape(-1)[i]), i))  # stable, by hand
    expected = x[[i // k for i in order]]
    keyword = {"active_num": tokens * k, "expert_num": experts}
    call = _call(V2, {0: x, 1: expert_idx}, keyword, expected)
    replayed = npu_moe_routing.npu_moe_init_routing_v2(call)
    assert _judge(call, replayed, expected) == "consistent"
    rows = [i for i in range(1, len(order)) if order[i] // k != order[0] // k]
    assert _judge(call, replayed, _swapped(expected, 0, rows[0])) == "disagrees"
