"""Real-tool dumps of other families, dump kinds and fault places, each localised to its one culprit.

tests/data/families holds dumps made by msprobe 26.2.0, msit 8.2.0 and SGLang's dumper (as
scripts/make_sglang_fixtures.py writes it) of random-weight models built from transformers configs
(scripts/make_family_fixtures.py): ``golden/`` in float32, ``test/`` in a lower precision with one
bug inside the model's computation, ``clean/`` the same lower-precision run without it.
``case.json`` names the operator a correct tool labels local at each token where the bug is;
every test reads the expectation from there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FAMILY_CASES
from tui_acc import CompareOptions, open_comparison

CASES = sorted(p.name.removesuffix(".tar.xz") for p in FAMILY_CASES.glob("*.tar.xz"))


def _case(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text(encoding="utf-8"))


def _locals(folder: Path, side: str) -> set[tuple[int, str]]:
    """Every (token, operator) labelled local, golden against ``side``, at every token."""
    comparison = open_comparison(folder / "golden", folder / side, CompareOptions(cache=False))
    return {
        (token, row["golden_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    }


def test_every_case_is_tested():
    assert len(CASES) == 18
    named = {"qwen3-msprobe-L0-kvcache", "qwen3-sglang-outputs", "gemma3-msprobe-L0-gelu"}
    assert named | {"olmo2-msprobe-L0-statistics"} <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_each_pair_loads_without_problems(family_case, name):
    """Golden against test and against clean: every token paired, no damaged file, one format, and
    the record case.json expects is in the test's dump (at its token, or set aside between tokens
    where the reader does so: that is a verdict's business, tested below)."""
    folder = family_case(name)
    case = _case(folder)
    for side in ("test", "clean"):
        comparison = open_comparison(folder / "golden", folder / side, CompareOptions(cache=False))
        assert comparison.pairing.tokens == list(range(case["new_tokens"])), side
        assert not comparison.golden.problems and not comparison.test.problems, side
        assert comparison.golden.format == comparison.test.format
        assert comparison.test.statistics_only is (case["task"] == "statistics")
        recorded = {n for nodes in comparison.test.tokens.values() for n in nodes}
        assert set(case["expected_local"].values()) <= recorded | set(comparison.test.between_tokens)


@pytest.mark.parametrize("name", CASES)
def test_the_culprit_alone_is_local(family_case, name):
    """With every token compared, exactly the expected operator is local at each token where the bug
    is, and nothing is local anywhere else."""
    folder = family_case(name)
    expected = {(int(token), node) for token, node in _case(folder)["expected_local"].items()}
    assert _locals(folder, "test") == expected


@pytest.mark.parametrize("name", CASES)
def test_the_clean_pair_labels_nothing_local(family_case, name):
    """The same lower-precision run without the bug: rounding alone, no operator's own error."""
    assert _locals(family_case(name), "clean") == set()


def test_the_report_follows_the_error_back_through_the_kv_cache(family_case, capsys):
    """A fault at the prefill's embedding fails no logits until token 3, where no operator adds error
    of its own: the report names the embedding at token 0, and says how the error got to token 3."""
    from tui_acc.cli.main import main

    folder = family_case("llama-msprobe-L0-embedding")
    main(["report", str(folder / "golden"), str(folder / "test"), "--json", "--no-cache"])
    report = json.loads(capsys.readouterr().out)
    assert report["first_failing_token"] == 3 and report["analysed_token"] == 0
    assert report["first_failing_op"]["golden"] == "Module.model.embed_tokens.Embedding.forward.0"
    assert "reaches token 3 through" in report["explanation"]
    assert report["operators_compared_at"] == [0, 3]


def test_a_routing_flip_is_said_and_all_tokens_names_the_later_fault(family_case, capsys):
    """bf16 rounding flips a router between near-equal scores at the prefill: the logits fail there
    with no operator to blame, and the report says the flip; with every token judged, the fault at
    token 2 is named."""
    from tui_acc.cli.main import main

    folder = family_case("qwen2moe-msprobe-L0-flip")
    main(["report", str(folder / "golden"), str(folder / "clean"), "--json", "--no-cache"])
    clean = json.loads(capsys.readouterr().out)
    assert clean["first_failing_token"] == 0 and clean["first_failing_op"] is None
    assert "kept other experts than the golden between near-equal scores" in clean["explanation"]
    main(["report", str(folder / "golden"), str(folder / "test"), "--json", "--no-cache", "--all-tokens"])
    test = json.loads(capsys.readouterr().out)
    assert test["first_failing_op"]["token"] == 2
    assert test["first_failing_op"]["golden"].endswith("shared_expert.down_proj.Linear.forward.2")
    assert "the first that does is at token 2" in test["explanation"]
