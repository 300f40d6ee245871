"""A construct.json whose parents form a cycle is forged or corrupted: no edge of it, nor any around
it, can be told right. Its calls are shown flat, as where the file is missing, and each side's calls
paired in the order they completed (dump.json's order, which no call tree changes), so the fault is
still the culprit; where the other side's call tree is intact, the damaged side's calls nest as its
calls of the same names do, and the fault is the one local operator.

Cutting only the cycle's edges had left a module emptied of the calls it moved (the decoder layer
without its MLP read as the error's source; the model's forward, its layers moved away, was named
the culprit) and a pass's forward hung under a cycle member counted in that member's pass (the fault
lost with its token).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.test_bad_input import _errors, _msprobe_copy, _report

MLP = "Module.model.layers.1.mlp.LlamaMLP.forward.2"
DOWN_PROJ = "Module.model.layers.1.mlp.down_proj.Linear.forward.2"


def _every_module_under_the_one_before(parents: dict) -> None:
    modules = [name for name in parents if name.startswith("Module.")]
    parents.update(zip(modules, [modules[-1], *modules[:-1]], strict=True))


def _a_pass_hung_under_a_cycle_of_holders(parents: dict) -> None:
    """Two modules no record names (construct.json lists holders too) in a cycle, the model's forward
    of pass 2 given one of them as its parent: by the holder's name, pass 0."""
    first, second = "Module.x.X.forward.0", "Module.y.Y.forward.0"
    parents[first], parents[second] = second, first
    parents["Module.model.LlamaModel.forward.2"] = first


def _mlp_under_its_own_down_proj(parents: dict) -> None:
    parents[MLP] = DOWN_PROJ


CYCLES: dict[str, tuple[tuple[str, ...], Callable[[dict], None]]] = {
    "golden: every module under the one before": (("golden",), _every_module_under_the_one_before),
    "test: a pass hung under a cycle of holders": (("test",), _a_pass_hung_under_a_cycle_of_holders),
    "both: the MLP under its own down_proj": (("golden", "test"), _mlp_under_its_own_down_proj),
}


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_a_construct_json_cycle_shows_calls_flat_and_the_fault_is_the_one_local_operator(
    model_case, tmp_path: Path, capsys, case: str
) -> None:
    sides, damage = CYCLES[case]
    golden, test, _ = _msprobe_copy(model_case, "llama-msprobe-mix", tmp_path)
    damaged = []
    for side in sides:
        (rank,) = (golden if side == "golden" else test).glob("step0/*")
        construct = rank / "construct.json"
        parents = json.loads(construct.read_text())
        damage(parents)
        construct.write_text(json.dumps(parents))
        damaged.append(construct)
    report = _report(golden, test, capsys)
    for construct in damaged:
        said = [e for e in _errors(report) if e.startswith(f"{construct}: ")]
        assert len(said) == 1 and "calls are shown flat" in said[0], said
    key = json.loads((model_case("llama-msprobe-mix") / "case.json").read_text())
    assert [row["token"] for row in report["tokens"]] == [0, 1, 2, 3]
    assert report["first_failing_token"] == key["fault_token"] == 2
    op = report["first_failing_op"]
    assert op is not None and op["golden"] == key["fault_record"] and op["label"] == "local", op
    if len(sides) == 1:  # the other side's call tree nests the calls of one name alike: modules contain
        assert report["counts"]["local"] == 1  # (with neither, a module record is judged on its own)
