"""The layers stated in pyproject.toml ([tool.importlinter]) hold, and crossing one fails the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

_LINT = (
    "import sys; from importlinter.cli import lint_imports;"
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the ``tui_acc`` package in ``root``, with the contracts of its pyproject.toml."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run([sys.executable, "-c", _LINT], capture_output=True, text=True, cwd=root, env=env)


def test_the_layers_hold() -> None:
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # a reader reaching up into the TUI
        ("dumps/fs.py", "import tui_acc.tui.app", "Layers: front ends"),
        # the engine reaching up into a front end
        ("tolerances/thresholds.py", "from tui_acc.reports import pair", "Layers: front ends"),
        # two front ends of one layer importing each other
        ("reports/pair.py", "import tui_acc.redump.plan", "Layers: front ends"),
        # the headless report drawing with rich
        ("reports/pair.py", "import rich.text", "Headless core"),
        # a cycle inside a package (settings and plan were one)
        ("redump/settings.py", "from tui_acc.redump import plan", "No import cycles within a package"),
        # the screens importing the app that imports them (they were, under TYPE_CHECKING)
        ("tui/screens/base.py", "from tui_acc.tui import app", "No import cycles within a package"),
        # one tool's reader importing another tool's (SGLang's reader borrowing msprobe's call stream)
        ("dumps/sglang/dump.py", "from tui_acc.dumps.msprobe import passes", "Dump readers by tool"),
        # a file format reaching up into a tool's reader
        ("dumps/torchfile/reader.py", "from tui_acc.dumps.msit import torch_dump", "Dumps: writers"),
        # a reader importing a writer (the writers serve the demo and the tests)
        ("dumps/msit/torch_dump.py", "from tui_acc.dumps.writers import torch_file", "Dumps: writers"),
    ],
)
def test_crossing_a_layer_fails(tmp_path: Path, module: str, line: str, contract: str) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "tui_acc", tmp_path / "tui_acc", ignore=shutil.ignore_patterns("__pycache__"))
    crossed = tmp_path / "tui_acc" / module
    crossed.write_text(crossed.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    result = _lint(tmp_path)
    assert result.returncode != 0, result.stdout + result.stderr
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout + result.stderr
