"""The hot path runs without torch: a report on torch's own .pth/.pt dumps never imports it, the
kernel loads in the background, and the engine sizes its pool from the cores it may use."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# Runs the CLI in a fresh interpreter, then says which heavy modules the run imported (stderr, so
# the report's JSON on stdout stays whole).
_REPORT_AND_TELL = """
import sys
from tui_acc.cli.main import main
code = main(["report", "--json", "--no-cache", *sys.argv[1:]])
print(sorted(m for m in ("torch", "pandas") if m in sys.modules), code, file=sys.stderr)
"""


def _report_imports(golden: Path, test: Path) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT_AND_TELL, str(golden), str(test)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return json.loads(done.stdout), done.stderr.strip().splitlines()[-1]


def test_a_report_on_torch_dumps_never_imports_torch(demo_pair) -> None:
    """The demo's dumps are .pth files written by torch.save (msit's torch layout)."""
    report, imported = _report_imports(demo_pair.golden, demo_pair.test)
    assert imported == "[] 1"  # nothing heavy imported; exit 1: the injected fault was found
    assert report["first_failing_op"]["golden"] == "root.model.layers.2.mlp.down_proj"


def test_a_report_on_an_msprobe_dump_never_imports_torch(model_case) -> None:
    case = model_case("llama-msprobe-L1")
    expected = json.loads((case / "case.json").read_text())
    report, imported = _report_imports(case / "golden", case / "test")
    assert imported == "[] 1"
    assert report["first_failing_token"] == expected["fault_token"]


def test_the_kernel_loads_in_the_background_once() -> None:
    from tui_acc.metrics import fastkernel, kernel_loading

    if not fastkernel.available():
        pytest.skip("numba is not installed here: the numpy kernel needs no loading")
    kernel_loading.start_loading()
    first = kernel_loading._thread
    kernel_loading.start_loading()
    assert kernel_loading._thread is first is not None
    first.join()
    kernel = fastkernel.compiled(fastkernel.kernel_name())
    assert not isinstance(kernel, str), kernel
    if fastkernel.kernel_name() == "numba":
        assert len(kernel.signatures) >= 2  # type: ignore[attr-defined]  # float32 and float64 chunks


def test_the_engine_uses_the_cores_it_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """taskset or a container's cpuset, not the machine's core count."""
    import os

    from tui_acc.metrics import engine

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    assert engine.usable_cores() == 1


def test_the_check_across_ranks_never_imports_torch(ranks_case) -> None:
    """msprobe's .pt files of a real two-rank run: the goldens are float64 sums, the metrics numpy's."""
    case = ranks_case("msprobe-tp2")
    tell = _REPORT_AND_TELL.replace('"--no-cache", ', "")
    done = subprocess.run(
        [sys.executable, "-c", tell, "--ranks", str(case / "step0")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stderr.strip().splitlines()[-1] == "[] 1"
    assert json.loads(done.stdout)["first_bad"] is not None


# --- torch is optional: each use of it says which extra brings it -------------------------------------


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _torch_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import torch at run time (annotations' imports under TYPE_CHECKING aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for_types = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node.test)
        for inner in ast.walk(node)
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module or ""]
        else:
            continue
        if id(node) not in for_types and any(m.split(".")[0] == "torch" for m in modules):
            lines.append(node.lineno)
    return lines


def test_torch_is_imported_in_one_place_only() -> None:
    """require_torch: so every use of torch fails the same clear way where torch is not installed."""
    sites = {
        path.relative_to(REPO).as_posix(): lines
        for path in (REPO / "tui_acc").rglob("*.py")
        if (lines := _torch_imports(path))
    }
    assert (
        list(sites) == ["tui_acc/dumps/torchfile/arrays.py"]
        and len(sites["tui_acc/dumps/torchfile/arrays.py"]) == 1
    )
    source = (REPO / "tui_acc/dumps/torchfile/arrays.py").read_text(encoding="utf-8").splitlines()
    function = next(
        line
        for line in reversed(source[: sites["tui_acc/dumps/torchfile/arrays.py"][0]])
        if line.startswith("def ")
    )
    assert function.startswith("def require_torch(")


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import torch`` fails from here on, as where torch is not installed."""
    monkeypatch.setitem(sys.modules, "torch", None)


def test_a_legacy_torch_file_without_torch_names_the_file_and_the_extra(tmp_path: Path, monkeypatch) -> None:
    import torch

    from tui_acc.dumps.policy import ANYWHERE
    from tui_acc.dumps.tensors import TensorLoadError, load_tensor

    path = tmp_path / "old.pth"
    torch.save(torch.ones(3), path, _use_new_zipfile_serialization=False)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(TensorLoadError) as caught:
        load_tensor(path, ANYWHERE)
    assert str(caught.value).startswith(f"{path}: reading torch's legacy (non-zip) format needs torch")
    assert "pip install 'tui-acc[torch]'" in str(caught.value)


@pytest.mark.usefixtures("without_torch")
def test_torch_arithmetic_without_torch_names_the_extra() -> None:
    import numpy as np

    from tui_acc.dumps.torchfile.arrays import TorchMissing, to_torch
    from tui_acc.metrics.compat import msit_metrics
    from tui_acc.reports.compat import _native_stats

    values = np.ones(4, np.float32)
    for call in (
        lambda: to_torch(values),
        lambda: msit_metrics(values, values),
        lambda: _native_stats("NPU", values),
    ):
        with pytest.raises(
            TorchMissing, match=r"needs torch, which is not installed here: pip install 'tui-acc\[torch\]'"
        ):
            call()


@pytest.mark.usefixtures("without_torch")
def test_report_compat_without_torch_says_so_and_writes_nothing(demo_pair, tmp_path: Path, capsys) -> None:
    from tui_acc.cli.main import main

    csv = tmp_path / "msit.csv"
    argv = [
        "report",
        str(demo_pair.golden),
        str(demo_pair.test),
        "--compat",
        "msit",
        "--csv",
        str(csv),
        "--no-cache",
    ]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith("tui-acc: error: report --compat msit needs torch") and "tui-acc[torch]" in error
    assert not csv.exists()
