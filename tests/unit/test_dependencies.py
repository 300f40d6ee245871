"""pyproject's [project] dependencies and its torch extra are exactly what the product imports: a package
the code imports directly is declared (not left to arrive with another one), nothing is declared that it
never imports, and torch is only the extra's (``pip install tui-acc`` never installs or replaces a torch)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys

from tests.conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_levels() -> set[str]:
    """Every top-level module tui_acc names in an import, wherever (deferred, TYPE_CHECKING, try)."""
    found = set()
    for path in (REPO / "tui_acc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"tui_acc", "__future__"}


def _distributions(modules: set[str]) -> set[str]:
    """The distributions that provide ``modules`` (a module not installed here stands for itself)."""
    providers = importlib.metadata.packages_distributions()
    return {_canonical(dist) for module in modules for dist in providers.get(module, [module])}


def _names(requirements: list[str]) -> set[str]:
    return {_canonical(re.split(r"[=<>!~;\[ ]", r)[0]) for r in requirements}


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _declared() -> set[str]:
    """The runtime dependencies, the torch extra (imported only where torch is asked for), the
    xlsx extra (imported only where an .xlsx is written: reports/export.py) and the ray extra
    (imported only by ``ranks --ray``: tui_acc/cluster)."""
    project = _project()
    extras = project["optional-dependencies"]
    return (
        _names(project["dependencies"])
        | _names(extras["torch"])
        | _names(extras["xlsx"])
        | _names(extras["ray"])
    )


def test_torch_is_an_extra_not_a_dependency() -> None:
    project = _project()
    assert "torch" not in _names(project["dependencies"])
    assert _names(project["optional-dependencies"]["torch"]) == {"torch"}


def test_ray_is_an_extra_imported_by_the_cluster_package_alone() -> None:
    """``pip install tui-acc`` never brings Ray; only tui_acc/cluster names it, and only in functions."""
    project = _project()
    assert "ray" not in _names(project["dependencies"])
    assert _names(project["optional-dependencies"]["ray"]) == {"ray"}
    for path in (REPO / "tui_acc").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named = [
            node
            for node in ast.walk(tree)
            if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names))
            or (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").split(".")[0] == "ray"
            )
        ]
        if path.parent.name != "cluster":
            assert named == [], path
        at_top = [node for node in tree.body if node in named]
        assert at_top == [], path  # a module-level import would load Ray with the module


def test_every_imported_package_is_declared() -> None:
    assert _distributions(_imported_top_levels()) - _declared() == set()


def test_every_declared_package_is_imported() -> None:
    assert _declared() - _distributions(_imported_top_levels()) == set()
