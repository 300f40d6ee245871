"""The error model on the sensitivity sweep: real msprobe dumps of a bf16 SDPA port against its fp32
eager golden, with one fault of known strength (tests/data/sensitivity/README.md).

A fault adding 2 % or more to one module's output at token 2, a pure scale of 1.02 included (its
cosine is 0.99999: no cosine threshold sees it), is the one operator labelled local in the whole dump,
without a baseline run. The systematic bugs are found at every token: the per-tensor int8 weight by
its weight, the wrong rope theta where the rotary embedding makes its angles. The clean port is
blamed for nothing. Expectations come from the answer key (cases.json), never from digits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import sensitivity_key
from tui_acc import CompareOptions, open_comparison

KEY = sensitivity_key()
# the faults the verdicts must localise: every site, 2 % and 5 % noise and both scales
STRONG = sorted(
    (level, run)
    for level, runs in KEY.items()
    for run, case in runs.items()
    if case["kind"] in ("noise", "scale") and (case["noise"] >= 0.02 or case["scale"] != 1.0)
)


def _local(case, since: int = 0) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    """(token, operator, rule) of each operator labelled local, at the tokens from ``since`` on."""
    comparison = open_comparison(case.golden, case.test, CompareOptions(cache=False))
    return [
        (row["token"], row["golden_node"], row["rule"])
        for token in comparison.pairing.tokens
        if token >= since
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]


def _tensor_files(test: Path, before: int) -> dict[str, bytes]:
    """The bytes of each tensor file of the test dump's forward calls before token ``before``."""
    (data,) = test.glob("step0/*/dump_tensor_data")
    calls = tuple(f".forward.{token}." for token in range(before))
    return {f.name: f.read_bytes() for f in sorted(data.iterdir()) if any(c in f.name for c in calls)}


def test_the_sweep_is_what_the_tests_expect():
    assert len(STRONG) == 2 * 4 * 4  # 2 levels, 4 sites, noise 5 % and 2 %, scale 1.05 and 1.02
    assert {case["site_kind"] for runs in KEY.values() for case in runs.values() if "site_kind" in case} >= {
        "linear",
        "norm",
        "attention",
        "activation",
    }


@pytest.mark.parametrize(("level", "run"), STRONG)
def test_a_fault_of_2_percent_is_the_one_local_operator(sensitivity_case, level: str, run: str) -> None:
    """The tokens before the fault's are the clean run's, byte for byte (the clean port's test judges
    them): only the fault's token and those after it are judged here."""
    case, clean = sensitivity_case(level, run), sensitivity_case(level, "clean")
    token = case.info["token"]
    before = _tensor_files(case.test, token)
    assert len(before) > 100 and before == _tensor_files(clean.test, token)
    expected = case.info["first_difference"]["record"]
    assert _local(case, since=token) == [(token, expected, "replay")]


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_the_clean_port_is_blamed_for_nothing(sensitivity_case, level: str) -> None:
    assert _local(sensitivity_case(level, "clean")) == []


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_correct_operators_sit_well_inside_the_rounding_bound(sensitivity_case, level: str) -> None:
    """The rounding model is not loose by luck: every operator of the clean port replayed at its
    first two tokens (prefill and a decode step) is under 0.6 of its bound, the margin's worth of
    room kept (scripts/calibrate_verdicts.py shows the ratios by kind)."""
    case = sensitivity_case(level, "clean")
    comparison = open_comparison(case.golden, case.test, CompareOptions(cache=False))
    checks = comparison.verdicts.judging.checks
    assert checks is not None
    seen = 0
    for token in comparison.pairing.tokens[:2]:
        for node in comparison.pairing.node_pairs(token):
            replay = checks.replay(node)
            side = replay.test if replay is not None else None
            if side is None or side.verdict == "impossible":
                continue
            assert side.local_error is not None and side.tolerance is not None
            assert side.local_error <= 0.6 * side.tolerance, (node.golden, side.local_error, side.tolerance)
            seen += 1
    assert seen > 50  # linears, norms, activations, and at mix the calls inside them


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_per_tensor_int8_weight_is_found_by_its_weight_at_every_token(sensitivity_case, level: str) -> None:
    case = sensitivity_case(level, "bug-int8-weight")
    found = _local(case)
    assert [token for token, _, _ in found] == [0, 1, 2, 3]
    assert {rule for _, _, rule in found} == {"weights"}
    if level == "L0":  # the module itself, with its parameters
        assert all(
            name.startswith("Module.model.layers.2.mlp.gate_proj.Linear.forward.") for _, name, _ in found
        )
    else:  # the F.linear call inside it, whose argument is the weight
        comparison = open_comparison(case.golden, case.test, CompareOptions(cache=False))
        tree = comparison.golden.tree
        parents = {tree.nodes[name].parent for _, name, _ in found}
        assert all(p is not None and p.startswith("Module.model.layers.2.mlp.gate_proj.") for p in parents)


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_a_wrong_rope_theta_is_found_where_the_angles_are_made(sensitivity_case, level: str) -> None:
    found = _local(sensitivity_case(level, "bug-rope-theta"))
    assert [token for token, _, _ in found] == [0, 1, 2, 3]
    assert all(
        name.startswith("Module.model.rotary_emb.LlamaRotaryEmbedding.forward.") for _, name, _ in found
    )
