"""The engine stays headless, and CI runs exactly the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def test_core_never_imports_textual() -> None:
    code = (
        "import sys, tui_acc, tui_acc.cli, tui_acc.report, tui_acc.export, tui_acc.demo, tui_acc.demo.run;"
        "from tui_acc import open_comparison;"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_textual_import_outside_tui_folder() -> None:
    offenders = [
        path.relative_to(REPO)
        for path in (REPO / "tui_acc").rglob("*.py")
        if "tui" not in path.relative_to(REPO / "tui_acc").parts[:1]
        and re.search(r"^\s*(from|import) textual", path.read_text(), re.M)
    ]
    assert offenders == []


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```(?:bash|sh)\n(.+?)\n```", text, re.S)


def test_ci_runs_the_readme_test_command() -> None:
    commands = _readme_commands()
    assert len(commands) >= 2
    demo, tests = commands[0].strip(), commands[1].strip()
    assert demo.endswith("tui-acc demo")
    assert "pip install torch==2.13.0" in tests and tests.endswith("python -m pytest")
    assert "-c tests/constraints.txt" in tests
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_ruff_and_mypy_are_clean() -> None:
    for command in (
        [sys.executable, "-m", "ruff", "check", "."],
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        [sys.executable, "-m", "mypy"],
    ):
        result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_test_tools_are_pinned() -> None:
    """The suite passes tomorrow as today: no tool it runs comes in at whatever release is newest."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    test_extra = project["optional-dependencies"]["test"]
    assert {"ruff", "mypy", "textual", "pytest"} <= {re.split("[=<>]", r)[0] for r in test_extra}
    assert [r for r in test_extra if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", r)] == []
    # and the README's test command pins everything else too, the same versions of those
    pins = {}
    for line in (REPO / "tests" / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[_canonical(name)] = version
    assert {_canonical(r.split("==")[0]): r.split("==")[1] for r in test_extra}.items() <= pins.items()
    runtime = {_canonical(re.split("[=<>; ]", r)[0]) for r in project["dependencies"]} - {"torch", "tomli"}
    assert runtime <= pins.keys()  # torch is installed first, at its own pin; tomli is for Python 3.10


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_short_names_tell_siblings_apart() -> None:
    from tui_acc.tui.formatting import short_name

    assert short_name("root.model.layers.2") == "layers.2"
    assert short_name("root.model.layers.2.mlp") == "mlp"
    assert short_name("8_LlamaLayer/7_LinearOperation") == "7_LinearOperation"
    assert short_name("mlp1.0.debug") == "mlp1.0"  # msprobe level debug's saves
    assert short_name("Module.model.layers.0.mlp.LlamaMLP.forward.3") == "mlp"
    assert short_name("Module.model.layers.1.LlamaDecoderLayer.forward.0") == "layers.1"
    assert short_name("Functional.linear.5.forward") == "linear.5"
