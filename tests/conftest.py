"""Shared fixtures: the reference dumps (compact and full), and a seeded demo pair built at test time."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.archives import unpack as unpack_archive

REPO = Path(__file__).resolve().parents[1]
COMPACT_REFERENCE = REPO / "tests" / "data" / "reference"
MODEL_CASES = REPO / "tests" / "data" / "models"  # scripts/make_model_fixtures.py
FAMILY_CASES = REPO / "tests" / "data" / "families"  # scripts/make_family_fixtures.py
RANKS_CASES = REPO / "tests" / "data" / "ranks"  # scripts/make_ranks_fixtures.py
SENSITIVITY = REPO / "tests" / "data" / "sensitivity"  # scripts/make_sensitivity_fixtures.py
MSPROBE_CASES = REPO / "tests" / "data" / "msprobe"  # scripts/make_msprobe_pass_fixtures.py
NPU_CASES = REPO / "tests" / "data" / "npu"  # scripts/make_npu_fixtures.py
TP_CASES = REPO / "tests" / "data" / "tp"  # scripts/make_tp_msprobe_fixtures.py
TORCHAIR_CASES = REPO / "tests" / "data" / "torchair"  # scripts/make_torchair_fixtures.py


def sensitivity_key() -> dict[str, dict[str, dict]]:
    """The sensitivity sweep's answer key (tests/data/sensitivity/cases.json): level -> run -> key.

    Plain JSON beside the archive, so that tests can be parametrised by run without unpacking.
    """
    return json.loads((SENSITIVITY / "cases.json").read_text(encoding="utf-8"))


def full_reference_dir() -> Path | None:
    """The full reference set: ``$TUI_ACC_REFERENCE`` if set, else ``../shared/reference`` if present.

    An explicit ``TUI_ACC_REFERENCE`` is always returned, so that a wrong path fails loudly in the
    ``reference`` fixture instead of silently running the compact set alone.
    """
    override = os.environ.get("TUI_ACC_REFERENCE")
    if override:
        return Path(override)
    beside = REPO.parent / "shared" / "reference"
    return beside if (beside / "MANIFEST.md").is_file() else None


def reference_sets() -> dict[str, Path]:
    """Every reference set the ``reference`` fixture runs on, by test id.

    "compact" (tests/data/reference, a cut made by scripts/make_test_data.py) always; "full" where
    the real-tool reference dumps are available.
    """
    sets = {"compact": COMPACT_REFERENCE}
    full = full_reference_dir()
    if full is not None:
        sets["full"] = full
    return sets


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses ``reference`` once per available set (ids ``compact``, ``full``).

    Parametrising (rather than skipping) keeps a bare clone free of skips: it simply has one set.
    """
    if "reference" in metafunc.fixturenames:
        sets = reference_sets()
        metafunc.parametrize("reference", list(sets.values()), ids=list(sets), indirect=True, scope="session")


@pytest.fixture(scope="session")
def reference(request: pytest.FixtureRequest) -> Path:
    """One reference set (see ``reference_sets``); tests derive counts and tokens from its data."""
    path: Path = request.param
    if not (path / "MANIFEST.md").is_file():
        pytest.fail(f"reference dumps not found at {path} (check TUI_ACC_REFERENCE)")
    return path


def _unpacker(cases: Path, root: Path) -> Callable[[str], Path]:
    """``unpack(name)``: ``cases/name.tar.xz`` unpacked under ``root``, once."""

    def unpack(name: str) -> Path:
        target = root / name
        if not target.is_dir():
            unpack_archive(cases / f"{name}.tar.xz", root)
        return target

    return unpack


@pytest.fixture(scope="session")
def model_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``model_case(name)``: a real-tool dump pair of tests/data/models, unpacked once per session.

    The folder holds ``golden/``, ``test/`` and ``case.json`` (where the injected fault is).
    """
    return _unpacker(MODEL_CASES, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def msprobe_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``msprobe_case(name)``: a real msprobe dump pair of tests/data/msprobe, unpacked once per
    session (``golden/``, ``test/`` and ``case.json``: the model's config and where the fault is)."""
    return _unpacker(MSPROBE_CASES, tmp_path_factory.mktemp("msprobe"))


@pytest.fixture(scope="session")
def npu_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``npu_case(name)``: real msprobe dumps of a port on torch_npu's operators (tests/data/npu),
    unpacked once per session: ``golden/``, a test dump per case (``clean/``, one per fault) and
    ``case.json``."""
    return _unpacker(NPU_CASES, tmp_path_factory.mktemp("npu"))


@pytest.fixture(scope="session")
def tp_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tp_case(name)``: real msprobe dumps of a tensor- or expert-parallel run and its one-device
    golden (tests/data/tp), unpacked once per session: ``golden/``, a test per case (``clean/``,
    ``allreduce/``, ``column/``; ``expert/``: ``step0/rank*/``) and ``case.json``."""
    return _unpacker(TP_CASES, tmp_path_factory.mktemp("tp"))


@pytest.fixture(scope="session")
def torchair_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``torchair_case(name)``: TorchAir dumps of tests/data/torchair, unpacked once per session
    (``fx/``, ``ge-clean/``, ``ge-fault/`` and ``case.json``: where the fault is)."""
    return _unpacker(TORCHAIR_CASES, tmp_path_factory.mktemp("torchair"))


@pytest.fixture(scope="session")
def family_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``family_case(name)``: a real-tool dump triple of tests/data/families, unpacked once per session.

    The folder holds ``golden/``, ``test/`` (with the one bug), ``clean/`` (the test's run without
    it) and ``case.json`` (where the bug is, and what a correct tool labels local at each token).
    """
    return _unpacker(FAMILY_CASES, tmp_path_factory.mktemp("families"))


@pytest.fixture(scope="session")
def ranks_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``ranks_case(name)``: a real msprobe run across ranks of tests/data/ranks, unpacked once per
    session (``step0/rank*/`` and ``case.json``: where the injected fault is)."""
    return _unpacker(RANKS_CASES, tmp_path_factory.mktemp("ranks"))


class SensitivityCase(NamedTuple):
    """One run of the sensitivity sweep: the level's golden dump, the run's test dump, its case.json."""

    golden: Path
    test: Path
    info: dict


@pytest.fixture(scope="session")
def sensitivity_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], SensitivityCase]:
    """``sensitivity_case(level, run)``: a run of the sensitivity sweep (level ``L0`` or ``mix``; run
    ``clean``, ``{linear,norm,attention,activation}-{noise-5pct,...,scale-1.05}``, ``bug-int8-weight``,
    ``bug-rope-theta``: tests/data/sensitivity/README.md), the archive unpacked once per session."""
    unpack = _unpacker(SENSITIVITY, tmp_path_factory.mktemp("sensitivity"))

    def case(level: str, run: str) -> SensitivityCase:
        root = unpack("sweep") / level
        info = json.loads((root / run / "case.json").read_text(encoding="utf-8"))
        return SensitivityCase(root / "golden", root / run / "test", info)

    return case


@pytest.fixture(scope="session")
def ranks_demo(tmp_path_factory: pytest.TempPathFactory):
    """``tui-acc demo --ranks 2``'s tensor-parallel run, built once per test session."""
    from tui_acc.demo.tensor_parallel import make_ranks_demo

    return make_ranks_demo(tmp_path_factory.mktemp("demo-ranks") / "run", world=2)


@pytest.fixture(scope="session")
def demo_pair(tmp_path_factory: pytest.TempPathFactory):
    """The demo's golden/test dumps with the injected fault, built once per test session."""
    from tui_acc.demo import make_demo

    return make_demo(tmp_path_factory.mktemp("demo") / "pair", seed=0)


@pytest.fixture(scope="session")
def demo_baseline(demo_pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's model run clean in bfloat16, rounding toward zero (``tui-acc demo --baseline``),
    written beside a copy of the demo's manifest rather than into the shared demo folder."""
    import dataclasses
    import shutil

    from tui_acc.demo import MANIFEST, make_baseline

    out = tmp_path_factory.mktemp("demo-baseline")
    shutil.copy(demo_pair.out / MANIFEST, out / MANIFEST)
    return make_baseline(dataclasses.replace(demo_pair, out=out))


def device_dir(root: Path) -> Path:
    (found,) = root.glob("msit_dump_*/torch_tensors/*_*")
    return found


def local_operators(comparison) -> list[tuple[int, str, str]]:  # type: ignore[no-untyped-def]
    """(token, golden node, test node) of every operator the verdicts label local, at every token."""
    return [
        (token, row["golden_node"], row["test_node"])
        for token in comparison.pairing.tokens
        for row in comparison.verdicts.token(token).rows
        if row["label"] == "local"
    ]


def copy_without_weights(demo_pair, out: Path) -> tuple[Path, Path]:
    """The demo pair copied to ``out`` without its ``weights/``: what msit writes by default
    (``dump_weight=False``, docs/formats.md §1.4)."""
    for side in ("golden", "test"):
        copy = out / side
        shutil.copytree(getattr(demo_pair, side), copy)
        shutil.rmtree(device_dir(copy) / "weights")
    return out / "golden", out / "test"


@pytest.fixture
def damaged_copy(demo_pair, tmp_path: Path) -> tuple[Path, Path]:
    golden, test = tmp_path / "golden", tmp_path / "test"
    shutil.copytree(demo_pair.golden, golden)
    shutil.copytree(demo_pair.test, test)
    dev = device_dir(test)
    shutil.rmtree(dev / "7")  # a token only the golden has
    shutil.rmtree(dev / "1" / "root.model.layers.0.mlp.act_fn")  # a module missing at token 1
    (dev / "2" / "root.model.norm" / "output.pth").unlink()  # a tensor missing at token 2
    (dev / "2" / "root.model.norm" / "output_5.pth").write_bytes(b"")  # and one only the test has
    (dev / "0" / "root.model.layers.1.mlp.up_proj" / "output.pth").write_bytes(b"truncated")
    return golden, test


@pytest.fixture
def in_place_copy(demo_pair, tmp_path: Path) -> tuple[Path, Path]:
    """The demo pair as a hook dumps an in-place op: the faulty op's input saved after it ran."""
    sides = []
    for side in ("golden", "test"):
        copy = tmp_path / side
        shutil.copytree(getattr(demo_pair, side), copy)
        op = device_dir(copy) / str(demo_pair.fault_token) / demo_pair.fault_module
        shutil.copyfile(op / "output.pth", op / "input_0.pth")
        sides.append(copy)
    return sides[0], sides[1]


@pytest.fixture(scope="session")
def atb_pair(demo_pair, tmp_path_factory: pytest.TempPathFactory):
    """(golden torch dump, test ATB dump, test MindIE dump) from the demo's test run."""
    from tui_acc.demo.atb_export import export_atb

    out = tmp_path_factory.mktemp("atb")
    plain = export_atb(demo_pair.test, out / "plain")
    mindie = export_atb(demo_pair.test, out / "mindie", mindie=True)
    return demo_pair.golden, plain, mindie


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the user's row cache."""
    monkeypatch.setenv("TUI_ACC_CACHE_DIR", str(tmp_path_factory.mktemp("row-cache")))
