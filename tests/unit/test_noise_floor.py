"""The noise floor (``--baseline``): TEST judged against what a clean run at its dtype makes of GOLDEN.

The triple is the demo's: golden float32, test bfloat16 rounding to nearest with a stale tile in
layer 2's down_proj at token 3, baseline bfloat16 rounding toward zero without the fault. Every
number the verdicts rest on is the demo's, bit-identical on every CPU; the margins below (noise
ratios of about 0.5 before the fault against a factor of 3, about 40 at it) come from bf16's
rounding, not from a CPU's summation order.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tui_acc.cli.main import main
from tui_acc.config import ConfigError, load_config
from tui_acc.demo import FAULT_MODULE, FAULT_TOKEN
from tui_acc.dumps import DumpError
from tui_acc.reports.output import EXIT_FAIL
from tui_acc.session import CompareOptions, check_comparable, open_comparison
from tui_acc.tolerances.noise import judged, noise_fields
from tui_acc.tolerances.thresholds import Thresholds

# bf16's rounding noise fails every operator under this bound: without a baseline the "first
# failing operator" is wherever that noise happens to be largest, long before the fault
STRICT = Thresholds().with_bounds(ops={"cosine": 0.99999})


def test_a_strict_bound_fails_rounding_noise_that_the_error_model_does_not_blame(demo_pair) -> None:
    """Under so strict a bound bf16's own noise fails operators before the fault: the thresholds
    alone would blame one of them (the premise of the next test); the error model names the fault."""
    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(thresholds=STRICT, cache=False))
    rows = cmp.verdicts.token(FAULT_TOKEN).rows
    order = [row["golden_node"] for row in rows]
    before = [row for row in rows[: order.index(FAULT_MODULE)] if not _encloses(row)]
    assert any(row["outputs_passed"] is False for row in before)
    assert all(row["label"] != "local" for row in before)
    suspect = cmp.verdicts.culprit(FAULT_TOKEN)
    assert suspect is not None and suspect["golden_node"] == FAULT_MODULE


def test_the_noise_floor_passes_everything_before_the_fault_and_fails_the_fault(
    demo_pair, demo_baseline
) -> None:
    cmp = open_comparison(
        demo_pair.golden,
        demo_pair.test,
        CompareOptions(thresholds=STRICT, cache=False, baseline=demo_baseline),
    )
    check_comparable(cmp)
    engine = cmp.engine
    assert engine.first_failing_token() == FAULT_TOKEN
    for token in range(FAULT_TOKEN):
        rows = cmp.verdicts.token(token).rows
        assert rows and all(row["outputs_passed"] for row in rows), token
    rows = cmp.verdicts.token(FAULT_TOKEN).rows
    order = [row["golden_node"] for row in rows]
    # what runs before the fault (its enclosing modules end after it: not "before")
    before = [row for row in rows[: order.index(FAULT_MODULE)] if not _encloses(row)]
    assert before and all(row["outputs_passed"] for row in before)
    suspect = cmp.verdicts.culprit(FAULT_TOKEN)
    assert suspect is not None and suspect["golden_node"] == FAULT_MODULE
    assert suspect["noise_ratio"] > 3 * 3  # far beyond the factor, not at its edge
    noisy = [row["noise_ratio"] for row in before if row["noise_ratio"] is not None]
    assert noisy and max(noisy) < 1.5  # the test's rounding is no worse than the baseline's


def _encloses(row: dict) -> bool:
    return FAULT_MODULE.startswith(row["golden_node"] + ".")


def test_report_json_carries_the_noise_floor(
    demo_pair, demo_baseline, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["report", str(demo_pair.golden), str(demo_pair.test), "--baseline", str(demo_baseline)]
    assert main([*argv, "--json", "--op-cos", "0.99999", "--no-cache"]) == EXIT_FAIL
    result = json.loads(capsys.readouterr().out)
    assert result["first_failing_token"] == FAULT_TOKEN
    op = result["first_failing_op"]
    assert (op["token"], op["golden"]) == (FAULT_TOKEN, FAULT_MODULE)
    assert op["noise_ratio"] > 1 and 0 < op["baseline_rmse"] < op["rmse"]
    assert result["baseline"]["path"] == str(demo_baseline)
    assert {row["golden"] for row in result["operators"]} >= {FAULT_MODULE}
    for row in result["operators"]:
        assert {"noise_ratio", "baseline_cosine", "baseline_rel_euclidean", "baseline_rmse"} <= set(row)
    assert all(t["noise_ratio"] is not None for t in result["tokens"])
    assert result["thresholds"]["noise"]["factor"]["bfloat16"] == 3.0


def test_report_text_names_the_baseline_and_the_ratio(demo_pair, demo_baseline, capsys) -> None:
    main(["report", str(demo_pair.golden), str(demo_pair.test), "--baseline", str(demo_baseline)])
    out = capsys.readouterr().out
    assert f"noise   {demo_baseline}" in out
    assert "x the baseline's error" in out.split("first failing op")[1].splitlines()[0]


def test_verdicts_from_the_cache_are_judged_against_this_baseline(demo_pair, demo_baseline) -> None:
    """Rows on disk hold no noise figures (they depend on the baseline); read back, they are judged
    again, and a test row whose baseline row is not known yet is not known either."""
    plain = open_comparison(demo_pair.golden, demo_pair.test)
    plain.verdicts.token(FAULT_TOKEN)
    plain.engine.flush()
    pair = next(
        p
        for n in plain.pairing.node_pairs(FAULT_TOKEN)
        if n.golden == FAULT_MODULE
        for p in n.tensors
        if p.role == "output"
    )
    assert "noise_ratio" not in plain.engine.cached_row(pair)  # type: ignore[operator]

    with_noise = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(baseline=demo_baseline))
    engine = with_noise.engine
    assert engine.cached_row(pair) is None  # the test row is on disk, its baseline row is not
    row = engine.tensor_row(pair)
    assert engine.computed == 0 and engine.from_cache == 1  # the test row was read, not recomputed
    assert row["noise_ratio"] is not None and row["noise_ratio"] > 3 and row["passed"] is False


def _row(**values: object) -> dict[str, object]:
    return {"golden_dtype": "float32", "test_dtype": "bfloat16", "rel_euclidean": 0.01, **values}


def test_the_rule_factor_epsilon_and_what_noise_cannot_excuse() -> None:
    thresholds = Thresholds()
    factor, epsilon = thresholds.for_noise("float32", "bfloat16")
    assert (factor, epsilon) == (3.0, 2.0**-8)
    base = _row(rel_euclidean=0.01)
    assert judged(_row(rel_euclidean=3 * 0.01 + epsilon), base, thresholds) is True
    assert judged(_row(rel_euclidean=3 * 0.01 + 2 * epsilon), base, thresholds) is False
    # one rounding of the test's dtype passes where the baseline reproduces the golden exactly
    assert judged(_row(rel_euclidean=epsilon / 2), _row(rel_euclidean=0.0), thresholds) is True
    assert noise_fields(_row(rel_euclidean=0.001), _row(rel_euclidean=0.0))["noise_ratio"] == math.inf
    # NaN the golden lacks and unreadable files fail whatever the baseline; integers stay exact
    assert judged(_row(test_nan=1, golden_nan=0), base, thresholds) is False
    assert judged(_row(error="damaged"), base, thresholds) is False
    assert judged(_row(golden_dtype="int64", test_dtype="int64"), base, thresholds) is None
    # no baseline tensor, or an unreadable one: the fixed thresholds judge
    assert judged(_row(), None, thresholds) is None
    assert judged(_row(), _row(error="gone"), thresholds) is None
    # statistics-only rows: the norms' relative difference is the error
    stats = {"stats_only": True, "golden_dtype": "float32", "test_dtype": "bfloat16"}
    assert judged({**stats, "norm_rel_diff": 0.02}, {**stats, "norm_rel_diff": -0.01}, thresholds) is True
    assert judged({**stats, "norm_rel_diff": 0.2}, {**stats, "norm_rel_diff": -0.01}, thresholds) is False


def test_config_sets_factor_and_epsilon(tmp_path: Path) -> None:
    config = tmp_path / "tui-acc.toml"
    config.write_text("[thresholds.noise]\nfactor = 5\n[thresholds.noise.float32]\nepsilon = 1e-6\n")
    thresholds = load_config(config, cwd=tmp_path).thresholds
    assert thresholds.for_noise("float32", "bfloat16") == (5.0, 2.0**-8)
    assert thresholds.for_noise("float32", "float32") == (5.0, 1e-6)
    config.write_text("[thresholds.noise]\nfactr = 5\n")
    with pytest.raises(ConfigError, match=r"tui-acc.toml: \[thresholds.noise\]: unknown key 'factr'"):
        load_config(config, cwd=tmp_path)
    config.write_text("[thresholds.noise]\nfactor = -1\n")
    with pytest.raises(ConfigError, match="must be a finite number >= 0, not -1"):
        load_config(config, cwd=tmp_path)


def test_a_baseline_that_is_one_of_the_runs_is_refused(demo_pair, capsys) -> None:
    cmp = open_comparison(demo_pair.golden, demo_pair.test, CompareOptions(baseline=demo_pair.test))
    with pytest.raises(DumpError, match="is the test dump"):
        check_comparable(cmp)
    code = main(["report", str(demo_pair.golden), str(demo_pair.test), "--baseline", str(demo_pair.golden)])
    assert code == 2 and "is the golden dump" in capsys.readouterr().err
    assert main(["report", str(demo_pair.golden), str(demo_pair.test), "--baseline", "/nonexistent"]) == 2
    assert "/nonexistent: no such file or directory" in capsys.readouterr().err
