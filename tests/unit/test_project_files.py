"""The engine stays headless, CI runs exactly the README's test command, and the repository explains
itself: the documents its code cites are in it, and its tests say what they hold, not where they came
from."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO


def test_core_never_imports_textual() -> None:
    code = (
        "import sys, tui_acc, tui_acc.cli.main, tui_acc.reports.pair, tui_acc.reports.export;"
        "import tui_acc.demo, tui_acc.demo.run;"
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


FORMATS = REPO / "docs" / "formats.md"
# A mention of the formats page, bare or as the target of a Markdown link ([text](docs/formats.md))
_MENTION = re.compile(r"\[[^\]\n]*\]\(([^)\s]*formats\.md)\)|([\w./-]*formats\.md)")
_SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
_ISSUE = re.compile(r"\bissues?\s*#?\s*\d+|\bfinding\s+\d+", re.IGNORECASE)


def _sources() -> list[Path]:
    """The repository's code and tests (its Python files, fixtures' generators included)."""
    return sorted(p for folder in ("tui_acc", "scripts", "tests") for p in (REPO / folder).rglob("*.py"))


def _citing_files() -> list[Path]:
    """Where the formats page may be cited (not this file, which speaks of citations in general)."""
    docs = sorted(p for p in (REPO / "docs").glob("*.md") if p != FORMATS)
    code = [p for p in _sources() if p != Path(__file__).resolve()]
    return [*code, REPO / "README.md", REPO / "DEVELOPERS.md", *docs]


def _formats_sections() -> set[str]:
    """The numbers of docs/formats.md's chapters and sections (``## 2. ATB dumps``, ``### 2.3 ...``)."""
    text = FORMATS.read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M)}


def _citations(text: str) -> Iterator[tuple[str, list[str]]]:
    """Each mention of the formats page: the path it names, and the sections cited in the rest of its
    paragraph (up to a blank line or the end of the docstring)."""
    for match in _MENTION.finditer(text):
        rest = text[match.end() :]
        end = re.search(r"\n\s*\n|\"\"\"", rest)
        paragraph = rest[: end.start() if end else len(rest)]
        yield match.group(1) or match.group(2), _SECTION.findall(paragraph)


def test_the_formats_page_the_code_cites_is_in_the_repository_with_every_section_it_cites() -> None:
    """Every "formats.md" names docs/formats.md (relative to docs/ inside it), every citation in code
    names a section, and every section cited, there or in the page itself, exists."""
    sections = _formats_sections()
    assert {"0", "1.1", "2.3", "3.7", "4.4", "5", "6.4"} <= sections
    wrong: list[str] = []
    cited = 0
    for path in _citing_files():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        expected = "formats.md" if path.parent == FORMATS.parent else "docs/formats.md"
        for named, numbers in _citations(text):
            cited += 1
            if named != expected:
                wrong.append(f"{where}: names {named!r}, not {expected!r}")
            if path.suffix == ".py" and not numbers:
                wrong.append(f"{where}: cites {named} without a section (§N)")
            wrong += [f"{where}: cites §{n}, not in docs/formats.md" for n in numbers if n not in sections]
    own = _SECTION.findall(FORMATS.read_text(encoding="utf-8"))
    wrong += [f"docs/formats.md: refers to §{n}, which it lacks" for n in own if n not in sections]
    assert wrong == []
    assert cited >= 40  # the readers, pairing, compat views, re-dump, scripts and tests cite it


def test_no_code_or_test_names_an_issue_number() -> None:
    """Tests and modules say what behaviour they hold, not which ticket asked for it."""
    found = [
        f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group()}"
        for path in _sources()
        for text in [path.read_text(encoding="utf-8")]
        for m in _ISSUE.finditer(text)
    ]
    assert found == []


DEVELOPERS = REPO / "DEVELOPERS.md"
# an entry of the map: a line that starts at the left edge (``tui_acc/dumps/``, ``tui_acc/rows.py``), or
# a subpackage of the entry above it, indented two spaces (``  torchfile/``)
_ENTRY = re.compile(r"^(?:(\S+)|  ([\w]+/))(?=\s)")


def _map_entries(text: str) -> dict[str, str]:
    """The code block under "## Where things are": each entry's key (``tui_acc/dumps/torchfile/``) and
    its text, continuation lines included."""
    section = text.split("## Where things are", 1)[1]
    block = section.split("```", 2)[1]
    entries: dict[str, str] = {}
    key = parent = ""
    for line in block.splitlines():
        found = _ENTRY.match(line)
        if found and found.group(1):
            key = parent = found.group(1)
        elif found and found.group(2):
            key = parent + found.group(2)
        entries[key] = entries.get(key, "") + line + "\n"
    return entries


def _unnamed_modules(text: str, modules: list[Path]) -> list[str]:
    """The modules (relative to tui_acc's parent) whose file name is not in their package's entry of the
    map: the entry of the deepest package that holds them, or, for a top-level module, an entry of
    top-level modules (``tui_acc/rows.py``). A name written with folders (``screens/help.py``) counts
    where the folders are its own, so ``reports/ranks.py`` does not name ``collectives/ranks.py``."""
    entries = _map_entries(text)
    unnamed = []
    for module in modules:
        where = module.parent.as_posix() + "/"
        if where == "tui_acc/":
            texts = [t for k, t in entries.items() if re.fullmatch(r"tui_acc/\w+\.py", k)]
        else:
            owners = [k for k in entries if k.endswith("/") and where.startswith(k)]
            texts = [entries[max(owners, key=len)]] if owners else []
        pattern = re.compile(rf"(?<![\w./])((?:\w+/)*){re.escape(module.name)}(?!\w)")
        if not any(where.endswith(m.group(1)) for t in texts for m in pattern.finditer(t)):
            unnamed.append(module.as_posix())
    return unnamed


def test_the_map_of_the_code_names_every_module() -> None:
    """DEVELOPERS.md's "Where things are" names every module of tui_acc by its file name, in its
    package's entry: a new module is placed on the map when it is written."""
    modules = sorted(p.relative_to(REPO) for p in (REPO / "tui_acc").rglob("*.py") if p.name != "__init__.py")
    assert len(modules) > 150
    assert _unnamed_modules(DEVELOPERS.read_text(encoding="utf-8"), modules) == []


def test_the_map_check_sees_a_module_named_only_in_another_package() -> None:
    text = (
        "## Where things are\n\n```\n"
        "tui_acc/rows.py     row dicts; lazy.py: a mapping\n"
        "tui_acc/dumps/      readers: model.py\n"
        "  msit/             torch_dump.py\n"
        "tui_acc/tui/        the app: screens/help.py, ranks.py\n"
        "tui_acc/reports/    reports/ranks.py, tui/screens/ranks.py\n```\n"
    )
    named = [
        "tui_acc/rows.py", "tui_acc/lazy.py", "tui_acc/dumps/model.py",
        "tui_acc/dumps/msit/torch_dump.py", "tui_acc/tui/screens/help.py",
    ]  # fmt: skip
    unnamed = ["tui_acc/dumps/msit/model.py", "tui_acc/reports/pair.py", "tui_acc/collectives/ranks.py"]
    modules = [Path(m) for m in named + unnamed]
    assert _unnamed_modules(text, modules) == unnamed
