"""The README's first command installs tui-acc without torch, and the demo and the report run there.

``pip install tui-acc`` must not bring torch: on a fresh Linux x86-64 machine pip's torch is the CUDA
build (about 2.5 GB), and on an NPU host it would replace the torch that torch_npu was built for. So
pip's own resolution of the README's install is read, unpinned (``--dry-run --report``: no torch,
no CUDA libraries), then the project is installed for real into a fresh virtual environment, from
a copy of its sources, what pip put there read back, and ``tui-acc demo`` and ``tui-acc report`` run
there with no torch importable.

Cost: about 20 s here (the dry run about 5 s; the install, at the suite's pinned versions, takes its
wheels from pip's cache or index, which the README's test command has just filled, and compiles the
C kernel once; the demo and the report about 3 s).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

_SOURCES = ("pyproject.toml", "setup.py", "README.md", "tui_acc")
_INSTALL_TIMEOUT = 900  # seconds: a wall bound for a cold wheel cache, not a timing assertion


def _readme_install() -> list[str]:
    """The README's first command's ``pip install`` arguments (its target is the checkout, ``.``)."""
    first = re.findall(r"```(?:bash|sh)\n(.+?)\n```", (REPO / "README.md").read_text(), re.S)[0]
    (install,) = [part.strip() for part in first.split("&&") if part.strip().startswith("pip install")]
    return install.split()[2:]


def _copy_sources(target: Path) -> Path:
    """What pip builds from, without this checkout's compiled kernel, caches or virtual environments."""
    target.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.egg-info")
    for name in _SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)
    return target


def _run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def test_the_readme_installs_no_torch_and_the_demo_runs_without_it(tmp_path: Path) -> None:
    install = _readme_install()
    assert "torch" not in " ".join(install) and install[-1] == "."  # the command itself asks for none
    source = _copy_sources(tmp_path / "src")

    # what pip would install for the README's command, unpinned, on a machine that has nothing yet:
    # what a user gets, whatever the newest releases of its dependencies need
    report = tmp_path / "resolution.json"
    resolve = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    done = _run([*resolve, "--report", str(report), *install[:-1], str(source)], tmp_path, _INSTALL_TIMEOUT)
    assert done.returncode == 0, done.stderr
    resolved = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "tui-acc" in resolved and {"numpy", "polars", "textual"} <= resolved
    heavy = {name for name in resolved if name in ("torch", "triton") or name.startswith("nvidia-")}
    assert heavy == set(), heavy

    # installed into a fresh environment, a machine that has nothing yet (the suite's pins: pip's
    # wheel cache serves them), and what pip put there read back
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path).returncode == 0
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    constraints = ["-c", str(REPO / "tests" / "constraints.txt")]
    done = _run([*pip, *install[:-1], str(source), *constraints], tmp_path, _INSTALL_TIMEOUT)
    assert done.returncode == 0, done.stderr
    listed = "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))"
    installed = {name.lower() for name in _run([str(python), "-c", listed], tmp_path).stdout.split()}
    assert "tui-acc" in installed and {"numpy", "polars", "textual"} <= installed
    heavy = {name for name in installed if name in ("torch", "triton") or name.startswith("nvidia-")}
    assert heavy == set(), heavy
    no_torch = _run([str(python), "-c", "import torch"], tmp_path)
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr

    tui_acc = str(venv / "bin" / "tui-acc")
    demo = _run([tui_acc, "demo", "--no-tui", "--out", str(tmp_path / "demo")], tmp_path)
    assert demo.returncode == 0, demo.stderr
    report_run = _run(
        [tui_acc, "report", "--json", str(tmp_path / "demo" / "golden"), str(tmp_path / "demo" / "test")],
        tmp_path,
    )
    assert report_run.returncode == 1, report_run.stderr  # 1: the demo's fault is found
    assert json.loads(report_run.stdout)["first_failing_op"]["golden"] == "root.model.layers.2.mlp.down_proj"
