"""msit statistics dumps (dump_statistics_mode=1): compared by their statistics."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.rounding import EPS32, EPS64, norm_relative_bound
from tui_acc import open_comparison
from tui_acc.dumps import open_dump


def test_statistics_against_statistics(reference: Path) -> None:
    case = reference / "msit-torch-stats"
    cmp = open_comparison(case / "golden", case / "test")
    assert cmp.golden.format == cmp.test.format == "msit-stats"
    frame = cmp.engine.tensors_frame(2)
    assert frame["stats_only"].all() and frame["error"].null_count() == frame.height
    row = next(
        r for r in frame.iter_rows(named=True) if r["golden_node"] == "root.lm_head" and r["role"] == "output"
    )
    g, t = row["golden_norm"], row["test_norm"]
    assert row["norm_rel_diff"] == abs(t - g) / abs(g)
    assert cmp.engine.first_failing_token() is None


def test_statistics_read_from_csv_equal_those_computed_from_the_tensors(reference: Path) -> None:
    """msit-torch-stats/test and msit-torch-2layer/test are the same bf16 run, dumped two ways."""
    stats = reference / "msit-torch-stats" / "test"
    tensors = reference / "msit-torch-2layer" / "test"
    cmp = open_comparison(stats, tensors)
    # every token both dumps hold is compared (4 in the full set, where the tensor dump has 8)
    both = sorted(set(open_dump(stats).tokens) & set(open_dump(tensors).tokens))
    assert cmp.pairing.tokens == both and len(both) >= 2
    (device,) = tensors.glob("msit_dump_*/torch_tensors/*_*")
    for token in cmp.pairing.tokens:
        rows = cmp.engine.tensors_frame(token).iter_rows(named=True)
        compared = 0
        for row in rows:
            assert row["error"] is None, row
            assert row["max_diff"] == 0.0 and row["min_diff"] == 0.0  # extremes are exact in any precision
            if row["norm_rel_diff"] is not None:
                # msit's fp32 norm (printed exactly: repr of the fp32 value) against our float64 one
                n = row["numel"]
                assert row["norm_rel_diff"] <= norm_relative_bound(n, EPS32) + norm_relative_bound(n, EPS64)
            compared += 1
        # every tensor file met its statistics row (61 a token: 33 outputs, 28 inputs)
        assert compared == len(list((device / str(token)).rglob("*.pth"))) == 61, token
