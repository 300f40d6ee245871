"""The pairs scripts/verdict_margins.py judges: every fixture with a golden, each unpacked (or, for the
demo, made) in a temporary folder, with where its faults are (the culprit a correct tool labels
local at each faulty token). Clean runs have none.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from check_families import expected_of  # scripts/ is the script's own folder

from tui_acc.dumps.model import NodeTree

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
# the full reference set, as the tests find it (tests/conftest.py's full_reference_dir)
SHARED = Path(os.environ.get("TUI_ACC_REFERENCE") or REPO.parent / "shared" / "reference")
GROUPS = ("families", "sensitivity", "models", "reference", "gpu", "demo")

Culprit = Callable[[str, NodeTree], bool]  # is this node (at a fault's token) the injected fault


@dataclass(frozen=True)
class Pair:
    """One golden/test pair to judge, and where its faults are (none: a clean run)."""

    group: str
    name: str
    golden: Path
    test: Path
    faults: dict[int, Culprit] = field(default_factory=dict)
    skip_before: bool = True  # tokens before the first fault repeat a clean run's: not judged


def _unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def _prefix(*prefixes: str) -> Culprit:
    return lambda name, tree: name.startswith(prefixes)


def _exact(wanted: str) -> Culprit:
    return lambda name, tree: name == wanted


def _module_call(module: str, token: int) -> Culprit:
    """msprobe's record of module ``module``'s call at ``token`` (not the modules inside it)."""
    pattern = re.compile(rf"Module\.{re.escape(module)}\.\w+\.forward\.{token}$")
    return lambda name, tree: pattern.match(name) is not None


def _inside(prefix: str, api: str) -> Culprit:
    """An API call whose module is ``prefix``'s (msprobe mix: the call, not the module, is local)."""

    def culprit(name: str, tree: NodeTree) -> bool:
        parent = tree.nodes[name].parent if name in tree.nodes else None
        return name.startswith(api) and parent is not None and parent.startswith(prefix)

    return culprit


def _pattern(pattern: re.Pattern[str]) -> Culprit:
    return lambda name, tree: pattern.match(name) is not None


def families(work: Path) -> Iterator[Pair]:
    for archive in sorted((DATA / "families").glob("*.tar.xz")):
        folder = _unpack(archive, work) / archive.name.removesuffix(".tar.xz")
        case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
        if (folder / "clean").is_dir():
            yield Pair("families", f"{folder.name}/clean", folder / "golden", folder / "clean")
        faults = {t: _pattern(p) for t, p in expected_of(case).items()}
        yield Pair("families", f"{folder.name}/test", folder / "golden", folder / "test", faults)


def models(work: Path) -> Iterator[Pair]:
    for archive in sorted((DATA / "models").glob("*.tar.xz")):
        folder = _unpack(archive, work) / archive.name.removesuffix(".tar.xz")
        case = json.loads((folder / "case.json").read_text(encoding="utf-8"))
        faults = {t: _pattern(p) for t, p in expected_of(case).items()}
        yield Pair("models", folder.name, folder / "golden", folder / "test", faults, skip_before=False)


def sensitivity(work: Path, sample: int) -> Iterator[Pair]:
    root = _unpack(DATA / "sensitivity" / "sweep.tar.xz", work) / "sweep"
    for level in ("L0", "mix"):
        runs = sorted(p.name for p in (root / level).iterdir() if (p / "case.json").is_file())
        faulty = [r for r in runs if r != "clean"][::sample]
        for run in ["clean", *faulty]:
            info = json.loads((root / level / run / "case.json").read_text(encoding="utf-8"))
            faults: dict[int, Culprit] = {}
            if info["kind"] in ("noise", "scale"):
                faults = {info["token"]: _exact(info["first_difference"]["record"])}
            elif run == "bug-int8-weight":
                gate = "Module.model.layers.2.mlp.gate_proj."
                found = _prefix(gate) if level == "L0" else _inside(gate, "Functional.linear.")
                faults = dict.fromkeys(range(4), found)
            elif run == "bug-rope-theta":
                faults = dict.fromkeys(range(4), _prefix("Module.model.rotary_emb."))
            yield Pair(
                "sensitivity", f"{level}/{run}", root / level / "golden", root / level / run / "test", faults
            )


def reference(work: Path) -> Iterator[Pair]:
    root = SHARED if (SHARED / "msprobe-L0").is_dir() else DATA / "reference"
    where = "full" if root == SHARED else "compact"
    for case, golden, tests in (
        ("msit-torch-2layer", "golden", ("test",)),
        ("msit-torch-logits", "golden", ("test",)),
        ("msit-torch-12layer-vs-atb", "golden", ("test_torch_bf16", "test_atb")),
        ("msit-torch-stats", "golden", ("test",)),
        ("msprobe-L0/tensor", "golden", ("test",)),
        ("msprobe-L0/statistics", "golden", ("test",)),
    ):
        for test in tests:
            if (root / case / test).is_dir():
                yield Pair("reference", f"{where}:{case}/{test}", root / case / golden, root / case / test)


def gpu(work: Path) -> Iterator[Pair]:
    archive = SHARED / "gpu-msprobe-L0" / "gpu-msprobe-L0.tar.xz"
    if not archive.is_file():
        return
    port = _unpack(archive, work) / "gpu-msprobe-L0"
    for run in sorted(p.name for p in port.iterdir() if p.name != "golden" and p.is_dir()):
        info = json.loads(next((port / run).glob("*_info.json")).read_text(encoding="utf-8"))
        faults: dict[int, Culprit] = {}
        if "fault" in info:
            token = info["fault"]["tid"]
            faults = {token: _module_call(info["fault"]["module"], token)}
        elif run == "bug-quant-gate4":
            faults = dict.fromkeys(range(5), _prefix("Module.model.layers.4.mlp.gate_proj."))
        yield Pair("gpu", run, port / "golden", port / run, faults)


def demo(work: Path) -> Iterator[Pair]:
    out = work / "demo"
    command = [sys.executable, "-m", "tui_acc", "demo", "--no-tui", "--baseline", "--out", str(out)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    fault = json.loads((out / "demo.json").read_text(encoding="utf-8"))["fault"]
    yield Pair("demo", "baseline", out / "golden", out / "baseline")
    faults = {fault["token"]: _exact(fault["module"])}
    yield Pair("demo", "test", out / "golden", out / "test", faults, skip_before=False)


def pairs(groups: list[str], work: Path, sample: int) -> Iterator[Pair]:
    makers: dict[str, Callable[[Path], Iterator[Pair]]] = {
        "families": families,
        "sensitivity": lambda w: sensitivity(w, sample),
        "models": models,
        "reference": reference,
        "gpu": gpu,
        "demo": demo,
    }
    for group in groups:
        folder = work / group
        folder.mkdir()
        yield from makers[group](folder)
